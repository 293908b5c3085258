"""What ``Model.generate`` returns, what it reports while it runs, and the JSON record of a conversation that the
command line (``--json``) and the app (``conversation.json``) write: :func:`conversation_json`, fields in
``CONVERSATION_FIELDS``."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence

import numpy as np


@dataclass(frozen=True)
class FrameUpdate:
    """Passed to the progress callback after every timeline frame: ``progress(done, total, update)``."""

    stage: str  # "prompt" (before the first position: set-up, prompt prefill), then "frames"
    elapsed_s: float  # wall time since generate() started
    frames_per_second: float  # timeline frames computed per wall second so far (12.5 = real time)
    text: str  # the assistant's text so far
    function_text: str  # the function channel so far
    frame: Any = None  # "frames": the voicechat.Frame just finished (its new answer samples in .audio)


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
    first_frame: int  # position of text_tokens[0] / audio_codes[0] (0 in reference mode, else the prompt length)
    prompt_frames: int  # system-prompt positions at the head of the timeline
    input_frames: int  # timeline positions that carry the user's recording (the rest is appended silence)
    frame_seconds: float  # 0.08
    timings: dict = field(default_factory=dict)  # stage -> seconds
    stage_calls: dict = field(default_factory=dict)  # stage -> seconds of each call (per frame for llm/tts/codec)
    settings: dict = field(default_factory=dict)  # the resolved generation settings
    tool_calls: tuple = ()  # voicechat.tools.ToolCall per call the model made (docs/tools.md)
    held_positions: tuple = ()  # the positions tool exchanges held: the user's frames waited (docs/tools.md §5)

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate


# ----------------------------------------------------------------------------------------------------------------
# the conversation record (schema "voicechat.conversation/1")
# ----------------------------------------------------------------------------------------------------------------
CONVERSATION_SCHEMA = "voicechat.conversation/1"
CONVERSATION_FIELDS = {
    "schema": "this schema's name and version, " + CONVERSATION_SCHEMA,
    "source": '"cli" (python -m voicechat generate --json), "batch" (python -m voicechat batch: each item\'s '
              'conversation.json), "app" (conversation.json) or "live" (the app\'s Talk live tab, and python -m '
              'voicechat live --save, whose record adds "live": the call\'s numbers)',
    "created": "local time of writing, ISO 8601",
    "model": "the checkpoint: Hub repo id or folder",
    "demo_model": "true for the app's random-weight demo model",
    "input_file": "the recording's file name (no folder)",
    "input_sample_rate": "the recording's own rate (Hz)",
    "input_seconds": "the recording's length",
    "system_prompt": "the system prompt (empty: none)",
    "seed": "the seed",
    "voice": "the voice the answer was spoken in (docs/voices.md): a name of the voice library, or a file's name",
    "generation_config": "every GenerationConfig field as asked",
    "user_transcript": "what the model heard (RNNT transcript; empty without a transcript head)",
    "assistant_text": "the assistant's words",
    "function_text": "the function (tool-call) channel",
    "text_pieces": "[[frame, token id, text], ...]: each assistant token (no pad, BOS, EOS) at its timeline frame",
    "function_pieces": "[[frame, token id, text], ...]: each function-channel token (no pad) at its frame",
    "turn_starts": "frames where the assistant started a turn (BOS)",
    "turn_ends": "frames where it ended one (EOS)",
    "frame_seconds": "seconds per timeline frame (0.08)",
    "first_frame": "timeline frame of text_tokens[0] (0 in reference mode, else the prompt length)",
    "prompt_frames": "timeline frames of the system prompt",
    "input_frames": "timeline frames that carry the recording (the rest is appended silence)",
    "text_tokens": "text token id of every frame from first_frame",
    "function_tokens": "function token id of every frame from first_frame",
    "audio_codes": "the 31 codec codes of every frame from first_frame",
    "answer_file": "the answer WAV's file name (no folder)",
    "answer_sample_rate": "the answer's rate (22050)",
    "answer_seconds": "the answer's length",
    "timings_s": "seconds per stage",
    "wall_seconds": "wall time of the whole run",
    "settings": "the resolved settings (Result.settings: the generation config, seed, prompt, TTS sampling used)",
    "tool_calls": "each tool call (docs/tools.md): name, arguments, result or error, seconds, and its frames: "
                  "call_start/call_end (the call), injection_start/injection_end (the response), end (EOTR), eotr",
}


def conversation_json(answer: Any, *, source: str, model: str, input_file: str, input_sample_rate: int,
                      input_seconds: float, system_prompt: str, seed: int, generation_config: Any,
                      answer_file: Optional[str] = None, demo_model: bool = False) -> dict:
    """The record of one conversation, with exactly the keys of ``CONVERSATION_FIELDS`` (JSON values only).

    ``answer``: what ``voicechat.answer.make_answer`` returns (the :class:`Result` with each channel's tokens at the
    frames where they were emitted); ``generation_config``: the GenerationConfig asked with."""
    r: Result = answer.result
    return {
        "schema": CONVERSATION_SCHEMA, "source": source, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": str(model), "demo_model": bool(demo_model), "input_file": input_file,
        "input_sample_rate": int(input_sample_rate), "input_seconds": round(float(input_seconds), 3),
        "system_prompt": system_prompt, "seed": int(seed), "voice": r.settings.get("voice"),
        "generation_config": asdict(generation_config),
        "user_transcript": r.user_transcript, "assistant_text": r.text, "function_text": r.function_text,
        "text_pieces": pieces_json(answer.text_pieces), "function_pieces": pieces_json(answer.function_pieces),
        "turn_starts": [int(f) for f in answer.turn_starts], "turn_ends": [int(f) for f in answer.turn_ends],
        "frame_seconds": float(r.frame_seconds), "first_frame": int(r.first_frame),
        "prompt_frames": int(r.prompt_frames), "input_frames": int(r.input_frames),
        "text_tokens": np.asarray(r.text_tokens).tolist(), "function_tokens": np.asarray(r.function_tokens).tolist(),
        "audio_codes": np.asarray(r.audio_codes).tolist(), "answer_file": answer_file,
        "answer_sample_rate": int(r.sample_rate), "answer_seconds": round(r.seconds, 3),
        "timings_s": {k: round(float(v), 4) for k, v in r.timings.items()},
        "wall_seconds": round(float(answer.wall_seconds), 3), "settings": r.settings,
        "tool_calls": [call.to_dict() for call in r.tool_calls],
    }


def pieces_json(pieces: Sequence) -> list:
    """[[frame, token id, text], ...] (the app's timeline reads the same pieces)."""
    return [[int(p.frame), int(p.token_id), p.text] for p in pieces]
