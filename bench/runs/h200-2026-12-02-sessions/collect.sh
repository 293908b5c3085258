# Wait up to $1 seconds for the bench to finish, then bring back its log, the JSON files and the kernel cache.
for i in $(seq 1 $(( ${1:-480} / 10 ))); do grep -q "=== done" $HOME/bench.log 2>/dev/null && break; sleep 10; done
cat $HOME/bench.log; cp $HOME/bench.log $OUT/ 2>/dev/null
for f in $HOME/sessions_*.json; do [ -f $f ] && cp $f $OUT/; done
nvidia-smi --query-gpu=memory.used --format=csv,noheader
