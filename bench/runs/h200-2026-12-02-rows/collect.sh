for i in $(seq 1 $(( ${1:-400} / 10 ))); do grep -q "=== done" $HOME/job.log 2>/dev/null && break; sleep 10; done
cat $HOME/job.log; mkdir -p $OUT; cp $HOME/job.log $HOME/*.json $HOME/*.txt $OUT/ 2>/dev/null
tar czf $OUT/ptx.tgz -C $HOME ptx 2>/dev/null; nvidia-smi --query-gpu=memory.used --format=csv,noheader; ls -la $OUT
