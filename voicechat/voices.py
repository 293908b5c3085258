"""The voice library: the voices an answer can be spoken in (docs/voices.md).

A voice is the checkpoint's own (a speaker latent inside it, "Aria" in the release) or one the user adds from a
recording. EAR-TTS takes a speaker's voice as its audio prompt: the first 3 s of a recording at the codec's rate,
encoded by the codec at the TTS warm-up (docs/model.md §2.5.9). So an added voice is stored as exactly that prompt,
trimmed of long silences at its ends and resampled, in a folder of its own::

    <library>/<name>/prompt.wav    float32 mono at the codec's rate (what Model._speaker takes as it is)
    <library>/<name>/voice.json    name, date added, the recording's file name, seconds

The app keeps its library in ``<outputs>/voices``, the command line in ``--voices`` (default ``./outputs/voices``).
A :class:`Voice` is what ``Model.generate`` / ``Model.session`` take as ``speaker``; the model encodes a voice's
prompt once and keeps the codes (``Model._warmup_codec_codes``), so a conversation in it costs what the
checkpoint's voice costs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import re
import shutil
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from .audio import check_recording, read_audio, resample, to_float32
from .config import MAX_INPUT_SECONDS, GenerationConfig
from .errors import AudioInputError, VoiceChatError
from .files import write_atomically
from .timeline.recording import answer, open_recording
from .tts.eartts import prompt_samples

LIBRARY_FOLDER = "voices"  # the library's folder inside the app's outputs (and the command line's ./outputs)
DEFAULT = "default"  # the checkpoint's voice, by whatever name it has (or none)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _-]{0,31}")  # also a safe folder name: no path can pass for one
PROMPT_FILE, INFO_FILE = "prompt.wav", "voice.json"
LOCK_FILE = ".changing"  # held while the library changes (VoiceLibrary._changing)
WINDOW_SECONDS = 0.02  # the level is measured per 20 ms
SILENCE_DBFS = -45.0  # a window quieter than this (RMS, dB of full scale) is silence
KEEP_SILENCE_SECONDS = 0.2  # silence kept before the first and after the last sound: only long silences go
MIN_SOUND_SECONDS = 2.0  # a shorter prompt is repeated to fill the TTS's 3 s (docs/model.md §2.5.9): a poor voice
CLIP_LEVEL = 0.99  # a sample at this magnitude or more is at full scale ...
CLIP_FRACTION = 0.001  # ... and a recording with more than this share of them is clipped
PREVIEW_SENTENCE = "Hello! This is the voice I will answer you in."
PREVIEW_FRAMES_PER_TOKEN = 3  # a subword every 240 ms: about the pace of speech
PREVIEW_TAIL_FRAMES = 12  # positions after the sentence's EOS, for its last sound


class VoiceError(VoiceChatError):
    """A voice name that cannot be used (unknown, taken, not a name) or a library that cannot be written."""


@dataclass(frozen=True)
class Voice:
    """A voice of the library: the checkpoint's (``created`` empty) or an added one, whose ``prompt`` is the audio
    prompt (float32 at ``sample_rate``) once :meth:`VoiceLibrary.get` has read it (a listing reads names only)."""

    name: str
    created: str = ""  # when it was added, ISO 8601 ("" for the checkpoint's)
    source: str = ""  # the recording's file name
    seconds: float = 0.0  # the prompt's length
    prompt: Optional[np.ndarray] = None
    sample_rate: int = 0

    @property
    def builtin(self) -> bool:
        return not self.created

    @property
    def speaker(self) -> Any:
        """What ``Model._speaker`` resolves: None (the default), a latent name, or (samples, rate)."""
        if self.builtin:
            return None if self.name == DEFAULT else self.name
        if self.prompt is None:
            raise ValueError(f"the voice {self.name} was listed, not read: take it from VoiceLibrary.get")
        return self.prompt, self.sample_rate

    def describe(self) -> str:
        """One line: the name, and the date and recording it was made from."""
        if self.builtin:
            return f"{self.name} (the checkpoint's voice)"
        return f"{self.name} (added {self.created[:10]} from {self.source}, {self.seconds:.1f} s)"


def checkpoint_voices(model) -> list[str]:
    """The checkpoint's voices, its default first (``Model._speaker``'s order): its speaker latents, after
    ``default`` when the default has no latent's name (a reference WAV)."""
    cfg = model.config
    names = sorted(model.speakers(), key=lambda n: n != cfg.speaker_name)
    named = cfg.speaker_name or (len(names) == 1 and not cfg.speaker_reference)
    return names if named else [DEFAULT, *names]


