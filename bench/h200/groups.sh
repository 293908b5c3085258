#!/bin/bash
# Many conversations on one model (docs/batching.md §6), after the three stash.sh calls (the wheels; ptx.tgz, an
# earlier run's kernel cache, in a call of its own): installs, writes the full-size random checkpoint once
# ($HOME/vc_full, `python -m voicechat.random_checkpoint --dims full --layout mlx-4bit`), then runs in the background
# each of RUN (default "sessions rows exactness joins"), and brings back within WAIT seconds (default 420) each one's
# log and JSON and the kernel cache. `bash bench/h200/groups.sh collect` (a later call, the machine still warm) brings
# back what has finished since. Settings: COUNTS (1,8,16,32), FRAMES (240), ROWS (1,4,8,32), EXACT (8), PROMPTS (1,128).
set -o pipefail
. bench/h200/env.sh
CK=$HOME/vc_full
if [ "$1" != collect ]; then
  cat > $HOME/groups_job.sh <<EOS
cd $PWD; . bench/h200/env.sh >/dev/null
T0=\$(date +%s)
[ -f $CK/config.json ] || python3 -m voicechat.random_checkpoint $CK --dims full --layout mlx-4bit 2>&1 | tail -2
echo "checkpoint after \$(( \$(date +%s) - T0 )) s"
for run in ${RUN:-sessions rows exactness joins}; do
  echo "=== \$run \$(date +%T)"
  case \$run in
    sessions) timeout 300 python3 -m voicechat bench --model $CK --sessions ${COUNTS:-1,8,16,32} --frames ${FRAMES:-240} --json \$HOME/sessions.json ;;
    rows) timeout 200 python3 -m bench.rows --model $CK --rows ${ROWS:-1,4,8,32} --runs 20 --json \$HOME/rows.json ;;
    exactness) timeout 120 python3 -m bench.group_exactness --model $CK --sessions ${EXACT:-8} --frames 40 --json \$HOME/exactness.json ;;
    joins) timeout 120 python3 -m bench.joins $CK --running 8 --prompts ${PROMPTS:-1,128} --rounds 1 ;;
  esac 2>&1
done
echo "=== done \$(date +%T)"
EOS
  setsid nohup bash $HOME/groups_job.sh > $HOME/groups.log 2>&1 < /dev/null &
fi
for i in $(seq 1 $(( ${WAIT:-420} / 10 ))); do grep -q "=== done" $HOME/groups.log 2>/dev/null && break; sleep 10; done
cat $HOME/groups.log; cp $HOME/groups.log $HOME/*.json $OUT/ 2>/dev/null
tar czf $OUT/ptx.tgz -C $HOME ptx 2>/dev/null; ls -la $OUT
