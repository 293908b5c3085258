# Sourced by the later device calls: installs the carried wheels once (mlx + mlx-cuda-13 0.32.4, soxr, and mlx-audio
# 0.6.2 where it was carried: the side-by-side runs) into $HOME/site, then sets the environment. The image has
# everything else the engines import (KINDS.md).
P=$HOME/parts; S=$HOME/site
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MLX_PTX_CACHE_DIR=$HOME/ptx
export PYTHONPATH=$S:$PWD
[ -f $P/ptx.tgz ] && [ ! -d $HOME/ptx ] && tar xzf $P/ptx.tgz -C $HOME  # an earlier run's kernel cache, if carried
PEER=$(ls $P/mlx_audio-*.whl >/dev/null 2>&1 && echo ", mlx_audio")
if ! python3 -c "import soxr, mlx.core$PEER" 2>/dev/null; then
  W=$P/mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
  [ -f $W ] || { cat $P/mlxcuda.part.aa $P/mlxcuda.part.ab $P/mlxcuda.part.ac > $W.part && mv $W.part $W; } || exit 3
  echo "94cb48fba73e5ee39467e51c35c51c691123359ca17bafd1a24cf92ad6732bee  $W" | sha256sum -c - || exit 3
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $S $P/*.whl || exit 4
fi
python3 -c "import mlx.core as mx$PEER; a = mx.ones(4) + 1; mx.eval(a); print('mlx', mx.__version__, mx.default_device())" || exit 5
