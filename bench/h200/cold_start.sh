#!/bin/bash
# Optional device call (after call 4, on a machine that was not given ptx.tgz): where a start's time goes with MLX's
# kernel caches empty (a fresh GPU machine), then in a second process with them filled. The checkpoint's generation
# in call 4 compiled a few kernels of its own, so the first process gets empty caches of its own.
set -o pipefail
. bench/h200/env.sh
export MLX_PTX_CACHE_DIR=$HOME/ptx_cold CUDA_CACHE_PATH=$HOME/nv_cold
T0=$(date +%s)
for n in ${RUNS:-1 2}; do
  echo "=== process $n ($(( $(date +%s) - T0 )) s)" | tee -a $OUT/cold_start.log
  timeout ${LIMIT:-540} python3 -m bench.cold_start $HOME/vc_mlxaudio --json $OUT/cold_start_$n.json \
    2>&1 | tee -a $OUT/cold_start.log
done
echo "cold start after $(( $(date +%s) - T0 )) s"
