#!/bin/bash
# Device call 6: our bench on the same checkpoint, with the 2-minute session (p99, max, slow frames, memory).
set -o pipefail
. bench/h200/env.sh
T0=$(date +%s)
timeout 560 python3 -m voicechat bench --model $HOME/vc_mlxaudio --frames 72 --runs 3 --minutes ${MINUTES:-2} \
  --json $OUT/bench_long.json 2>&1 | tee $OUT/bench_long.log
echo "bench after $(( $(date +%s) - T0 )) s"
