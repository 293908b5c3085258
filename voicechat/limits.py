"""What a user may set for a conversation, checked in one place (docs/limits.md): the system prompt, the seed, the
sampling values and the appended silence. The CLI, the app, the Python API and the Realtime server all refuse a bad
value with the same one-line :class:`SettingError` before any model work; its ``param`` names the setting.

``GenerationConfig`` checks its values when it is made (:func:`check_generation`); a session checks its prompt and
seed (:func:`checked_prompt`, :func:`checked_seed`, :func:`check_prompt_positions`) before the prompt reaches the LLM.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any, Callable, Optional

from .frame import FRAME_SECONDS
from .errors import VoiceChatError

# positions: NVIDIA's streaming max_len (655 s, docs/streaming.md §7); the TTS window is 7500 more
TIMELINE_LIMIT = 8192
# A system prompt takes timeline positions ([bos] + its tokens + [eos]) before the first user frame, each one a TTS
# and codec step as well as an LLM row: a quarter of the timeline (2.7 minutes of it) is far more than any
# instruction needs and leaves three quarters for the conversation.
MAX_PROMPT_POSITIONS = TIMELINE_LIMIT // 4
# Characters checked before the tokenizer runs (it takes time and memory by the character): a token of a system
# prompt is at least one character, so no longer text can fit in MAX_PROMPT_POSITIONS after a generous margin.
MAX_PROMPT_CHARS = 16 * MAX_PROMPT_POSITIONS
DEFAULT_IDLE_SECONDS = 60.0  # a Realtime connection that sends no audio for this long is closed (serve --idle-timeout)
DEFAULT_DRAIN_SECONDS = 10.0  # after SIGTERM, open conversations go on this long (serve --drain-seconds)
# audio a Realtime client may send ahead of real time (serve --max-ahead-seconds): a network's jitter, not a recording
DEFAULT_AHEAD_SECONDS = 2.0
SEED_LIMIT = 2 ** 64  # seeds are 0 .. 2^64 - 1: MLX's random key takes an unsigned 64-bit integer
# a client's recording checked, or made a voice, on a thread (docs/limits.md §2): 600 s of it at 48 kHz took
# 1-2 s on the shared 2-core machine
WORK_SECONDS = 30.0


class SettingError(VoiceChatError):
    """A conversation setting out of its range: one line naming it; ``param`` is the setting's name."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class TimedOut(VoiceChatError):
    """Work that passed its time limit: one line; its thread may still run, but what it makes is not kept."""


class TimeLimit:
    """Work of a client's request run on a thread, waited for at most ``seconds`` (docs/limits.md §2). A worker that
    changes state calls :meth:`keep` first: past the limit it raises there and changes nothing; once it has kept,
    its result stands and the waiter takes it."""

    def __init__(self, what: str, seconds: float = WORK_SECONDS):
        self.what, self.seconds = what, seconds
        self._lock = threading.Lock()
        self._state = "running"  # then "kept" by the worker, or "given up" by the waiter: whichever comes first

    def error(self) -> TimedOut:
        return TimedOut(f"{self.what} took more than {self.seconds:g} s; nothing was kept")

    def keep(self) -> None:
        """The worker's: may it change state now? Raises :class:`TimedOut` when the waiter has given up."""
        with self._lock:
            if self._state == "given up":
                raise self.error()
            self._state = "kept"

    def _give_up(self) -> bool:
        with self._lock:
            if self._state == "kept":
                return False
            self._state = "given up"
            return True

    async def run(self, fn: Callable, *args) -> Any:
        """``fn(*args)`` on a thread: its result, or :class:`TimedOut` after ``seconds`` (its late result or error
        is dropped when it ends)."""
        work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        work.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved: no warning when late
        try:
            return await asyncio.wait_for(asyncio.shield(work), self.seconds)
        except asyncio.TimeoutError:
            if self._give_up():
                raise self.error() from None
            return await work  # it had kept already: writing a voice takes moments


