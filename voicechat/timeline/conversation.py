"""A conversation on the 80 ms timeline (docs/model.md §1.2, docs/streaming.md): audio goes in as it is heard, and every
timeline position comes out as soon as its 80 ms of input are complete: the assistant's text and function tokens, 31
codec codes and 1764 samples of its voice.

Per timeline position t (the system prompt's positions first, then one per 80 ms of input):
    listen: the streaming encoder's frame for t (mel columns up to 8 t, docs/model.md §2.2.1)
    think:  fused[t] = w_text E(text[t-1]) + w_user audio[t] + w_func E(function[t-1]) -> text[t], function[t]
    speak:  (t >= 1) text[t] and the codes of t-1 (silence codes when text[t] is EOS) -> 31 codes -> 1764 samples
    hear:   the RNNT transcript of the user, one encoder frame at a time
``Model.generate`` is a session fed a whole recording, so the offline answer and a streamed one are the same frames.

With tools, a :class:`voicechat.tools.ToolChannel` watches the function channel: each position is read back before the
next is built; during a tool exchange the positions hear the silence embedding while the user's frames wait in
``heard``, the channel fixes their ids, and no position runs while a tool runs (docs/tools.md §5).
"""

from __future__ import annotations

import time
from collections import deque
import dataclasses
from dataclasses import asdict, dataclass
from typing import Generator, Iterable, Iterator, Optional, Sequence

import numpy as np

from .. import compute
import mlx.core as mx

from ..audio import to_float32
from ..config import GenerationConfig
from ..errors import AudioInputError, ConfigError, TimelineFull
from .loop import Row, SessionGroup
from ..limits import TIMELINE_LIMIT, check_prompt_chars, check_prompt_positions, checked_prompt, checked_seed
from ..result import Result
from ..llm import lm
from ..stt.perception import PerceptionStream, SteadyFrame, timeline_frames
from ..stt.rnnt import RNNTGreedy, Transcript
from ..tokenizer import TextStream, channel_text
from ..tools import Tool, ToolCall, ToolChannel, system_prompt as tool_prompt
from ..tts.eartts import TTSSettings, TTSState, warmup_inputs
from ..tts.mog import KeyNoise

CODEC_CONTEXT_FRAMES = 8  # causal codec decoder: left context that makes a cut-out decode equal the full one
LISTEN_BLOCK_FRAMES = 64  # encoder frames computed in one go at most (bounds memory when a long recording arrives)
WARMUP_STAGE_LAYERS = 4  # TTS backbone layers of the warm-up forward in one set-up stage (docs/batching.md §1)
PREFILL_STAGE = 32  # system prompt positions prefilled in one set-up stage (bounds a joining conversation's stall of
#                     the others' ticks, docs/batching.md §6; the warm-up prefills this many: Model.warm_up)


def tts_settings(cfg, gen: GenerationConfig) -> TTSSettings:
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
# what a session gives out
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Frame:
    """One timeline position, finished: numpy and Python values only (safe to hand to any thread)."""

    position: int  # timeline index (the prompt's positions are 0 .. prompt_frames - 1)
    text_id: int  # the assistant's text token (pad when silent)
    function_id: int  # the function channel's token (pad when silent)
    codes: np.ndarray  # [31] int32 codec codes
    audio: np.ndarray  # float32 samples at 22.05 kHz that became final with this position (1764; the codec runs
    #                    6 samples behind the timeline, and the first decoded position gives 6 fewer)
    text: str  # new characters of the assistant's text
    function_text: str  # new characters of the function channel
    transcript: str  # new characters of the user's transcript
    turn: Optional[str]  # "start" when text_id is BOS (the assistant takes the turn), "end" when EOS, else None
    seconds: dict  # wall seconds: "total" (the tick that computed it, from its build or the previous tick's end), and
    #                per stage when profiled
    events: tuple = ()  # tool-call events raised at this position