# ----------------------------------------------------------------------------------------------------------------
# a recording -> an audio prompt
# ----------------------------------------------------------------------------------------------------------------
def window_levels(x: np.ndarray, window: int) -> np.ndarray:
    """RMS per window of ``window`` samples (the last, partial one included), in dB of full scale. [N] -> [W]"""
    padded = np.zeros(-(-len(x) // window) * window, np.float64)
    padded[:len(x)] = x
    rms = np.sqrt(np.mean(padded.reshape(-1, window) ** 2, axis=1))
    return 20 * np.log10(np.maximum(rms, 1e-10))


def sound_span(x: np.ndarray, rate: int) -> tuple[int, int]:
    """[start, end) of ``x`` from its first to its last window above the silence level, with
    ``KEEP_SILENCE_SECONDS`` kept on each side; raises when no window is."""
    window = round(WINDOW_SECONDS * rate)
    levels = window_levels(x, window)
    loud = np.flatnonzero(levels > SILENCE_DBFS)
    if loud.size == 0:
        raise AudioInputError(f"the recording is silent (its loudest 20 ms is at {levels.max():.0f} dBFS); record "
                              "a few seconds of speech closer to the microphone")
    keep = round(KEEP_SILENCE_SECONDS * rate)
    return max(0, loud[0] * window - keep), min(len(x), (loud[-1] + 1) * window + keep)


def audio_prompt(samples: np.ndarray, sample_rate: int, config) -> np.ndarray:
    """A recording (mono float32 at ``sample_rate``) -> the TTS's audio prompt of a checkpoint's ``config``: at the
    codec's rate, long silences at its ends cut, cropped to the prompt's length (the TTS reads no more, docs/model.md
    §2.5.9). A recording that is too short, silent or clipped is refused in one line."""
    x = to_float32(samples)
    check_recording(x, sample_rate)
    rate = config.codec.sample_rate
    x = resample(x, int(sample_rate), rate)
    start, end = sound_span(x, rate)
    x = x[start:end]
    if len(x) < MIN_SOUND_SECONDS * rate:
        raise AudioInputError(f"the recording holds {len(x) / rate:.1f} s of sound; a voice needs at least "
                              f"{MIN_SOUND_SECONDS:g} s of speech (the model listens to the first "
                              f"{config.tts.audio_prompt_duration:g} s)")
    clipped = float(np.mean(np.abs(x) >= CLIP_LEVEL))
    if clipped > CLIP_FRACTION:
        raise AudioInputError(f"the recording is clipped ({100 * clipped:.1f}% of its samples at full scale); "
                              "record it again less loud")
    n = prompt_samples(config.tts.audio_prompt_duration, rate, config.codec.samples_per_frame)
    return np.ascontiguousarray(x[:n], np.float32)


# ----------------------------------------------------------------------------------------------------------------
# the library
# ----------------------------------------------------------------------------------------------------------------
class VoiceLibrary:
    """The voices in ``folder`` after the checkpoint's ``speakers`` (:func:`checkpoint_voices`; the default
    first). Voices the user adds live in ``folder``; the checkpoint's cannot be renamed or removed."""

    def __init__(self, folder: Union[str, Path, None], speakers: Sequence[str] = (DEFAULT,)):
        self.folder = Path(folder) if folder is not None else None  # None: the checkpoint's voices only
        self.speakers = tuple(speakers)

    # ---- reading ------------------------------------------------------------------------------------------------
    def voices(self) -> list[Voice]:
        """Every voice: the checkpoint's first, then the added ones in the order they were added."""
        folders = sorted(self.folder.iterdir()) if self.folder is not None and self.folder.is_dir() else []
        added = [self._read(d, prompt=False) for d in folders]
        added = sorted((v for v in added if v is not None), key=lambda v: (v.created, v.name))
        return [Voice(name) for name in self.speakers] + added

    def names(self) -> list[str]:
        return [v.name for v in self.voices()]

    def get(self, name: str) -> Voice:
        """The voice called ``name`` in any case (``default``: the checkpoint's default); unknown names raise,
        listing the library's."""
        listed = self.find(name)
        if listed is None:
            raise VoiceError(f"no voice called {name!r}; the voices are: {', '.join(self.names())}")
        voice = listed if listed.builtin else self._read(self.folder / listed.name)
        if voice is None:  # removed since it was listed
            raise VoiceError(f"the voice {listed.name} was removed just now")
        return voice

    def find(self, name: str) -> Optional[Voice]:
        """The voice whose name is ``name`` in any case (macOS's folders do not tell "maya" from "Maya"), as listed
        (no prompt); None when there is none."""
        if not isinstance(name, str):
            return None
        return next((v for v in [Voice(DEFAULT), *self.voices()] if v.name.casefold() == name.casefold()), None)

    def _read(self, folder: Path, prompt: bool = True) -> Optional[Voice]:
        """The voice stored in ``folder`` (with its prompt, or its description only), or None when it holds none."""
        info, wav = folder / INFO_FILE, folder / PROMPT_FILE
        if not wav.is_file():
            return None
        try:
            meta = json.loads(info.read_text())
        except (FileNotFoundError, NotADirectoryError):  # not written yet, or removed while it was read
            return None
        voice = Voice(meta["name"], meta["created"], meta["source"], meta["seconds"], sample_rate=meta["sample_rate"])
        return replace(voice, prompt=read_audio(wav)[0]) if prompt else voice

    # ---- changing -----------------------------------------------------------------------------------------------
    def add(self, name: str, audio: Union[np.ndarray, str, Path], sample_rate: Optional[int] = None, *,
            config, source: Optional[str] = None, keep: Callable[[], None] = lambda: None) -> Voice:
        """Make a voice of a recording (a file any format ``generate`` reads, or samples with their rate) for a
        checkpoint's ``config``: checked, trimmed and resampled by :func:`audio_prompt`, stored as ``name``.
        ``keep()`` is called just before it is stored, and may raise to store nothing (a server's time limit:
        ``voicechat.limits.TimeLimit.keep``)."""
        self._check_free(name)  # at once, before the recording is decoded; again when the name is taken
        if isinstance(audio, (str, Path)):
            samples, sample_rate = read_audio(audio, MAX_INPUT_SECONDS)
            source = source or Path(audio).name
        elif sample_rate is None:
            raise AudioInputError("sample_rate is required when the recording is given as samples")
        else:
            samples = to_float32(audio)
        prompt = audio_prompt(samples, int(sample_rate), config)
        created = datetime.now().astimezone().isoformat(timespec="microseconds")  # orders voices added in a second
        rate = config.codec.sample_rate
        voice = Voice(name, created, source or "recording", round(len(prompt) / rate, 3), prompt, rate)
        with self._changing():
            self._check_free(name)
            keep()
            self._write(voice)
        return voice

    def rename(self, name: str, new_name: str) -> Voice:
        """``name`` (in any case) called ``new_name`` from now on; a change of case only is a rename too."""
        with self._changing():
            voice = self._added(name)
            self._check_free(new_name, voice.name)
            renamed = replace(voice, name=new_name)
            (self.folder / voice.name).rename(self.folder / new_name)
            self._write_info(renamed)
        return renamed

    def remove(self, name: str) -> None:
        with self._changing():
            shutil.rmtree(self.folder / self._added(name).name)

    @contextlib.contextmanager
    def _changing(self):
        """One change of the library at a time, across threads and processes: a name is checked and taken at once
        (docs/voices.md: eight adds of one name at once, one wins)."""
        if self.folder is None:
            raise VoiceError("this library has the checkpoint's voices only: give it a folder to add voices")
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            yield

    def _added(self, name: str) -> Voice:
        voice = self.get(name)
        if voice.builtin:
            raise VoiceError(f"{name} is the checkpoint's voice; only voices you added can be renamed or removed")
        return voice

    def _check_free(self, name: str, renamed: Optional[str] = None) -> None:
        """A new name: a few letters, digits, spaces, - or _, and no voice's already in any case (but ``renamed``'s,
        the voice that takes it)."""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise VoiceError(f"{name!r} is not a voice name: use up to 32 letters, digits, spaces, - or _, starting "
                             "with a letter or digit")
        taken = self.find(name)
        if taken is not None and taken.name != renamed:
            raise VoiceError(f"there is already a voice called {taken.name}; choose another name")

    def _write(self, voice: Voice) -> None:
        import soundfile as sf

        folder = self.folder / voice.name
        if folder.exists():  # no voice's (checked while the library is held): what an add that died left
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        sf.write(str(folder / PROMPT_FILE), voice.prompt, voice.sample_rate, subtype="FLOAT")  # exact: float32
        self._write_info(voice)

    def _write_info(self, voice: Voice) -> None:
        info = {"name": voice.name, "created": voice.created, "source": voice.source, "seconds": voice.seconds,
                "sample_rate": voice.sample_rate}
        # written last and whole: a folder without it is no voice yet (VoiceLibrary._read)
        write_atomically(self.folder / voice.name / INFO_FILE,
                         (json.dumps(info, indent=1, ensure_ascii=False) + "\n").encode())


def model_library(folder: Union[str, Path, None], model) -> VoiceLibrary:
    """The library of ``folder`` with a loaded ``model``'s voices (only ``default`` while there is no model): an
    app's or a server's. Reads the model's config and speaker names only, so any thread may call it."""
    return VoiceLibrary(folder, checkpoint_voices(model) if model is not None else (DEFAULT,))


# ----------------------------------------------------------------------------------------------------------------
# hearing a voice
# ----------------------------------------------------------------------------------------------------------------
def preview_script(token_ids: Sequence[int], bos_id: int, eos_id: int, pad_id: int):
    """The text channel of a preview: BOS at position 1 (the TTS's first), the sentence's tokens one every
    ``PREVIEW_FRAMES_PER_TOKEN`` positions, EOS, then pad; the function channel as the model says.
    -> (script(t) -> (text id, None), positions)"""
    ids = [bos_id, *token_ids, eos_id]

    def script(t: int) -> tuple[int, None]:
        k, r = divmod(t - 1, PREVIEW_FRAMES_PER_TOKEN)
        return (ids[k] if t >= 1 and r == 0 and k < len(ids) else pad_id), None

    return script, 1 + len(ids) * PREVIEW_FRAMES_PER_TOKEN + PREVIEW_TAIL_FRAMES


def preview(model, voice: Optional[Voice], sentence: str = PREVIEW_SENTENCE, seed: int = 0):
    """The TTS saying ``sentence`` in ``voice``, alone -> Result (its ``audio``)."""
    return answer(preview_recording(model, voice, sentence, seed))


def preview_recording(model, voice: Optional[Voice], sentence: str = PREVIEW_SENTENCE, seed: int = 0, progress=None,
                      group=None):
    """A preview's conversation: a session over silence whose text channel is the sentence (:func:`preview_script`),
    so the model's own words never enter it; in ``group`` as ``Model.recording`` starts one (alone without).
    -> voicechat.timeline.recording.OfflineInput"""
    c = model.config
    script, positions = preview_script(model.tokenizer.encode(sentence), c.bos_id, c.eos_id, c.pad_id)
    silence = np.zeros(positions * c.samples_per_input_frame, np.float32)
    return open_recording(model, silence, c.input_sample_rate, seed=seed, speaker=voice,
                          config=GenerationConfig(extra_seconds=0.0), progress=progress, script=script, group=group)
