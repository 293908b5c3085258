#!/bin/bash
# Optional device call (after call 4): MLX settings against the defaults, on the session frame. SETTINGS holds
# space-separated NAME=VALUE items (each its own process); `python -m bench.frame_split` (160 measured
# positions) in fresh processes, alternating with the defaults, ROUNDS (2) each. Output: $OUT/settings.log.
set -o pipefail
. bench/h200/env.sh
T0=$(date +%s)
for round in $(seq ${ROUNDS:-2}); do
  for setting in "(defaults)" $SETTINGS; do
    echo "=== round $round: $setting ($(( $(date +%s) - T0 )) s)" | tee -a $OUT/settings.log
    [ "$setting" = "(defaults)" ] && extra= || extra=$setting
    env $extra timeout 280 python3 -m bench.frame_split $HOME/vc_mlxaudio --frames ${FRAMES:-160} 2>&1 \
      | tee -a $OUT/settings.log
  done
done
echo "settings after $(( $(date +%s) - T0 )) s"
