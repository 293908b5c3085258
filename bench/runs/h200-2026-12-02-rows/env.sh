# Sourced by each device call: the carried wheels (mlx + mlx-cuda-13 0.32.4 in three parts, soxr) installed once into
# $HOME/site; the code to measure is .gpu/code (a copy of the branch under test).
P=$HOME/parts; S=$HOME/site
mkdir -p $P; cp .whl/* $P/ 2>/dev/null
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false MLX_PTX_CACHE_DIR=$HOME/ptx
export PYTHONPATH=$S:$PWD/.gpu/code
if [ -f $P/mlxcuda.part.ac ] && ! python3 -c 'import soxr, mlx.core' 2>/dev/null; then
  W=$P/mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
  [ -f $W ] || cat $P/mlxcuda.part.aa $P/mlxcuda.part.ab $P/mlxcuda.part.ac > $W || exit 3
  echo "94cb48fba73e5ee39467e51c35c51c691123359ca17bafd1a24cf92ad6732bee  $W" | sha256sum -c - || exit 3
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $S $P/*.whl || exit 4
fi
ls $P; nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
