"""voicechat: NVIDIA NemotronLabs-VoiceChat-11B (full-duplex speech-to-speech) on MLX."""

from . import compute  # noqa: F401  (preloads an optimized BLAS before anything imports mlx)
