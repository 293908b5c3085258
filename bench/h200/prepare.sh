#!/bin/bash
# Device call 4: install, then ONE full-size random checkpoint in mlx-audio's layout ($HOME/vc_mlxaudio, 8.6 GB, made
# on the GPU by the peer harness's h200/gen_ckpt.py, carried as $GEN_CKPT); both engines load this one folder.
set -o pipefail
. bench/h200/env.sh
T0=$(date +%s); CK=$HOME/vc_mlxaudio
if [ ! -f $CK/config.json ]; then
  python3 ${GEN_CKPT:-bench/h200/gen_ckpt.py} --out $CK 2>&1 | tail -2 || exit 6
fi
du -sh $CK; df -h $HOME | tail -1; echo "checkpoint after $(( $(date +%s) - T0 )) s"