class Clock:
    """Wall time per stage. ``stage`` records only when profiling: it then evaluates the stage's arrays first, an
    honest split at the price of a host sync per stage; unprofiled, a position's networks run in one evaluation."""

    def __init__(self, profile: bool = False):
        self.profile = profile
        self.calls: dict[str, list[float]] = {}

    def add(self, stage: str, t0: float, *arrays) -> float:
        if arrays:
            mx.eval(*arrays)
        t1 = time.perf_counter()
        self.calls.setdefault(stage, []).append(t1 - t0)
        return t1

    def stage(self, stage: str, t0: float, *arrays) -> float:
        return self.add(stage, t0, *arrays) if self.profile else t0

    def since(self, mark: dict) -> dict:
        """Seconds per stage added since ``mark`` (a copy of the call counts)."""
        return {k: sum(v[mark.get(k, 0):]) for k, v in self.calls.items() if len(v) > mark.get(k, 0)}

    def mark(self) -> dict:
        return {k: len(v) for k, v in self.calls.items()}


# ----------------------------------------------------------------------------------------------------------------
# the session
# ----------------------------------------------------------------------------------------------------------------
class Session:
    """One conversation. Build it with :meth:`voicechat.Model.session`; use it on the thread that owns MLX.

    Before the first user frame comes its set-up, as NVIDIA's offline loop does it (docs/model.md §1.2 C-H): the TTS
    warm-up with the speaker, the system prompt's LLM prefill, then the prompt's positions (the TTS over them, the
    transcript over their zero frames). Its row is taken when it is created (admission); the set-up runs in stages,
    which a group runs between its ticks, one a tick (docs/batching.md §1), and a lone session runs back to back
    when it is created, with its prompt's positions. ``setup_seconds``: how long creating it took."""

    def __init__(self, model, system_prompt: str = "", seed: int = 0, speaker=None,
                 config: Optional[GenerationConfig] = None, tools: Sequence[Tool] = (), *, noise=None,
                 profile: bool = False, on_frame=None, script=None, group: Optional[SessionGroup] = None):
        """``tools``: the :class:`voicechat.tools.Tool` objects the model may call (at most 5); the system prompt the
        model reads is then ``voicechat.tools.system_prompt(system_prompt, tools)``. ``group``: the
        :class:`~voicechat.timeline.loop.SessionGroup` whose ticks step this conversation with others
        (docs/batching.md);
        without one it is a group of one, and its prompt's positions run here.

        Private seams for tests and benchmarks: ``noise`` replays the TTS draws, ``profile`` splits the timings,
        ``on_frame(frame)`` sees each finished frame, ``script(t) -> (text_id or None, function_id or None)`` fixes
        ids at position t in place of the model's (a known channel for tests, a realistic workload for benchmarks)."""
        t0 = time.perf_counter()
        self.script = script
        self.model, self.cfg = model, model.config
        self.gen = config or GenerationConfig()
        self.seed, self.system_prompt, self.tools = checked_seed(seed), checked_prompt(system_prompt), tuple(tools)
        self.prompt_ids = self._prompt_ids()  # checked before any model work (docs/limits.md)
        self.voice = model.voice_name(speaker)  # for the record (Result.settings)
        self.clock = Clock(profile)
        self.on_frame = on_frame  # called with each Frame as it is finished (generate's progress)
        self.alone = group is None
        self.group = group or SessionGroup(model, 1)
        self.row: Optional[int] = None  # this conversation's row in the group's state
        self._build_state(noise)
        speaker = model._speaker(speaker)  # a bad speaker is refused here, not in a later tick
        self.set_up = self._set_up(*speaker)  # its stages, run by the group (SessionGroup.set_up_stage); None after
        self.row = self.listener.row = self.group.admit(self)
        self.group.joining.append(self)
        self.prompt_output = self.group.run(self) if self.alone else []  # in a group: in its next ticks
        self.setup_seconds = time.perf_counter() - t0

    # -- construction: all per-session state, in one place ----------------------------------------------------
    def _prompt_ids(self) -> list[int]:
        """[bos] + the tokens of the prompt the model reads (with the tools' declarations) + [eos]; none without one."""
        c = self.cfg
        prompt = tool_prompt(self.system_prompt, self.tools)
        check_prompt_chars(prompt)
        ids = [c.bos_id, *self.model.tokenizer.encode(prompt), c.eos_id] if prompt else []
        check_prompt_positions(len(ids))
        return ids

    def _build_state(self, noise) -> None:
        c, net, gen = self.cfg, self.model.net, self.gen
        self.stt, self.tts = net.stt_model, net.tts_model
        self.settings = tts_settings(c, gen)
        self.specials = {c.pad_id, c.bos_id, c.eos_id}
        tts_key, self.text_key = mx.random.split(mx.random.key(self.seed))
        self.noise = noise or KeyNoise(tts_key)
        self.prompt_frames = len(self.prompt_ids)
        # what reference mode changes is data: where the codec starts, what frame 0 holds, what the result keeps
        self.decoder_from = 0 if gen.reference else max(0, self.prompt_frames - CODEC_CONTEXT_FRAMES)
        self.first_frame = 0 if gen.reference else self.prompt_frames
        silence = np.asarray(self.tts.codec_silence_tokens).astype(np.int32)
        self.frame0_codes = np.zeros_like(silence) if gen.reference else silence  # never generated (H)
        # the timeline so far, on the host
        self.text, self.func, self.codes = [], [], []
        self.pieces: list[np.ndarray] = []  # decoded samples, from position decoder_from on
        self.valid: list[bool] = []  # per position: inside the input's valid length
        self.text_stream = TextStream(self.model.tokenizer, self.specials)
        self.func_stream = TextStream(self.model.tokenizer, {c.pad_id})
        self.transcript_shown = ""
        # the networks' state
        self.listener = PerceptionStream(self.stt.perception, self.group.hearing)  # its row once it joins
        # per position waiting for the LLM: (audio [H], encoder frame [D], valid), or a steady frame the group's next
        # tick computes with the other rows' (docs/batching.md §2)
        self.heard: deque = deque()
        self.prompt_inputs: deque = deque()  # the prompt's positions not yet run
        self.rnnt = RNNTGreedy(self.stt.rnnt_decoder, self.stt.rnnt_joint, c.audio.rnnt) if c.audio.rnnt else None
        self.rnnt_state = self.rnnt.new_state() if self.rnnt else None
        self.transcript_builder = Transcript(c.audio.rnnt.vocabulary) if c.audio.rnnt else None
        self.outbox: list[Frame] = []  # finished frames not yet given out
        self.failure: Optional[Exception] = None  # what on_frame raised (the run stops at the end of the tick)
        self.decoded = 0  # positions the codec has decoded (its first one drops the codec's start crop)
        self.position = 0
        self.resampler = None  # (rate, soxr.ResampleStream) once audio at another rate arrives
        self.taken = 0  # samples fed, at their own rate
        self.ended = False
        self.tail = np.zeros(0, np.float32)  # the codec's last samples, once the input has ended
        self.frame_mark: dict = {}  # the clock's call counts at the last frame, for the per-frame seconds
        self.tool_channel = self._tool_channel()
        # the positions given to tool exchanges (the silence embedding in, the user's frames waiting: docs/tools.md §5)
        self.held_positions: list[int] = []

    def _tool_channel(self) -> Optional[ToolChannel]:
        if not self.tools:
            return None
        if self.stt.function_head is None:
            raise ConfigError("this checkpoint has no function head, so its model cannot call tools; "
                              "start the session without tools")
        return ToolChannel(self.tools, self.model.tokenizer, self.cfg.pad_id)

    def _set_up(self, latent, speaker_audio) -> Iterator[None]:
        """The set-up, a stage per ``next`` (each a bounded piece of work the group runs between two ticks, so a
        joining conversation holds the others' ticks back by one stage at most: docs/batching.md §1): the speaker's
        warm-up codes and the warm-up's conditioning (each computed once per model and speaker); the TTS warm-up's
        backbone forward, WARMUP_STAGE_LAYERS layers a stage, unless the model keeps this speaker's caches from a
        conversation before (then the set-up begins with its prefill); then the system prompt's LLM prefill,
        PREFILL_STAGE positions a stage (their predictions are discarded, docs/model.md §1.2 E); then, a stage of its
        own, the join into its row (a few copies), its prompt's positions queued."""
        c = self.cfg
        t0 = time.perf_counter()
        inputs = warmup_inputs(self.model._warmup_codec_codes(speaker_audio), c.pad_id, c.eos_id, c.tts.speech_pad_id)
        voice = self.model._voice_key(latent, speaker_audio)
        caches = self.model._warm_caches(voice)
        known = caches is not None
        if known:
            self.clock.add("tts warm-up", t0)
        else:
            caches = self.model._keep_warm_caches(voice, (yield from self._tts_warm_up(inputs, latent, t0)))
        lm_state = lm.LMState(self.stt, c)
        prompt = mx.array(self.prompt_ids)[None]
        for start in range(0, self.prompt_frames, PREFILL_STAGE):
            if start or not known:  # a known speaker's first prefill is the set-up's first stage
                yield
            t0 = time.perf_counter()
            lm.prefill(self.stt, c, lm_state, prompt[:, start:start + PREFILL_STAGE])
            self.clock.add("prompt prefill", t0, lm_state.arrays)
        if self.prompt_frames or not known:
            yield  # the join a stage of its own: a tick then holds a prefill stage or the join, not both
        t0 = time.perf_counter()
        self.group.join(self, lm_state, TTSState(caches, self.noise),
                        mx.array(np.asarray(inputs.code)[-1].astype(np.int32)), mx.array(self.frame0_codes))
        self.clock.add("join", t0)
        zero = mx.zeros((c.audio.encoder.d_model,))
        # the transcript hears zeros over the prompt (docs/model.md §1.2 J)
        self.prompt_inputs.extend([(None, zero, True)] * self.prompt_frames)

    def _tts_warm_up(self, inputs, latent, t0: float) -> Generator[None, None, list]:
        """The TTS warm-up's backbone forward on fresh caches (``RVQEARTTSModel.warmup``), WARMUP_STAGE_LAYERS layers
        a stage after the stage that makes its input -> the caches (``yield from``'s value). The caches depend on the
        speaker alone: the conversation's draws are not in them (docs/batching.md §1)."""
        tts, backbone = self.tts.tts_model, self.tts.tts_model.backbone
        caches = backbone.make_caches()
        x = tts.warmup_input(inputs, latent, self.model._warmup_conditioning(inputs))
        self.clock.add("tts warm-up", t0, x)
        layers = len(backbone.layers)
        for start in range(0, layers, WARMUP_STAGE_LAYERS):  # a forward in pieces of layers: the same numbers
            yield
            t0 = time.perf_counter()
            x = backbone.through(x, caches, range(start, min(start + WARMUP_STAGE_LAYERS, layers)))
            self.clock.add("tts warm-up", t0, x, [a for cache in caches for a in cache.arrays()])
        return caches

    @property
    def setting_up(self) -> bool:
        """Whether set-up stages are still to run (it has not joined its row yet)."""
        return self.set_up is not None

    @property
    def started(self) -> bool:
        """Whether its set-up is over: joined, its prompt's positions run (a live conversation is then READY)."""
        return not self.setting_up and not self.prompt_inputs

    # -- feeding -----------------------------------------------------------------------------------------------
    @property
    def sample_rate(self) -> int:
        return self.cfg.codec.sample_rate

    @property
    def input_rate(self) -> int:
        return self.cfg.input_sample_rate

    def feed(self, samples, sample_rate: int) -> list[Frame]:
        """Audio as it arrives (any chunk size, any rate fixed for the session, int or float, mono or [N, channels])
        -> the positions it completes (in a group, the other conversations' ready positions run in the same ticks)."""
        out = []
        for _ in self._listened(samples, sample_rate):
            out += self.group.run(self)
        return out

    def push(self, samples, sample_rate: int) -> None:
        """``feed`` without running a position: the audio is heard (its encoder frames computed) and waits for the
        group's next ticks (:meth:`voicechat.timeline.loop.SessionGroup.step`)."""
        for _ in self._listened(samples, sample_rate):
            mx.eval([a for entry in self.heard if not isinstance(entry, SteadyFrame) for a in entry[:2]],
                    self.listener.arrays())

    def _listened(self, samples, sample_rate: int) -> Iterator[None]:
        """Hear the audio a block of encoder frames at a time (bounds memory when a long recording arrives),
        yielding after each block."""
        if self.ended:
            raise AudioInputError("this session's input has ended (flush was called); start a new session")
        x = to_float32(np.asarray(samples))
        if not np.all(np.isfinite(x)):
            raise AudioInputError("the audio contains NaN or infinite samples")
        # checked before the resampler takes the chunk: what it gives out never passes the rate ratio of all it took
        taken = self.taken + len(x)
        self._check_room(self._frames_after(-(-taken * self.input_rate // max(1, int(sample_rate)))))
        x = self._resampled(x, int(sample_rate), last=False)
        self.taken = taken
        block = LISTEN_BLOCK_FRAMES * self.cfg.samples_per_input_frame
        for i in range(0, len(x), block):
            self._listen(self.listener.hear(x[i:i + block]), valid=True)
            yield

    def flush(self) -> list[Frame]:
        """End of input: the last partial 80 ms are padded with zeros and the frames that reach past the end are
        computed as NeMo computes the end of a recording; then the codec's last samples come out with the last frame.
        The session takes no more audio."""
        if self.ended:
            return []
        x = self._resampled(np.zeros(0, np.float32), self.resampler[0] if self.resampler else self.input_rate,
                            last=True)
        out = []
        if len(x):
            self._check_room(self._frames_after(self.listener.samples + len(x)))
            self._listen(self.listener.hear(x), valid=True)
            out += self.group.run(self)
        self._check_room(self.prompt_frames + self.held + timeline_frames(self.cfg.audio, self.listener.samples))
        self._listen(self.listener.finish(), valid=None)
        out += self.group.run(self)
        out += self.settle()
        self.ended = True
        if self.decoded:
            self.tail = np.asarray(self.group.codec.tail(self.row))[0]
        return self._ended(out + self._left())

    def close(self) -> list[Frame]:
        """Leave the group: this conversation runs no more positions and its row is free for another (its result
        stays readable). ``flush`` closes; a cancelled conversation calls it. -> its finished frames not yet given
        out (positions another conversation's ticks ran)."""
        return self._ended(self._left())

    def _left(self) -> list[Frame]:
        if self.row is not None:
            self.group.leave(self)
        self.ended = True
        # soxr's stream goes with the input: an ended session kept for its result (a recorder's, reachable from
        # FastAPI's route cache until the interpreter's last teardown) would make nanobind report it leaked at exit
        self.resampler = None
        return self._take()

    def _ended(self, frames: list[Frame]) -> list[Frame]:
        """The channels' ids are over: the text they held back (docs/streaming.md §6) goes with the last frame not
        given out yet, so that each channel's frames, joined, are its whole text; with none left, only the result
        has it."""
        text, function_text = self.text_stream.finish(), self.func_stream.finish()
        if frames and (text or function_text):
            last = frames[-1]
            frames[-1] = dataclasses.replace(last, text=last.text + text,
                                             function_text=last.function_text + function_text)
        return frames

    def stream(self, chunks: Iterable, sample_rate: int) -> Iterator[Frame]:
        """``for frame in session.stream(chunks, rate)``: each chunk fed as it comes, then the end; stopping the
        iteration stops the work."""
        for chunk in chunks:
            yield from self.feed(chunk, sample_rate)
        yield from self.flush()

    def _resampled(self, x: np.ndarray, rate: int, last: bool) -> np.ndarray:
        """To the model's rate with soxr's stream resampler (one per session, so chunk edges leave no trace)."""
        if rate <= 0:
            raise AudioInputError(f"sample rate {rate} is not positive")
        if self.resampler is None:
            if rate == self.input_rate:
                return x
            import soxr

            self.resampler = (rate, soxr.ResampleStream(rate, self.input_rate, 1, dtype="float32"))
        if rate != self.resampler[0]:
            raise AudioInputError(f"this session's audio is at {self.resampler[0]} Hz; got {rate} Hz")
        return self.resampler[1].resample_chunk(x, last=last).astype(np.float32)

    def _frames_after(self, samples: int) -> int:
        """Timeline positions once ``samples`` of input are in (frame k needs samples up to 1280 k + n_fft / 2)."""
        reach = self.cfg.audio.preprocessor.n_fft // 2
        return self.prompt_frames + self.held + max(0, (samples - reach) // self.cfg.samples_per_input_frame + 1)

    def _check_room(self, positions: int) -> None:
        """The timeline's limit, or the group's cap on a conversation's length (docs/batching.md §4)."""
        most = self.group.max_positions
        if positions > most:
            why = "NVIDIA's streaming limit" if most == TIMELINE_LIMIT else "this server's cap on a conversation"
            raise TimelineFull(f"the conversation would pass {most} timeline positions "
                               f"({most * self.cfg.frame_length / 60:.3g} min, {why}); start a new session")

    def _listen(self, heard, valid: Optional[bool]) -> None:
        """Queue the encoder frames for the LLM: a steady frame (computed in a tick), or (projected, encoded) frames.
        ``valid`` None: the input ended, frames past its valid length are padding, which the LLM hears as zeros after
        a prompt (docs/model.md §1.2 C) and the transcript skips (J)."""
        if isinstance(heard, SteadyFrame):
            self.heard.append(heard)
            return
        projected, encoded = heard
        first = self.listener.encoder.frames - projected.shape[0]
        for i in range(projected.shape[0]):
            inside = True if valid else first + i < self.listener.valid_frames
            audio = compute.entry(projected, i)
            self.heard.append((audio if inside or not self.prompt_frames else mx.zeros_like(audio),
                               compute.entry(encoded, i), inside))

    def _ready(self) -> bool:
        """Whether this conversation's next position can run now: a prompt position, a heard frame, a tool
        exchange's position; none while a tool runs."""
        if self.row is None or self.setting_up:
            return False
        if self.prompt_inputs:
            return True
        if self.tool_channel is not None:
            if self.tool_channel.paused():
                return False
            if self.tool_channel.holds_user_audio():
                return True
        return bool(self.heard)

    def input_used(self) -> bool:
        """Whether every position the audio so far allows has run (the offline loop then gives the next piece,
        voicechat.timeline.recording.OfflineInput); not while its set-up runs or a running tool holds the
        conversation."""
        return not self.setting_up and not self._ready() and not self.waits_for_tool()

    def waits_for_tool(self) -> bool:
        """Whether a running tool holds this conversation (:meth:`settle` waits for it)."""
        return self.tool_channel is not None and self.tool_channel.paused()

    def _next_row(self) -> Optional[Row]:
        """The next position's input, taken (:meth:`_ready` said there is one): the prompt's positions first, then
        the heard frames, with a tool exchange's positions in between (the silence embedding, no encoder frame)."""
        if self.prompt_inputs:
            return Row(self, self.position, *self.prompt_inputs.popleft())
        if self.tool_channel is not None and self.tool_channel.holds_user_audio():
            self._check_room(self.position + 1)
            self.held_positions.append(self.position)
            return Row(self, self.position, self.model._tool_silence(), None, True)
        heard = self.heard.popleft()
        if isinstance(heard, SteadyFrame):
            return Row(self, self.position, None, None, True, listen=heard)
        return Row(self, self.position, *heard)

    def _take(self) -> list[Frame]:
        frames, self.outbox = self.outbox, []
        return frames

    # -- tools ---------------------------------------------------------------------------------------------------
    def poll(self) -> list[Frame]:
        """The positions that can run without new audio: once a tool has answered, the rest of its exchange and the
        user's frames that waited for it. A live caller calls it while no audio arrives; ``feed`` does it anyway."""
        return self.group.run(self)

    def settle(self) -> list[Frame]:
        """Wait for running tools (each at most its timeout) and run the positions that waited for them: for a
        caller with nothing else to do meanwhile (an offline generation, the end of the input)."""
        out = []
        while self.tool_channel is not None and self.tool_channel.paused():
            self.tool_channel.wait()
            out += self.group.run(self)
        return out

    def provide_tool_result(self, call_id: str, output: str) -> None:
        """The output of a call to a tool declared without a function (the caller runs it); see ``ToolChannel``."""
        if self.tool_channel is None:
            raise ConfigError("this session has no tools")
        self.tool_channel.provide_result(call_id, output)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Every tool call so far, finished or not."""
        return self.tool_channel.records() if self.tool_channel is not None else []

    # -- this conversation's part of the group's frame loop (voicechat/timeline/loop.py) --------------------------
    def _fixes(self, row: Row) -> tuple:
        """The ids fixed for this row's position on the host: (text id, function id, the function id that turns the
        text into pad), None where the model's stand. The test and benchmark seam ``script`` first, then over the
        positions past the prompt the tool channel's plan (docs/tools.md §5)."""
        text = func = pad_text_if = None
        if self.script is not None:
            text, func = self.script(row.t)
        if self.tool_channel is not None and row.audio is not None:
            plan = self.tool_channel.plan(row.t)
            text = plan.text_id if plan.text_id is not None else text
            func = plan.function_id if plan.function_id is not None else func
            pad_text_if = plan.pad_text_if
        return text, func, pad_text_if

    def _finish_row(self, row: Row, ids: np.ndarray, codes: Optional[np.ndarray], samples: Optional[np.ndarray],
                    seconds: dict) -> None:
        """The host side of this conversation's evaluated position: its ids, codes, samples, the transcript's frame,
        the new text of each channel; the frame goes to the outbox. ``seconds``: the tick's wall time ("total", from
        its build or the previous tick's end, whichever came later) and, profiled, its stages."""
        c = self.cfg
        text_id, func_id = int(ids[0]), int(ids[1])
        self.text.append(text_id)
        self.func.append(func_id)
        self.valid.append(row.valid)
        self._hear(row.encoded, row.valid, row.first, row.built_on)
        codes = (codes if codes is not None else self.frame0_codes).astype(np.int32)
        self.codes.append(codes)
        audio = np.zeros(0, np.float32)
        if samples is not None:
            audio = samples[self.group.codec.crop:] if self.decoded == 0 else samples
            self.decoded += 1
            self.pieces.append(audio)
        if self.clock.profile:
            for stage, took in seconds.items():
                if stage != "total":
                    self.clock.calls.setdefault(stage, []).append(took)
        seconds = {"total": seconds["total"], **self.clock.since(self.frame_mark)}
        self.frame_mark = self.clock.mark()
        frame = Frame(position=row.t, text_id=text_id, function_id=func_id, codes=codes, audio=audio,
                      text=self.text_stream.add(text_id), function_text=self.func_stream.add(func_id),
                      transcript=self._new_transcript(),
                      turn="start" if text_id == c.bos_id else "end" if text_id == c.eos_id else None,
                      seconds=seconds, events=self._tool_events(row.t, text_id, func_id))
        self.outbox.append(frame)
        if self.on_frame is not None and self.failure is None:
            try:
                self.on_frame(frame)
            except Exception as e:  # raised to the caller once the tick is done (SessionGroup.run): the others'
                self.failure = e    # rows of the tick are finished first


    def _tool_events(self, t: int, text_id: int, func_id: int) -> tuple:
        """What the tool channel makes of the ids position t kept (none over the prompt)."""
        if self.tool_channel is None or t < self.prompt_frames:
            return ()
        return self.tool_channel.observe(t, text_id, func_id)

    def _hear(self, encoded: mx.array, valid: bool, first, built_on: int) -> None:
        """The transcript's frame on the host: the first joint call came with the position's graph (usually blank:
        nothing more to do); symbols go on one call at a time (docs/model.md §1.2 J: frames past the valid length
        skipped). A first call built before the previous frame emitted is stale, and is made again. A tool exchange's
        positions hear nothing."""
        if self.rnnt is None or not valid or encoded is None:
            return
        t0 = time.perf_counter()
        fresh = first is not None and built_on == len(self.rnnt_state.tokens) and self.rnnt_state.prediction is not None
        self.rnnt.decode_frame(self.rnnt_state, None if fresh else encoded[None], first if fresh else None)
        self.clock.add("transcript", t0)

    def _new_transcript(self) -> str:
        text = self.transcript
        new = text[len(self.transcript_shown):] if text.startswith(self.transcript_shown) else text
        self.transcript_shown = text
        return new

    # -- reading ---------------------------------------------------------------------------------------------
    @property
    def held(self) -> int:
        """How many positions tool exchanges have held."""
        return len(self.held_positions)

    @property
    def held_seconds(self) -> float:
        """Input heard and not yet on the timeline (a tool exchange holds the user's frames back)."""
        return len(self.heard) * self.cfg.frame_length

    @property
    def transcript(self) -> str:
        """The user's words so far (NVIDIA's RNNT transcript string, docs/model.md §1.2 J)."""
        if self.rnnt is None:
            return ""
        return self.transcript_builder.text(self.rnnt_state.tokens)

    def result(self) -> Result:
        """The whole conversation so far as a :class:`Result` (the prompt's positions as ``GenerationConfig``'s mode
        keeps them)."""
        c, gen, tok = self.cfg, self.gen, self.model.tokenizer
        p, done = self.prompt_frames, self.position
        text, func = np.array(self.text, np.int64), np.array(self.func, np.int64)
        codes = np.array(self.codes, np.int64).reshape(-1, c.codec.num_quantizers)
        valid = p + sum(self.valid[p:])
        # NeMo's strings: the text after the prompt, cut to the valid length (docs/model.md §1.2 I); with turn markers
        # the untrimmed buffer whose frames past the valid length hold id 0
        kept, kept_f = list(text[p:valid]), list(func[p:valid])
        if gen.turn_markers:
            kept += [0] * (done - valid)
            kept_f += [0] * (done - valid)
        strings = [channel_text(tok, ids, pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id,
                                frame_length=c.frame_length, turn_markers=gen.turn_markers) for ids in (kept, kept_f)]
        wave = np.concatenate([*self.pieces, self.tail]) if self.pieces else np.zeros(0, np.float32)
        cut = (self.first_frame - self.decoder_from) * c.codec.samples_per_frame
        first = self.first_frame
        heard = sum(1 for v in self.valid[p:] if v) - self.held
        return Result(
            text=strings[0], function_text=strings[1], user_transcript=self.transcript,
            audio=wave[cut:].astype(np.float32), sample_rate=c.codec.sample_rate,
            text_tokens=text[first:done].copy(), function_tokens=func[first:done].copy(),
            audio_codes=codes[first:done].copy(), first_frame=first, prompt_frames=p, input_frames=heard,
            frame_seconds=c.frame_length, timings=self.clock_seconds(),
            stage_calls={k: list(v) for k, v in self.clock.calls.items()},
            settings={**asdict(gen), "seed": self.seed, "system_prompt": self.system_prompt, "voice": self.voice,
                      "tools": [t.declaration() for t in self.tools], "tts_used": asdict(self.settings)},
            tool_calls=tuple(self.tool_calls), held_positions=tuple(self.held_positions),
        )

    def clock_seconds(self) -> dict:
        return {stage: sum(times) for stage, times in self.clock.calls.items()}
