"""``Model``, what ``voicechat.load`` returns (the network it runs is voicechat/network.py): a loaded checkpoint that
answers recordings (``generate``) and holds conversations (``session``). Both run the one frame loop of
:mod:`voicechat.timeline` (docs/model.md §1.2).

Two output modes for ``generate`` (``GenerationConfig.reference``): NVIDIA's offline semantics (fixed length, prompt
frames and the all-zero frame 0 kept in codes and audio), or the app's (answer timeline only, the input extended with
silence until the assistant's turn has ended).
"""

from __future__ import annotations

import gc
import hashlib
import time
from collections import OrderedDict
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from . import compute
import mlx.core as mx

from .audio import read_audio, resample
from .cache import KVCache, capacities
from .config import GenerationConfig, ModelConfig
from .errors import AudioInputError, ConfigError
from .limits import check_prompt_chars
from .network import VoiceChatModel, load_parts, speaker_reference_path
from .result import Result
from .timeline.admission import row_counts
from .timeline.loop import SessionGroup
from .timeline.recording import OfflineInput, Progress, answer, open_recording
from .timeline.conversation import Session
from .llm import lm
from .stt.perception import timeline_frames
from .tokenizer import TextTokenizer
from .tools import Tool
from .tts.eartts import prompt_samples, warmup_waveform
from .voices import Voice, checkpoint_voices

WARM_POSITIONS = 2048  # cache sizes made ready at load: 2.7 minutes of conversation (larger ones on first use)
# prompts of these lengths meet every prefill kernel MLX's CUDA backend compiles per row tile of a 4-bit product (a
# prompt is prefilled at most timeline.conversation.PREFILL_STAGE positions at a time), so that compilation happens
# at load and not when a conversation starts (docs/platform.md §8)
WARM_PROMPT_POSITIONS = (16, 32)
# the warm-up session's 80 ms feeds: the first fills the encoder's caches, the others take its steady path
WARM_FRAMES = 4
# speakers whose TTS warm-up caches a model keeps, the least recently joined dropped first: 9.5 MB each at full size,
# 153 MB for all, under a tenth of one conversation's state at the timeline limit (docs/batching.md §1)
WARM_VOICES = 16

