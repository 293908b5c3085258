"""What ``Model.generate`` returns, and what it reports while it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class FrameUpdate:
    """Passed to the progress callback after every timeline frame: ``progress(done, total, update)``."""

    stage: str  # "perception", "prompt", "frames", "codec", "transcript"
    elapsed_s: float  # wall time since generate() started
    frames_per_second: float  # timeline frames computed per wall second so far (12.5 = real time)
    text: str  # the assistant's text so far
    function_text: str  # the function channel so far


@dataclass(frozen=True)
class Result:
    text: str  # the assistant's words
    function_text: str  # the function (tool-call) channel
    user_transcript: str  # RNNT transcript of the input ("" when the checkpoint has no RNNT head)
    audio: np.ndarray  # float32 mono answer at sample_rate
    sample_rate: int
    text_tokens: np.ndarray  # [frames] text id per timeline position (see `first_frame`)
    function_tokens: np.ndarray  # [frames] function id per position (pad when the checkpoint has no function head)
    audio_codes: np.ndarray  # [frames, 31] codec codes per position
    first_frame: int  # timeline position of text_tokens[0] / audio_codes[0] (0 in reference mode, else the prompt length)
    prompt_frames: int  # system-prompt positions at the head of the timeline
    input_frames: int  # timeline positions that carry the user's recording (the rest is appended silence)
    frame_seconds: float  # 0.08
    timings: dict = field(default_factory=dict)  # stage -> seconds
    stage_calls: dict = field(default_factory=dict)  # stage -> seconds of each call (per frame for llm/tts/codec)
    settings: dict = field(default_factory=dict)  # the resolved generation settings
    tool_calls: tuple = ()  # voicechat.tools.ToolCall per call the model made (docs/tools.md)

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate
