#!/bin/bash
# Device call 5: voicechat and mlx-audio side by side on the checkpoint (fresh processes, alternating rounds).
set -o pipefail
. bench/h200/env.sh
T0=$(date +%s)
timeout 560 python3 -m bench.side_by_side --ckpt $HOME/vc_mlxaudio --mlx-audio-python python3 \
  --frames 72 --runs ${RUNS:-3} --rounds ${ROUNDS:-2} --json $OUT/side_by_side.json 2>&1 | tee $OUT/side_by_side.log
echo "side by side after $(( $(date +%s) - T0 )) s"
