#!/bin/bash
# Many conversations on one model (docs/batching.md §6), after the three stash.sh calls (the wheels; ptx.tgz, an
# earlier run's kernel cache, in a call of its own): installs, writes the full-size random checkpoint once
# ($HOME/vc_full, `python -m voicechat.random_checkpoint --dims full --layout mlx-4bit`), then runs in the background
# each of RUN (default "sessions rows exactness joins"), and brings back within WAIT seconds (default 420) each one's
# log and JSON and the kernel cache. `bash bench/h200/groups.sh collect` (a later call, the machine still warm) brings
# back what has finished since. Settings: COUNTS (1,8,16,32), FRAMES (240), ROWS (1,4,8,32), EXACT (8: one run per
# count named; a run named exactness:N is that count alone), PROMPTS (1,128), OPROWS (8), MAXMIN (the sessions',
# exactness and rows runs' --max-minutes), TEXACT (each exactness run's limit, 240 s).
# A run named RUN@VAR=VALUE[@VAR=VALUE] runs with those variables set (its JSON files named NAME@VAR-VALUE.json), for
# example sessions:1,64@MLX_USE_CUDA_GRAPHS=0. RUN may also name: sessions:N,M (the sessions run at those counts alone,
# sessions_N-M.json, with @VAR-VALUE in its name when run with variables; with the bench's arguments in SARGS, e.g. sessions:1,64@SARGS=--lookahead=1), dense (bench.rows --dense: the speech path's dense products over M rows, three ways), kernels
# (bench.kernel_profile under Nsight Compute at KROWS rows, default "1 8": each kernel's GPU time in a steady tick) and
# host (the same under py-spy --native, 200 ticks: where MLX's host time goes; needs the py-spy wheel carried);
# sessions_old (the sessions run of an earlier commit's package, carried as bench/old: `mkdir -p bench/old && git
# archive COMMIT voicechat | tar -x -C bench/old`, for a comparison in one lease); qmvrows (bench.qmv_rows: the engine's 4-bit
# product kernel for a group's rows against MLX's); kerneltests (tests/test_rows_kernel.py: each row of our kernels as
# alone, 1 to 128 rows); oprows (bench.op_rows: the frame path's other ops, each row as alone?); optrace (bench.op_trace:
# which op of a real tick gives a row other bits than alone, at OPROWS rows); nocompile:N (exactness at N with
# VOICECHAT_COMPILE=0); encrows (bench.perception_rows at ENCROWS rows, default 1,8,32, compiled and not: the encoder's
# steady frame over the rows against each row's own call, bit for bit?). TSESS: each sessions
# run's limit. The JSON files come back in results.tgz (a call brings back 8 files at most).
set -o pipefail
. bench/h200/env.sh
CK=$HOME/vc_full
CAP=${MAXMIN:+--max-minutes $MAXMIN}  # each conversation's most minutes: 64 full-size ones fit an H200 only with a cap
if [ "$1" != collect ]; then
  cat > $HOME/groups_job.sh <<EOS
