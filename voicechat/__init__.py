"""voicechat: NVIDIA NemotronLabs-VoiceChat-11B (full-duplex speech-to-speech) on MLX.

    model = voicechat.load("mlx-community/NemotronLabs-VoiceChat-11B-4bit")   # or a local directory
    result = model.generate("question.wav", system_prompt="You are a helpful assistant.", seed=0)
    result.text, result.function_text, result.user_transcript, result.audio (22.05 kHz)
"""

__version__ = "0.1.0"  # the package's version: pyproject.toml reads it from here (`voicechat --version`)

from . import compute  # noqa: F401  (preloads an optimized BLAS before anything imports mlx)
from .config import NVIDIA_SAMPLING, GenerationConfig
from .errors import (AudioInputError, Cancelled, CheckpointError, ConfigError, ModelUnavailable, TimelineFull,
                     ToolError, VoiceChatError)
from .model import Model, load
from .timeline.conversation import Frame, Session
from .result import FrameUpdate, Result
from .tools import Tool, ToolCall, tool

__all__ = ["load", "Model", "Session", "Frame", "GenerationConfig", "Result", "FrameUpdate", "NVIDIA_SAMPLING",
           "VoiceChatError", "ConfigError", "CheckpointError", "ModelUnavailable", "AudioInputError", "Cancelled",
           "TimelineFull", "Tool", "ToolCall", "tool", "ToolError"]
