. .gpu/env.sh
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device())' || exit 5
[ -d $HOME/ptx ] || { [ -f $HOME/parts/ptx.tgz ] && tar xzf $HOME/parts/ptx.tgz -C $HOME; }
CK=$HOME/vc_full
cat > $HOME/job.sh <<EOS
cd $PWD; . .gpu/env.sh >/dev/null
T0=\$(date +%s)
[ -f $CK/config.json ] || python3 -m voicechat.random_checkpoint $CK --dims full --layout mlx-4bit 2>&1 | tail -2
echo "checkpoint after \$(( \$(date +%s) - T0 )) s"; du -sh $CK
python3 .gpu/dense_probe.py 2>&1 | tee \$HOME/dense_probe.txt
python3 .gpu/rows_relaxed.py --model $CK --rows \${ROWS:-1,8,32} --runs \${RUNS:-20} --json \$HOME/rows.json 2>&1
echo "=== done \$(date +%T)"
EOS
setsid nohup bash $HOME/job.sh > $HOME/job.log 2>&1 < /dev/null &
bash .gpu/collect.sh ${WAIT:-400}
