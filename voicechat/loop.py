"""The 80 ms timeline (SPEC §1.2): a recording in; the user's transcript, the assistant's text, the function
channel and a spoken answer out. ``Model`` is what ``voicechat.load`` returns.

Per timeline position t (the system prompt's positions first, then one per encoder frame):
    LLM: fused[t] = w_text E(text[t-1]) + w_user audio[t] + w_func E(function[t-1]) -> text[t], function[t]
    TTS (t >= 1): text[t] (and the codes of t-1, or the silence frame when text[t] is EOS) -> 31 codes
    codec: codes -> 1764 samples at 22.05 kHz
then the RNNT transcript over the same timeline. Two output modes (``GenerationConfig.reference``): NVIDIA's
offline semantics (fixed length, prompt frames and the all-zero frame 0 kept in codes and audio), or the app's
(answer timeline only, the input extended with silence until the assistant's turn has ended).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np

from . import compute  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx

from .audio import prepare_input, read_audio, resample
from .config import GenerationConfig, ModelConfig
from .errors import AudioInputError, ConfigError
from .model import VoiceChatModel, load_parts, speaker_reference_path
from .result import FrameUpdate, Result
from .stt import lm
from .stt.rnnt import RNNTGreedy, transcript_text
from .tokenizer import TextTokenizer, channel_text
from .tts.eartts import prompt_samples, warmup_inputs, warmup_waveform
from .tts.mog import KeyNoise

QUIET_FRAMES_AFTER_ANSWER = 6  # app mode: stop 0.48 s after the assistant's EOS once the recording has been heard
CODEC_CONTEXT_FRAMES = 8  # causal codec decoder: left context that makes a cut-out decode equal the full one

Progress = Callable[[int, int, FrameUpdate], None]


@dataclass(frozen=True)
class TTSSettings:
    guidance_scale: float
    top_p: Optional[float]
    top_k: Optional[int]
    noise_scale: float


def tts_settings(cfg: ModelConfig, gen: GenerationConfig) -> TTSSettings:
    """Checkpoint values unless the call overrides them; a top-k given by the call wins over any top-p."""
    top_p, top_k = cfg.tts.top_p, cfg.tts.top_k
    if gen.tts_top_k is not None:
        top_p, top_k = None, gen.tts_top_k
    elif gen.tts_top_p is not None:
        top_p, top_k = gen.tts_top_p, None
    return TTSSettings(
        cfg.tts.guidance_scale if gen.tts_guidance_scale is None else gen.tts_guidance_scale, top_p, top_k,
        cfg.tts.noise_scale if gen.tts_noise_scale is None else gen.tts_noise_scale)


# ----------------------------------------------------------------------------------------------------------------
# text sampling (BR's _sample_text_token)
# ----------------------------------------------------------------------------------------------------------------
def sample_text_token(logits: mx.array, best: int, history: np.ndarray, specials: set[int], gen: GenerationConfig,
                      key: Optional[mx.array]) -> int:
    """Greedy at temperature 0 (``best`` is the argmax). Otherwise, unless the argmax is pad/bos/eos (then it is
    kept): repetition penalty on the distinct earlier ids except pad/bos/eos, temperature, top-p (keep the smallest
    prefix of the sorted distribution whose mass reaches p, at least one id), then a draw. logits [V] -> id"""
    if gen.text_temperature == 0.0 or best in specials:
        return best
    x = logits.astype(mx.float32)
    seen = sorted(set(np.unique(history).tolist()) - specials)
    if gen.text_repetition_penalty != 1.0 and seen:
        idx = mx.array(seen)
        old = x[idx]
        x[idx] = mx.where(old > 0, old / gen.text_repetition_penalty, old * gen.text_repetition_penalty)
    x = x / gen.text_temperature
    if gen.text_top_p < 1.0:
        order = mx.argsort(-x)
        cumulative = mx.cumsum(mx.softmax(x[order]), axis=-1)
        drop = mx.concatenate([mx.array([False]), cumulative[:-1] > gen.text_top_p])
        x[order] = mx.where(drop, -mx.inf, x[order])
    return int(mx.random.categorical(x, key=key).item())


# ----------------------------------------------------------------------------------------------------------------
# one generation
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class Timeline:
    """Where things sit on the timeline: P prompt positions, then the encoder frames (the recording's, then any
    appended silence)."""

    prompt: int  # P
    encoder_frames: int  # tensor length of the encoder output
    valid_frames: int  # encoder frames within the (padded) input's valid length
    input_frames: int  # encoder frames that carry the recording itself (before appended silence)

    @property
    def length(self) -> int:
        return self.prompt + self.encoder_frames


@dataclass
class FrameWork:
    """The TTS and codec work of one position, issued lazily and evaluated with the next LLM position."""

    t: int
    codes: Optional[mx.array] = None  # [Q] the position's codes (none at t = 0)
    piece: Optional[mx.array] = None  # [1, n] newly finished samples (none before the decoder starts)
    state: list = field(default_factory=list)  # TTS caches, codec stream state

    @property
    def arrays(self) -> list[mx.array]:
        return [a for a in (self.codes, self.piece) if a is not None] + self.state


class Clock:
    """Wall time per stage, per call. ``add`` always records; ``stage`` records only when profiling (``sync``):
    it then evaluates the stage's arrays first, an honest split at the price of a host sync per stage. Unprofiled,
    a frame's networks run in one evaluation and only the frame's total ("frame") is known."""

    def __init__(self, sync: bool = False):
        self.sync = sync
        self.calls: dict[str, list[float]] = {}
        self.start = time.perf_counter()

    def add(self, stage: str, t0: float, *arrays) -> float:
        if arrays:
            mx.eval(*arrays)
        t1 = time.perf_counter()
        self.calls.setdefault(stage, []).append(t1 - t0)
        return t1

    def stage(self, stage: str, t0: float, *arrays) -> float:
        return self.add(stage, t0, *arrays) if self.sync else t0

    @property
    def seconds(self) -> dict[str, float]:
        return {stage: sum(times) for stage, times in self.calls.items()}


class Model:
    """A loaded NemotronLabs-VoiceChat checkpoint. Build it with ``voicechat.load``; all calls on one thread."""

    def __init__(self, cfg: ModelConfig, tokenizer: TextTokenizer, net: VoiceChatModel, directory: Path):
        self.config = cfg
        self.tokenizer = tokenizer
        self.net = net
        self.directory = directory
        self._warmup_codes: dict = {}

    # -- speaker ---------------------------------------------------------------------------------------------
    def speakers(self) -> list[str]:
        return list(self.net.tts_model.audio_prompt_latents)

    def _speaker(self, speaker) -> tuple[Optional[mx.array], Optional[np.ndarray]]:
        """(cached latent or None, speaker waveform at the codec rate or None). None = the checkpoint's
        default: its ``inference_speaker_name`` latent, else the WAV its config names, else its only latent."""
        latents = self.net.tts_model.audio_prompt_latents
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
        """Codec codes of [1 silent frame; the speaker prompt with its last 2 frames zeroed] (SPEC §2.5.9); the
        prompt is silence for a cached latent. They depend on the speaker audio alone: computed once per model."""
        cfg = self.config
        key = None if audio is None else hashlib.sha1(np.ascontiguousarray(audio, np.float32).tobytes()).hexdigest()
        if key not in self._warmup_codes:
            n = prompt_samples(cfg.tts.audio_prompt_duration, cfg.codec.sample_rate, cfg.codec.samples_per_frame)
            wave = warmup_waveform(audio, n, cfg.codec.samples_per_frame)
            self._warmup_codes[key] = np.asarray(self.net.tts_model.audio_codec.encode(wave[None]))[0]
        return self._warmup_codes[key]

    # -- the public call ---------------------------------------------------------------------------------------
    def generate(self, audio: Union[np.ndarray, str, Path], sample_rate: Optional[int] = None, system_prompt: str = "",
                 seed: int = 0, speaker=None, config: Optional[GenerationConfig] = None,
                 progress: Optional[Progress] = None, profile: bool = False, tts_noise=None) -> Result:
        """Answer one recording. ``audio``: float or integer samples [N] / [N, channels] with ``sample_rate``, or a
        file path. ``speaker``: None (the checkpoint's default voice), a latent name, a WAV path, or (samples, rate).
        ``progress(done_frames, total_frames, update)`` is called after every frame; raising from it stops the run.
        ``profile`` syncs at every stage boundary so ``Result.timings`` splits honestly. ``tts_noise``: a replay
        source for the TTS random draws (tests)."""
        gen = config or GenerationConfig()
        cfg = self.config
        clock = Clock(sync=profile)
        x = prepare_input(audio, sample_rate, cfg.input_sample_rate, cfg.samples_per_input_frame,
                          gen.max_input_seconds)
        extra = gen.extra_seconds if (gen.reference or gen.extra_seconds is not None) else gen.max_extra_seconds
        heard = len(x)
        x = np.concatenate([x, np.zeros(round((extra or 0.0) * cfg.input_sample_rate), np.float32)])
        run = Run(self, gen, seed, clock, progress, system_prompt)
        return run.execute(x, heard, system_prompt, self._speaker(speaker), tts_noise)


class Run:
    """The state of one ``generate`` call: the per-session caches of every network and the timeline so far."""

    def __init__(self, model: Model, gen: GenerationConfig, seed: int, clock: Clock, progress: Optional[Progress],
                 system_prompt: str):
        self.m, self.gen, self.clock, self.progress = model, gen, clock, progress
        self.seed, self.system_prompt = seed, system_prompt
        self.cfg = model.config
        self.stt, self.tts = model.net.stt_model, model.net.tts_model
        self.settings = tts_settings(self.cfg, gen)
        self.tts_key, self.text_key = mx.random.split(mx.random.key(seed))
        c = self.cfg
        self.specials = {c.pad_id, c.bos_id, c.eos_id}

    # -- stages --------------------------------------------------------------------------------------------
    def perceive(self, x: np.ndarray, heard: int, prompt_ids: list[int]) -> tuple[Timeline, mx.array, mx.array]:
        """SPEC §1.2 B-C: the audio channel of every position [T, H] and the encoder output on the same timeline
        [T, D] (zeros over the prompt) for the RNNT."""
        t0 = time.perf_counter()
        projected, lengths, encoded = self.stt.perception(mx.array(x)[None], mx.array([len(x)]))
        valid = int(lengths[0].item())
        n = projected.shape[1]
        p = len(prompt_ids)
        heard_frames = min(valid, -(-heard // self.cfg.samples_per_input_frame))
        audio = projected[0]
        if p:  # with a prompt, encoder frames past the valid length become zeros (SPEC §1.2 C)
            keep = (mx.arange(n) < valid)[:, None]
            audio = mx.concatenate([self.stt.embed_tokens(mx.array(prompt_ids)), mx.where(keep, audio, 0.0)])
        asr = mx.concatenate([mx.zeros((p, encoded.shape[-1]), encoded.dtype), encoded[0]])
        self.clock.add("perception", t0, audio, asr)
        return Timeline(p, n, valid, heard_frames), audio, asr

    def warm_up_tts(self, speaker, tts_noise):
        t0 = time.perf_counter()
        latent, audio = speaker
        codes = self.m._warmup_codec_codes(audio)
        c = self.cfg
        inputs = warmup_inputs(codes, c.pad_id, c.eos_id, c.tts.speech_pad_id)
        state, _ = self.tts.tts_model.warmup(inputs, latent, tts_noise or KeyNoise(self.tts_key))
        self.clock.add("tts warm-up", t0)
        return state, mx.array(np.asarray(inputs.code)[-1])

    def execute(self, x: np.ndarray, heard: int, system_prompt: str, speaker, tts_noise) -> Result:
        c, gen = self.cfg, self.gen
        prompt_ids = [c.bos_id, *self.m.tokenizer.encode(system_prompt), c.eos_id] if system_prompt else []
        self.shown = ("", "")
        self.announce("perception", 0, len(prompt_ids) + -(-len(x) // c.samples_per_input_frame))
        line, audio, asr = self.perceive(x, heard, prompt_ids)
        self.tts_state, self.prev_code = self.warm_up_tts(speaker, tts_noise)
        self.silence = self.tts.codec_silence_tokens.astype(mx.int32)
        total = line.length
        self.text = np.full(total, c.pad_id, np.int64)
        self.func = np.full(total, c.pad_id, np.int64)
        self.codes = np.zeros((total, c.codec.num_quantizers), np.int64)  # frame 0 is never generated (SPEC §1.2 H)
        self.lm_state = lm.LMState(self.stt, c)
        if line.prompt:  # all prompt positions in one call; their predictions are discarded (SPEC §1.2 E)
            self.announce("prompt", 0, total)
            t0 = time.perf_counter()
            lm.prefill(self.stt, c, self.lm_state, mx.array(prompt_ids)[None])
            self.clock.add("prompt prefill", t0, self.lm_state.arrays)
        # app mode decodes from a few frames before the answer (left context of the causal decoder) and gives frame
        # 0 the silence codes; the reference decodes every frame, frame 0's zero codes included
        self.decoder_from = 0 if gen.reference else max(0, line.prompt - CODEC_CONTEXT_FRAMES)
        if not gen.reference:
            self.codes[0] = np.asarray(self.silence)
        self.stream = self.tts.audio_codec.stream()
        self.pieces = []

        # One evaluation per frame: the LLM's position t together with the TTS and codec work of position t - 1
        # (which needed text[t - 1] on the host first). The two depend on nothing of each other, so they are built
        # on two streams and run side by side (two CPU cores; overlapping kernels on a GPU).
        self.llm_stream, self.speech_stream = mx.new_stream(mx.default_device()), mx.new_stream(mx.default_device())
        pending, t = None, 0
        for t in range(total):
            t0 = time.perf_counter()
            logits = self.llm_step(t, audio) if t >= line.prompt else ()
            mx.eval(*logits, *(pending.arrays if pending else ()))
            if logits:
                self.read_tokens(t, *logits)
            if pending:
                self.finish_frame(pending, total, line)
            self.clock.add("frame", t0)
            pending = self.speak(t)
            if not gen.reference and gen.extra_seconds is None and self.answer_finished(self.text, t, line):
                break
        if pending:
            mx.eval(*pending.arrays)
            self.finish_frame(pending, total, line)
        done = t + 1
        t0 = time.perf_counter()
        self.pieces.append(self.stream.flush())
        wave = np.concatenate([np.asarray(p)[0] for p in self.pieces])
        self.clock.add("codec flush", t0)
        cut = 0 if gen.reference else (line.prompt - self.decoder_from) * c.codec.samples_per_frame
        return self.result(line, done, wave[cut:], asr)

    def llm_step(self, t: int, audio: mx.array) -> tuple:
        """Position t (lazy): fused input from text[t-1] / function[t-1] (pad at t = 0) -> (text, function) logits."""
        c = self.cfg
        t0 = time.perf_counter()
        prev_text = mx.array([int(self.text[t - 1]) if t else c.pad_id])
        prev_func = mx.array([int(self.func[t - 1]) if t else c.pad_id]) if self.stt.function_head is not None else None
        with mx.stream(self.llm_stream):
            text, func = lm.step(self.stt, c, self.lm_state, audio[t][None], prev_text, prev_func)
            best = mx.argmax(text if func is None else mx.stack([text, func]), axis=-1)  # greedy ids, same graph
        out = (best, text, *self.lm_state.arrays)
        self.clock.stage("llm", t0, *out)
        return out

    def read_tokens(self, t: int, best: mx.array, text_logits: mx.array, *state) -> None:
        """text[t] sampled (greedy by default), function[t] greedy (SPEC §1.2 F)."""
        ids = best.reshape(-1).tolist()
        sub = None
        if self.gen.text_temperature > 0:  # greedy decoding draws nothing (no per-frame key split)
            self.text_key, sub = mx.random.split(self.text_key)
        self.text[t] = sample_text_token(text_logits[0], ids[0], self.text[:t], self.specials, self.gen, sub)
        if self.stt.function_head is not None:
            self.func[t] = ids[1]

    def speak(self, t: int) -> Optional[FrameWork]:
        """The TTS step of position t (none at t = 0) and the codec's new samples, lazy; None if there is no work."""
        with mx.stream(self.speech_stream):
            return self.speak_on_stream(t)

    def speak_on_stream(self, t: int) -> Optional[FrameWork]:
        c, s = self.cfg, self.settings
        work = FrameWork(t)
        if t >= 1:
            t0 = time.perf_counter()
            if self.text[t] == c.eos_id and c.tts.force_silence_on_eos:  # SPEC §1.2 H
                self.prev_code = self.silence
            self.prev_code = work.codes = self.tts.tts_model.step(
                self.tts_state, self.prev_code, int(self.text[t]), s.guidance_scale, s.top_p, s.top_k, s.noise_scale)
            work.state += self.tts_state.arrays()
            self.clock.stage("tts", t0, *work.arrays)
        if t >= self.decoder_from:
            t0 = time.perf_counter()
            codes = work.codes if work.codes is not None else mx.array(self.codes[0], dtype=mx.int32)
            work.piece = self.stream.append(codes.reshape(1, 1, -1))
            work.state += self.stream.arrays
            self.clock.stage("codec", t0, work.piece, *self.stream.arrays)
        return work if work.arrays else None

    def finish_frame(self, work: FrameWork, total: int, line: Timeline) -> None:
        """Host side of an evaluated frame: its codes and samples; progress."""
        if work.codes is not None:
            self.codes[work.t] = np.asarray(work.codes)
        if work.piece is not None:
            self.pieces.append(np.asarray(work.piece))
        if self.progress is not None:
            self.report(work.t, total, line)

    def announce(self, stage: str, done: int, total: int) -> None:
        """Tell the progress callback a stage begins (it may raise to cancel)."""
        if self.progress is not None:
            elapsed = time.perf_counter() - self.clock.start
            self.progress(done, total, FrameUpdate(stage, elapsed, done / max(elapsed, 1e-9), *self.shown))

    def report(self, t: int, total: int, line: Timeline) -> None:
        """progress(done, total, update); the texts are decoded again only when a channel said something new."""
        ids = [self.text[line.prompt:t + 1], self.func[line.prompt:t + 1]]
        if t >= line.prompt and (self.text[t] != self.cfg.pad_id or self.func[t] != self.cfg.pad_id):
            self.shown = tuple(self.m.tokenizer.decode([i for i in x if i not in self.specials]) for x in ids)
        elapsed = time.perf_counter() - self.clock.start
        self.progress(t + 1, total, FrameUpdate("frames", elapsed, (t + 1) / max(elapsed, 1e-9), *self.shown))

    def answer_finished(self, text: np.ndarray, t: int, line: Timeline) -> bool:
        """App mode stops once the recording has been heard and the assistant has ended its turn (EOS, then some
        quiet frames without a new token); the appended silence bounds it otherwise."""
        c = self.cfg
        if t < line.prompt + line.input_frames:
            return False
        spoken = text[line.prompt:t + 1]
        eos = np.flatnonzero(spoken == c.eos_id)
        if eos.size == 0:
            return False
        after = spoken[eos[-1] + 1:]
        return len(after) >= QUIET_FRAMES_AFTER_ANSWER and bool(np.all(after == c.pad_id))

    def transcript(self, line: Timeline, asr: mx.array, done: int) -> str:
        """SPEC §1.2 J: one encoder frame per timeline position (zeros over the prompt), frames past the valid
        length skipped, hypothesis carried."""
        rnnt_cfg = self.cfg.audio.rnnt
        if rnnt_cfg is None:
            return ""
        t0 = time.perf_counter()
        greedy = RNNTGreedy(self.stt.rnnt_decoder, self.stt.rnnt_joint, rnnt_cfg)
        state = greedy.new_state()
        for t in range(min(done, line.prompt + line.valid_frames)):
            greedy.decode_frame(state, asr[t][None])
        self.clock.add("transcript", t0)
        return transcript_text(state.tokens, rnnt_cfg.vocabulary)

    def result(self, line: Timeline, done: int, wave: np.ndarray, asr: mx.array) -> Result:
        c, gen, tok = self.cfg, self.gen, self.m.tokenizer
        text, func, codes = self.text, self.func, self.codes
        if c.audio.rnnt is not None:
            self.announce("transcript", done, line.length)
        user = self.transcript(line, asr, done)
        p, valid = line.prompt, line.valid_frames
        # NeMo's strings: the text after the prompt, cut to the valid length (SPEC §1.2 I); with turn markers the
        # untrimmed buffer of width T - P whose extra frame holds id 0
        kept = list(text[p:min(done, p + valid)])
        kept_f = list(func[p:min(done, p + valid)])
        if gen.turn_markers:
            kept += [0] * (done - p - len(kept))
            kept_f += [0] * (done - p - len(kept_f))
        strings = [channel_text(tok, ids, pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id,
                                frame_length=c.frame_length, turn_markers=gen.turn_markers) for ids in (kept, kept_f)]
        first = 0 if gen.reference else p
        timings = dict(self.clock.seconds)
        timings["total"] = time.perf_counter() - self.clock.start
        return Result(
            text=strings[0], function_text=strings[1], user_transcript=user, audio=wave.astype(np.float32),
            sample_rate=c.codec.sample_rate, text_tokens=text[first:done].copy(), function_tokens=func[first:done].copy(),
            audio_codes=codes[first:done].copy(), first_frame=first, prompt_frames=p, input_frames=line.input_frames,
            frame_seconds=c.frame_length, timings=timings, stage_calls={k: list(v) for k, v in self.clock.calls.items()},
            settings={**asdict(gen), "seed": self.seed, "system_prompt": self.system_prompt,
                      "tts_used": asdict(self.settings)},
        )


def load(path_or_repo: Union[str, Path, None] = None, tokenizer: Optional[str] = None, dtype: Optional[mx.Dtype] = None,
         offline: bool = False, download_progress=None) -> Model:
    """Load a checkpoint: a local directory or a Hugging Face repo id (default: the mlx-community 4-bit one)."""
    from .checkpoint import DEFAULT_MODEL

    cfg, tok, net, directory = load_parts(str(path_or_repo or DEFAULT_MODEL), tokenizer, dtype, offline,
                                          download_progress)
    return Model(cfg, tok, net, directory)