cd $PWD; . bench/h200/env.sh >/dev/null
T0=\$(date +%s)
[ -f $CK/config.json ] || python3 -m voicechat.random_checkpoint $CK --dims full --layout mlx-4bit 2>&1 | tail -2
echo "checkpoint after \$(( \$(date +%s) - T0 )) s"
for run in ${RUN:-sessions rows exactness joins}; do
  echo "=== \$run \$(date +%T)"
  envs=""; case \$run in *@*) envs=\${run#*@}; run=\${run%%@*} ;; esac
  tag=""; [ -z "\$envs" ] || tag=@\$(echo \$envs | tr =@ -_)  # a sessions run's JSON is named with it at once
  touch \$HOME/.stamp
  ( [ -z "\$envs" ] || export \${envs//@/ }
  case \$run in
    sessions) timeout \${TSESS:-300} python3 -m voicechat bench --model $CK --sessions ${COUNTS:-1,8,16,32} --frames ${FRAMES:-240} $CAP --json \$HOME/sessions.json ;;
    sessions:*) timeout \${TSESS:-300} python3 -m voicechat bench --model $CK --sessions \${run#sessions:} --frames ${FRAMES:-240} $CAP \$SARGS --json \$HOME/sessions_\$(echo \${run#sessions:} | tr , -)\$tag.json ;;
    sessions_old) (cd bench/old && PYTHONPATH=$S timeout \${TSESS:-300} python3 -m voicechat bench --model $CK --sessions ${OCOUNTS:-${COUNTS:-1,8,16,32}} --frames ${FRAMES:-240} --json \$HOME/sessions_old.json) ;;
    rows) timeout 200 python3 -m bench.rows --model $CK --rows ${ROWS:-1,4,8,32} --runs 20 $CAP --json \$HOME/rows.json ;;
    exactness*) for n in \$([ "\$run" = exactness ] && echo ${EXACT:-8} || echo \${run#exactness:}); do
        timeout \${TEXACT:-240} python3 -m bench.group_exactness --model $CK --sessions \$n --frames 40 $CAP --json \$HOME/exactness_\$n.json; done ;;
    nocompile:*) VOICECHAT_COMPILE=0 timeout \${TEXACT:-240} python3 -m bench.group_exactness --model $CK --sessions \${run#nocompile:} --frames 40 $CAP --json \$HOME/exactness_nocompile_\${run#nocompile:}.json ;;
    encrows) for c in 1 0; do echo "VOICECHAT_COMPILE=\$c"; VOICECHAT_COMPILE=\$c timeout 200 python3 -m bench.perception_rows $CK --sessions ${ENCROWS:-1,8,32} --ticks 20; done ;;
    kerneltests) timeout 300 python3 -m pytest -q -p no:cacheprovider -rs tests/test_rows_kernel.py ;;
    optrace) VOICECHAT_COMPILE=0 timeout 300 python3 -m bench.op_trace --model $CK --rows ${OPROWS:-8} --json \$HOME/op_trace.json ;;
    oprows) for n in ${OPROWS:-8}; do timeout 120 python3 -m bench.op_rows --rows \$n --json \$HOME/op_rows_\$n.json; done ;;
    joins) timeout 120 python3 -m bench.joins $CK --running 8 --prompts ${PROMPTS:-1,128} --rounds 1 ;;
    qmvrows) timeout 300 python3 -m bench.qmv_rows --runs 10 --json \$HOME/qmv_rows.json ;;
    dense) timeout 200 python3 -m bench.rows --model $CK --rows 1 --runs 10 --dense 6 --json \$HOME/dense.json ;;
    kernels) NCU=\$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
      for r in ${KROWS:-1 8}; do
        timeout 400 \$NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum -f \\
          -o \$HOME/k\$r python3 -m bench.kernel_profile --model $CK --rows \$r 2>&1 | grep -v "^==PROF== Profiling"
        \$NCU --import \$HOME/k\$r.ncu-rep --csv --page raw --print-units base --print-kernel-base demangled \\
          > \$HOME/k\$r.csv
      done
      python3 -m bench.kernel_profile --summarize \$(for r in ${KROWS:-1 8}; do echo \$HOME/k\$r.csv; done) ;;
    host) for r in ${KROWS:-1 8}; do
        timeout 300 $S/bin/py-spy record --native -r 200 -f raw -o \$HOME/h\$r.raw -- \\
          python3 -m bench.kernel_profile --model $CK --rows \$r --ticks 200
        python3 -m bench.host_profile \$HOME/h\$r.raw --top 30
      done ;;
  esac 2>&1 )
  [ -z "\$envs" ] || for f in \$(find \$HOME -maxdepth 1 -name "*.json" ! -name "*@*" -newer \$HOME/.stamp); do
    mv \$f \${f%.json}@\$(echo \$envs | tr =@ -_).json; done
done
echo "=== done \$(date +%T)"
EOS
  setsid nohup bash $HOME/groups_job.sh > $HOME/groups.log 2>&1 < /dev/null &
fi
for i in $(seq 1 $(( ${WAIT:-420} / 10 ))); do grep -q "=== done" $HOME/groups.log 2>/dev/null && break; sleep 10; done
cat $HOME/groups.log; cp $HOME/groups.log $OUT/
(cd $HOME && tar czf $OUT/results.tgz $(ls *.json k*.csv 2>/dev/null))
tar czf $OUT/ptx.tgz -C $HOME ptx 2>/dev/null; ls -la $OUT
