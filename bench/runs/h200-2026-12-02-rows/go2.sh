. .gpu/env.sh
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device())' || exit 5
[ -d $HOME/ptx ] || { [ -f $HOME/parts/ptx.tgz ] && tar xzf $HOME/parts/ptx.tgz -C $HOME; }
CK=$HOME/vc_full
cat > $HOME/job.sh <<EOS
cd $PWD; . .gpu/env.sh >/dev/null
T0=\$(date +%s)
[ -f $CK/config.json ] || python3 -m voicechat.random_checkpoint $CK --dims full --layout mlx-4bit 2>&1 | tail -2
echo "checkpoint after \$(( \$(date +%s) - T0 )) s"
echo "=== sessions \$(date +%T)"
python3 .gpu/sessions_relaxed.py --model $CK --sessions \${COUNTS:-1,8,16,32} --frames \${FRAMES:-240} --json \$HOME/sessions.json 2>&1
echo "=== rows \$(date +%T)"
python3 -m bench.rows --model $CK --rows \${ROWS:-1,4,8,32} --runs 20 --json \$HOME/rows_after.json 2>&1
echo "=== exactness \$(date +%T)"
python3 -m bench.group_exactness --model $CK --sessions 8 --frames 60 --json \$HOME/exactness.json 2>&1
echo "=== done \$(date +%T)"
EOS
setsid nohup bash $HOME/job.sh > $HOME/job.log 2>&1 < /dev/null &
bash .gpu/collect.sh ${WAIT:-400}
