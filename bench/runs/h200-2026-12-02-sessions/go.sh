# Device call 3: install, the full-size random checkpoint (the release's shapes, 4-bit LLM), then the sessions bench
# per N in its own process (smallest first, so results arrive as they come), in the background (setsid) so a later
# call can collect it.
set -o pipefail
. .gpu/env.sh
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device())' || exit 5
CK=$HOME/vc_mlxaudio; T0=$(date +%s)
[ -f $CK/config.json ] || python3 .gpu/gen_ckpt.py --out $CK 2>&1 | tail -3
du -sh $CK; echo "checkpoint after $(( $(date +%s) - T0 )) s"
cat > $HOME/bench.sh <<EOS
cd $PWD; . .gpu/env.sh >/dev/null
for n in \${COUNTS:-1 8 32 64 16 4 2}; do
  echo "=== N=\$n \$(date +%T)"
  python3 -m voicechat bench --model $CK --sessions \$n --frames \${FRAMES:-100} --json \$HOME/sessions_\$n.json
done
echo "=== done \$(date +%T)"
EOS
setsid nohup bash $HOME/bench.sh > $HOME/bench.log 2>&1 < /dev/null &
bash .gpu/collect.sh ${WAIT:-480}