def _number(value: Any) -> Optional[float]:
    """``value`` as a float when it is a real number (not a bool, not a string), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def check_range(param: str, label: str, value: Any, low: float, high: float = math.inf, *,
                low_open: bool = False) -> None:
    """A finite number with ``low <= value <= high`` (``low < value`` when ``low_open``)."""
    x = _number(value)
    above = x is not None and (x > low if low_open else x >= low)
    if x is None or not math.isfinite(x) or not above or x > high:
        bound = f"{'above' if low_open else 'at least'} {low:g}"
        bound += "" if high == math.inf else f" and at most {high:g}"
        raise SettingError(param, f"{label} must be a finite number {bound} (got {value!r})")


def check_generation(gen) -> None:
    """Every value of a ``GenerationConfig``: what MLX or the timeline cannot take is refused here."""
    most = TIMELINE_LIMIT * FRAME_SECONDS  # the timeline's seconds: no silence longer than it can be appended
    if gen.extra_seconds is not None:
        check_range("extra_seconds", "extra seconds", gen.extra_seconds, 0.0, most)
    check_range("max_extra_seconds", "max extra seconds", gen.max_extra_seconds, 0.0, most)
    check_range("max_input_seconds", "max input seconds", gen.max_input_seconds, 0.0, low_open=True)
    check_range("text_temperature", "the text temperature", gen.text_temperature, 0.0)
    check_range("text_top_p", "the text top-p", gen.text_top_p, 0.0, 1.0, low_open=True)
    check_range("text_repetition_penalty", "the text repetition penalty", gen.text_repetition_penalty, 0.0,
                low_open=True)
    if gen.tts_guidance_scale is not None:
        check_range("tts_guidance_scale", "the TTS guidance scale", gen.tts_guidance_scale, 0.0)
    if gen.tts_top_p is not None:
        check_range("tts_top_p", "the TTS top-p", gen.tts_top_p, 0.0, 1.0, low_open=True)
    if gen.tts_top_k is not None and (isinstance(gen.tts_top_k, bool) or not isinstance(gen.tts_top_k, int)
                                      or gen.tts_top_k < 1):
        raise SettingError("tts_top_k", f"the TTS top-k must be a whole number of at least 1 (got {gen.tts_top_k!r})")
    if gen.tts_noise_scale is not None:
        check_range("tts_noise_scale", "the TTS noise scale", gen.tts_noise_scale, 0.0)


def checked_seed(seed: Any) -> int:
    """A seed of 0 .. 2^64 - 1 (an integral float, as a number box gives, counts)."""
    x = _number(seed)
    if x is None or not math.isfinite(x) or x != int(x) or not 0 <= int(seed) < SEED_LIMIT:
        raise SettingError("seed", f"the seed must be a whole number from 0 to 2^64 - 1 (got {seed!r})")
    return int(seed)


def checked_prompt(prompt: Any) -> str:
    """A system prompt's text: a string of at most MAX_PROMPT_CHARS characters that UTF-8 can encode (a lone UTF-16
    surrogate, or a command-line byte that was not UTF-8, cannot be)."""
    if not isinstance(prompt, str):
        raise SettingError("system_prompt", f"the system prompt must be text (got {type(prompt).__name__})")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise SettingError("system_prompt", f"the system prompt has {len(prompt)} characters; the limit is "
                                            f"{MAX_PROMPT_CHARS} ({MAX_PROMPT_POSITIONS} timeline positions)")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        raise SettingError("system_prompt", f"the system prompt is not valid text: character {e.start} is not "
                                            "Unicode text (a lone surrogate, or bytes that were not UTF-8)") from None
    return prompt


def check_prompt_chars(prompt: str) -> None:
    """The whole prompt the model reads (the system prompt with its tools' declarations) against MAX_PROMPT_CHARS,
    before any tokenizer runs on it: declarations can be long where the system prompt is short."""
    if len(prompt) > MAX_PROMPT_CHARS:
        raise SettingError("system_prompt", f"the system prompt with the tools' declarations has {len(prompt)} "
                                            f"characters; the limit is {MAX_PROMPT_CHARS}: shorten them")


def check_prompt_positions(positions: int) -> None:
    """The prompt's timeline positions ([bos] + tokens + [eos], with the tools' declarations) against the cap."""
    if positions > MAX_PROMPT_POSITIONS:
        raise SettingError("system_prompt", f"the system prompt takes {positions} timeline positions; the limit is "
                                            f"{MAX_PROMPT_POSITIONS} (of the timeline's {TIMELINE_LIMIT}): shorten it")


def run_positions(model, samples: int, prompt: str, gen) -> int:
    """The timeline positions a run computes at most (the progress total): ``prompt``'s (the tools' block included),
    then ``samples`` of recording at the model's input rate and the silence after it (``gen.silence_samples``)."""
    silence = gen.silence_samples(model.config.input_sample_rate)
    return model.prompt_length(prompt) + model.encoder_frames(samples + silence)


def check_timeline(positions: int, param: str, most: int = TIMELINE_LIMIT) -> None:
    """Work whose timeline would pass TIMELINE_LIMIT, or ``most`` (a server's cap on a conversation,
    docs/batching.md §4), is refused before it starts."""
    if positions > most:
        minutes = most * FRAME_SECONDS / 60
        what = "the timeline's" if most == TIMELINE_LIMIT else "this server's cap on a conversation,"
        raise SettingError(param, f"this would take {positions} timeline positions, more than {what} "
                                  f"{most} ({minutes:.1f} minutes): use a shorter recording, prompt or "
                                  "appended silence")