class Model:
    """A loaded NemotronLabs-VoiceChat checkpoint. Build it with ``voicechat.load``; all calls on one thread."""

    def __init__(self, cfg: ModelConfig, tokenizer: TextTokenizer, net: VoiceChatModel, directory: Path):
        self.config = cfg
        self.tokenizer = tokenizer
        self.net = net
        self.directory = directory
        self._warmup_codes: OrderedDict = OrderedDict()  # content_key(audio) -> its warm-up codes, oldest use first
        self._silence: Optional[mx.array] = None
        self._warmup_cond: dict = {}
        self._warm_voices: OrderedDict = OrderedDict()  # _voice_key -> the TTS warm-up's caches, oldest use first

    # -- speaker ---------------------------------------------------------------------------------------------
    def speakers(self) -> list[str]:
        return list(self.net.tts_model.audio_prompt_latents)

    def voice_name(self, speaker) -> str:
        """The name a conversation's record gives ``speaker`` (``speaker`` as :meth:`generate` takes it)."""
        if isinstance(speaker, Voice):
            return speaker.name
        if speaker is None:
            return checkpoint_voices(self)[0]
        if isinstance(speaker, tuple):
            return "(samples)"
        return speaker if isinstance(speaker, str) and speaker in self.speakers() else Path(speaker).name

    def _speaker(self, speaker) -> tuple[Optional[mx.array], Optional[np.ndarray]]:
        """(cached latent or None, speaker waveform at the codec rate or None). None = the checkpoint's
        default: its ``inference_speaker_name`` latent, else the WAV its config names, else its only latent."""
        latents = self.net.tts_model.audio_prompt_latents
        if isinstance(speaker, Voice):  # a voice of the library (voicechat/voices.py)
            speaker = speaker.speaker
        if speaker is None:
            if self.config.speaker_name:
                speaker = self.config.speaker_name
            elif (ref := speaker_reference_path(self.config, self.directory)) is not None:
                speaker = ref
            elif len(latents) == 1:
                speaker = next(iter(latents))
            else:
                raise ConfigError("the checkpoint names no default speaker; pass speaker=<latent name or WAV path>")
        if isinstance(speaker, str) and speaker in latents:
            return latents[speaker], None
        if isinstance(speaker, tuple):
            samples, rate = speaker
            return None, resample(np.asarray(samples, dtype=np.float32), int(rate), self.config.codec.sample_rate)
        path = Path(speaker)
        if not path.is_file():
            raise AudioInputError(f"speaker {speaker!r} is neither a speaker of this checkpoint "
                                  f"({', '.join(latents) or 'none'}) nor an audio file")
        x, rate = read_audio(path)
        return None, resample(x, rate, self.config.codec.sample_rate)

    def _warmup_codec_codes(self, audio: Optional[np.ndarray]) -> np.ndarray:
        """Codec codes of [1 silent frame; the speaker prompt with its last 2 frames zeroed] (docs/model.md §2.5.9); the
        prompt is silence for a cached latent. They depend on the speaker audio alone: kept per model for the last
        WARM_VOICES speakers, as their warm-up caches are (``_keep_warm_caches``)."""
        cfg = self.config
        key = content_key(audio)
        if key not in self._warmup_codes:
            n = prompt_samples(cfg.tts.audio_prompt_duration, cfg.codec.sample_rate, cfg.codec.samples_per_frame)
            wave = warmup_waveform(audio, n, cfg.codec.samples_per_frame)
            self._warmup_codes[key] = np.asarray(self.net.tts_model.audio_codec.encode(wave[None]))[0]
            while len(self._warmup_codes) > WARM_VOICES:
                self._warmup_codes.popitem(last=False)
        self._warmup_codes.move_to_end(key)
        return self._warmup_codes[key]

    def _voice_key(self, latent: Optional[mx.array], audio: Optional[np.ndarray]) -> tuple:
        """What a speaker's TTS warm-up depends on (``_speaker``'s pair): its audio (the warm-up codes) and its latent
        where the TTS reads one. Not the seed: the draws' key is the conversation's, outside the caches."""
        reads_latent = latent is not None and self.net.tts_model.tts_model.reads_latent
        return content_key(audio), content_key(np.asarray(latent.astype(mx.float32))) if reads_latent else None

    def _warm_caches(self, key: tuple) -> Optional[list[KVCache]]:
        """The TTS warm-up's caches of the speaker ``_voice_key`` names, if a conversation before had them (read only:
        a join copies them into its row, ``RowsKV.put``)."""
        caches = self._warm_voices.get(key)
        if caches is not None:
            self._warm_voices.move_to_end(key)
        return caches

    def _keep_warm_caches(self, key: tuple, caches: list[KVCache]) -> list[KVCache]:
        """Keep a speaker's TTS warm-up caches (copies of their positions alone, evaluated) for the conversations
        after it, WARM_VOICES speakers at most -> the kept caches."""
        kept = [cache.kept() for cache in caches]
        mx.eval([cache.arrays() for cache in kept])
        self._warm_voices[key] = kept
        while len(self._warm_voices) > WARM_VOICES:
            self._warm_voices.popitem(last=False)
        return kept

    def _warmup_conditioning(self, inputs) -> mx.array:
        """The TTS warm-up's conditioning, the same for every conversation (its subword inputs depend on the frame
        count alone): computed once per model, so a joining conversation's set-up skips it."""
        frames = len(inputs.subword_ids)
        if frames not in self._warmup_cond:
            self._warmup_cond[frames] = self.net.tts_model.tts_model.warmup_conditioning(inputs)
            mx.eval(self._warmup_cond[frames])
        return self._warmup_cond[frames]

    def _tool_silence(self) -> mx.array:
        """What a tool exchange's positions hear: the speech encoder's first frame for one second of zeros, the
        vector NVIDIA's live wrapper caches (docs/tools.md §5). Computed once per model. -> [H]"""
        if self._silence is None:
            n = self.config.input_sample_rate
            self._silence = self.net.stt_model.perception(mx.zeros((1, n)), mx.array([n]))[0][0, 0]
            mx.eval(self._silence)
        return self._silence

    # -- the public calls ----------------------------------------------------------------------------------------
    def session(self, system_prompt: str = "", seed: int = 0, speaker=None,
                config: Optional[GenerationConfig] = None, tools: Sequence[Tool] = (),
                group: Optional[SessionGroup] = None) -> Session:
        """A conversation: ``feed`` it audio as it arrives, get each 80 ms position back as soon as it is done
        (:class:`voicechat.Session`). ``speaker`` and ``tools`` as in :meth:`generate`. ``group``: the group whose
        ticks step it (``group.session(...)`` passes itself); without one it is a group of one."""
        return Session(self, system_prompt, seed, speaker, config, tools, group=group)

    def sessions(self, max_sessions: int, max_minutes: Optional[float] = None) -> SessionGroup:
        """A group of up to ``max_sessions`` conversations stepped together, each exactly as if alone
        (:class:`voicechat.timeline.loop.SessionGroup`, docs/batching.md): ``group.session(...)`` opens one, ``push``
        queues its audio, ``group.step()`` advances every ready one by a position. ``max_minutes``: each
        conversation's most (None: the timeline's limit), what admission reserves memory for (docs/batching.md §4)."""
        return SessionGroup(self, max_sessions, max_minutes)

    def generate(self, audio: Union[np.ndarray, str, Path], sample_rate: Optional[int] = None, system_prompt: str = "",
                 seed: int = 0, speaker=None, config: Optional[GenerationConfig] = None,
                 progress: Optional[Progress] = None, tools: Sequence[Tool] = ()) -> Result:
        """Answer one recording. ``audio``: float or integer samples [N] / [N, channels] with ``sample_rate``, or a
        file path. ``speaker``: None (the checkpoint's default voice), a latent name, a WAV path, or (samples, rate).
        ``progress(done_frames, total_frames, update)`` is called after every timeline frame; raising from it stops
        the run. ``tools``: up to 5 :class:`voicechat.tools.Tool` objects the model may call; their calls and results
        are in ``Result.tool_calls`` (the run waits for a running tool, at most its timeout)."""
        return self._generate(audio, sample_rate, system_prompt, seed, speaker, config, progress, tools)

    def recording(self, audio: Union[np.ndarray, str, Path], sample_rate: Optional[int] = None,
                  system_prompt: str = "", seed: int = 0, speaker=None, config: Optional[GenerationConfig] = None,
                  progress: Optional[Progress] = None, tools: Sequence[Tool] = (), *,
                  group: SessionGroup) -> "OfflineInput":
        """``generate``'s conversation as one more conversation of ``group``, its setup done: the caller gives it its
        input with ``advance()`` between the group's ticks (``group.step()``) until that says it is over, then reads
        ``result()`` (the same answer as ``generate``'s; docs/batching.md §5). ``session.close()`` stops it."""
        return open_recording(self, audio, sample_rate, system_prompt, seed, speaker, config, progress, tools,
                              group=group)

    def _generate(self, audio, sample_rate=None, system_prompt: str = "", seed: int = 0, speaker=None,
                  config: Optional[GenerationConfig] = None, progress: Optional[Progress] = None,
                  tools: Sequence[Tool] = (), *, noise=None, profile: bool = False, script=None) -> Result:
        """``generate`` with the test and benchmark seams of :class:`~voicechat.Session` (``noise``,
        ``profile``, ``script``)."""
        return answer(open_recording(self, audio, sample_rate, system_prompt, seed, speaker, config, progress, tools,
                                     noise=noise, profile=profile, script=script))

    def warm_up(self, positions: int = WARM_POSITIONS, sessions: int = 1) -> dict[str, float]:
        """Run every per-frame function once, at every cache size a conversation of ``positions`` reaches and every
        row count a group of ``sessions`` conversations meets as they join (``admission.row_counts``: a handful, since
        the rows double), so that tracing and the GPU's kernel compilation happen now rather than in the first
        answer, at a cache's growth or at a join (GPU only: on a CPU nothing is compiled). Returns the seconds each
        part took."""
        seconds, t0 = {}, time.perf_counter()
        counts = row_counts(sessions)
        group = self._warm_ticks(counts)
        seconds["session frames"], t0 = time.perf_counter() - t0, time.perf_counter()
        for length in WARM_PROMPT_POSITIONS:
            state = lm.LMState(self.net.stt_model, self.config)
            prompt = mx.full((1, length), self.config.pad_id)
            mx.eval(lm.prefill(self.net.stt_model, self.config, state, prompt), state.arrays)
        seconds["prompt prefills"], t0 = time.perf_counter() - t0, time.perf_counter()
        for rows in counts:
            self.net.stt_model.llm.warm_up(capacities(positions), rows)
        seconds["LLM steps per cache size"], t0 = time.perf_counter() - t0, time.perf_counter()
        dtype = group.tts_state.caches[0].keys.dtype
        for rows in counts:  # each conversation's two guidance rows
            self.net.tts_model.tts_model.backbone.warm_up(capacities(positions), dtype, 2 * rows)
        seconds["TTS backbone steps per cache size"] = time.perf_counter() - t0
        return seconds

    def _warm_ticks(self, counts: list[int]) -> SessionGroup:
        """Ticks of a group at each row count of ``counts``: conversations join until it holds that many rows, then
        each is fed WARM_FRAMES x 80 ms, as a live one is (its first frame alone, then steady frames with the others;
        a joining one's prompt beside them) -> the group, its conversations closed."""
        group = self.sessions(counts[-1])
        frame = np.zeros(self.config.samples_per_input_frame, np.float32)
        opened = []
        for rows in counts:
            while group.rows < rows:
                opened.append(group.session("warm up"))
            for _ in range(WARM_FRAMES):
                for session in opened:
                    session.push(frame, self.config.input_sample_rate)
                while any(session.setting_up or session._ready() for session in opened):
                    group.step()
        for session in opened:
            session.close()
        return group

    def prompt_length(self, system_prompt: str) -> int:
        """A system prompt's timeline positions: [bos] + its tokens + [eos] (docs/model.md §1.2 C); none without one."""
        check_prompt_chars(system_prompt)
        return len(self.tokenizer.encode(system_prompt)) + 2 if system_prompt else 0

    def encoder_frames(self, samples: int) -> int:
        """Timeline positions a recording of ``samples`` gives after the prompt (docs/model.md §1.2 B)."""
        return timeline_frames(self.config.audio, samples)


def content_key(x: Optional[np.ndarray]) -> Optional[str]:
    """A digest of an array's float32 samples (None for none): equal arrays, equal keys."""
    return None if x is None else hashlib.sha1(np.ascontiguousarray(x, np.float32).tobytes()).hexdigest()


def load(path_or_repo: Union[str, Path, None] = None, tokenizer: Optional[str] = None, dtype: Optional[mx.Dtype] = None,
         offline: bool = False, download_progress=None) -> Model:
    """Load a checkpoint: a local directory or a Hugging Face repo id (default: the mlx-community 4-bit one)."""
    from .checkpoint import DEFAULT_MODEL

    cfg, tok, net, directory = load_parts(str(path_or_repo or DEFAULT_MODEL), tokenizer, dtype, offline,
                                          download_progress)
    model = Model(cfg, tok, net, directory)
    if compute.compile_enabled():
        model.warm_up()
    gc.freeze()  # the model's many Python objects leave the collector's view: no long collections mid-conversation
    return model
