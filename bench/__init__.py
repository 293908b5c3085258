"""The lab's benchmarks: a frame's parts, voicechat beside mlx-audio, the H200 runs (bench/README.md).

Run from the repository root: ``python -m bench.<name> --help``. Not installed with the package.
"""

import voicechat  # noqa: F401  (first: its __init__ loads the BLAS before any script here imports mlx)
