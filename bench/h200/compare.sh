#!/bin/bash
# Optional device call (after call 4): this tree against an earlier commit's package, where a change's effect on the
# frame is the question. `python -m bench.frame_split` (a session fed 80 ms at a time, 160 measured
# positions) in fresh processes, alternating, ROUNDS (2) each; then the per-node probe. The earlier package is made
# here before the call: mkdir -p bench/old && git archive COMMIT voicechat bench | tar -x -C bench/old
set -o pipefail
. bench/h200/env.sh
T0=$(date +%s); OLD=$PWD/${OLD:-bench/old}; NEW=$PWD
for round in $(seq ${ROUNDS:-2}); do
  for side in new old; do
    [ $side = new ] && dir=$NEW || dir=$OLD
    echo "=== round $round: $side ($(( $(date +%s) - T0 )) s)" | tee -a $OUT/compare.log
    # python -m puts the working folder first on sys.path: each side runs from its own tree
    (cd $dir && PYTHONPATH=$HOME/site timeout 280 python3 -m bench.frame_split $HOME/vc_mlxaudio \
      --frames ${FRAMES:-160} --nodes 2>&1 | head -20 | tee -a $OUT/compare.log)
  done
done
python3 -m bench.kernels 2>&1 | tee $OUT/kernels.log
echo "compare after $(( $(date +%s) - T0 )) s"
