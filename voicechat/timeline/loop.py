"""Many conversations on one model: the frame loop over rows (docs/batching.md).

A :class:`SessionGroup` owns the device state of its conversations, slot-major: every network's caches and states
with a leading row axis, one row per conversation (the LLM's Mamba states and key/value caches, the TTS backbone's
caches with each conversation's two CFG rows, the codec decoder's streams, the previous ids and codes, the text
channel's random keys and seen ids, the TTS draws' keys). A tick steps every conversation whose next position is
ready as one call per network over all rows; a row that is not ready keeps its state exactly (its caches' positions do
not advance, its recurrent states are kept with a ``where``). Each :class:`~voicechat.Session` keeps its host
side: its streaming encoder, transcript, text streams, tool channel and its result. A lone session is a group of
one, so the per-frame code below is the only frame loop there is.

Driving many conversations from a plain loop::

    group = model.sessions(max_sessions=8)
    a, b = group.session("Be brief.", seed=1), group.session(seed=2)
    a.push(chunk_a, 16000); b.push(chunk_b, 16000)   # queue audio (numpy); no position runs yet
    for session, frames in group.step().items(): ...   # one tick: every ready conversation one position further
    a.flush(); b.flush(); a.result(); b.result()         # the end of each input; the whole conversations

``feed`` (``push`` then ticks until this session's input is used up, the others advancing with it) stays the one call
a single conversation needs.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .. import compute
import mlx.core as mx

from ..errors import ConfigError
from ..llm import lm
from ..stt.perception import PerceptionRows, SteadyFrame
from ..tts.eartts import TTSState
from ..tts.mog import KeyNoise, key_draws
from .admission import capped_positions, check_memory, free_row, grown_rows

LOOKAHEAD = 1  # ticks built and queued on the device while the host reads the one before


@dataclass
class Row:
    """A conversation's part of a tick: its position, its input and what the host reads back."""

    session: object
    t: int
    audio: Optional[mx.array]  # [H] the LLM's audio input, None over the prompt
    encoded: Optional[mx.array]  # [D] encoder frame (None during a tool exchange)
    valid: bool
    first: Optional[tuple] = None  # the transcript's first joint call (the tick's enc(f) [n, J], this row's index
    #                                in it, its id), read back with the tick
    built_on: int = 0  # transcript length it was built on
    listen: Optional[SteadyFrame] = None  # the steady frame that gives ``audio`` and ``encoded`` (in the tick)


@dataclass
class Tick:
    """One tick's work on the device, built lazily and evaluated once; the host reads it afterwards."""

    rows: list[tuple[int, Row]]  # (row index, its part)
    ids: mx.array  # [R, 2] text and function ids
    codes: Optional[mx.array]  # [R, Q] (none if no row spoke)
    samples: Optional[mx.array]  # [R, 1764] before each stream's start crop (none if no row decoded)
    heard: tuple = ()  # the transcripts' first joint calls: (row indices, enc(f) [n, J], ids [n]) or none
    state: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)  # per stage, when a row profiles
    started: float = 0.0  # perf_counter when its building began

    @property
    def arrays(self) -> list[mx.array]:
        return [self.ids] + [a for a in (self.codes, self.samples) if a is not None] + list(self.heard[1:]) + self.state


def sample_text_tokens(logits: mx.array, best: mx.array, seen: mx.array, specials: mx.array, temperature: mx.array,
                       penalty: mx.array, top_p: mx.array, keys: mx.array, penalized: bool, nucleus: bool) -> mx.array:
    """BR's ``_sample_text_token`` for each row with its own settings (``temperature``, ``penalty``, ``top_p``
    [R, 1], host-made float32) and key [R, 2], on the device: unless the argmax is pad/bos/eos (then it is kept),
    repetition penalty on the ids ``seen`` before (pad/bos/eos never count), temperature, top-p (keep the smallest
    prefix of the sorted distribution whose mass reaches p, at least one id), then a draw with the row's key. Rows
    at temperature 0 take the argmax ``best``; ``penalized`` / ``nucleus``: whether any row has a penalty / a top-p
    (the others' values are then 1, which changes no number). logits [R, V], best [R], seen [R, V] -> ids [R]"""
    x = logits.astype(mx.float32)
    if penalized:
        x = mx.where(seen, mx.where(x > 0, x / penalty, x * penalty), x)
    x = x / mx.where(temperature > 0, temperature, 1.0)
    if nucleus:
        order = mx.argsort(-x, axis=-1)
        ranked = mx.take_along_axis(x, order, axis=-1)
        cumulative = mx.cumsum(mx.softmax(ranked, axis=-1), axis=-1)
        drop = mx.concatenate([mx.zeros((x.shape[0], 1), mx.bool_), cumulative[:, :-1] > top_p], axis=-1)
        x = mx.put_along_axis(x, order, mx.where(drop & (top_p < 1.0), -mx.inf, ranked), axis=-1)
    drawn = mx.vmap(lambda key, row: mx.random.categorical(row, key=key))(keys, x).astype(best.dtype)
    keep = mx.any(best[:, None] == specials[None], axis=-1) | (temperature[:, 0] == 0)
    return mx.where(keep, best, drawn)


def column(values, dtype=mx.float32) -> mx.array:
    return mx.array(np.asarray(values), dtype).reshape(-1, 1)


class SessionGroup:
    """Up to ``max_sessions`` conversations stepped together on one model; use it on the thread that owns MLX.
    Build it with :meth:`voicechat.Model.sessions`; :meth:`session` opens a conversation in it, :meth:`step`
    advances every ready conversation by one position."""

    def __init__(self, model, max_sessions: int = 1, max_minutes: Optional[float] = None):
        if int(max_sessions) < 1:
            raise ConfigError(f"max_sessions must be at least 1, got {max_sessions}")
        self.model, self.cfg = model, model.config
        self.max_positions = capped_positions(max_minutes)  # a conversation's most
        self.stt, self.tts = model.net.stt_model, model.net.tts_model
        self.max_sessions = int(max_sessions)
        self.members: list = []  # the conversation of each row, None where a row is free
        self.joining: deque = deque()  # the conversations whose set-up stages are still to run, in order of asking
        self.running: deque = deque()  # ticks queued on the device, oldest first
        self.finished_at = 0.0  # perf_counter when the last tick was read
        c = self.cfg
        self.special_ids = mx.array(sorted({c.pad_id, c.bos_id, c.eos_id}), mx.int32)
        self.silence = self.tts.codec_silence_tokens.astype(mx.int32)
        self.rows = 0
        self.lm = lm.LMState(self.stt, c, rows=0)
        self.tts_state = TTSState(self.tts.tts_model.backbone.make_rows_caches(0), None)  # the draws: tts_keys
        self.codec = self.tts.audio_codec.stream(0)
        self.hearing = PerceptionRows(self.stt.perception, 0)  # the streaming encoders' caches
        q = c.codec.num_quantizers
        self.prev_ids = mx.zeros((0, 2), mx.int32)  # text and function ids of each row's last position
        self.prev_code = mx.zeros((0, q), mx.int32)  # codes of each row's last position
        self.frame0 = mx.zeros((0, q), mx.int32)  # what each row's codec decodes at position 0
        self.seen = mx.zeros((0, c.llm.vocab_size), mx.bool_)  # text ids so far, for the repetition penalty
        self.text_keys = mx.zeros((0, 2), mx.uint32)
        self.tts_keys = mx.zeros((0, 2), mx.uint32)

    # -- membership ---------------------------------------------------------------------------------------------
    def session(self, system_prompt: str = "", seed: int = 0, speaker=None, config=None, tools=()):
        """A conversation in this group (:class:`~voicechat.Session`), at once: its row is taken now
        (:class:`SessionsFull` if none can be had), its set-up's stages run in the next ticks, one a tick, then its
        prompt's positions, one a tick, beside the other conversations' positions. Audio pushed meanwhile waits. The
        model opens it (``Model.session``), as it opens a lone one: the loop stays below the conversation."""
        return self.model.session(system_prompt, seed, speaker, config, tools, group=self)

    @property
    def open(self) -> int:
        return sum(1 for m in self.members if m is not None)

    def check_room(self) -> tuple[int, int]:
        """Admission's checks, taking nothing (the engine asks before a recording starts, docs/batching.md §5): ->
        the row one more conversation would take and the rows the group would then hold, or :class:`SessionsFull`."""
        row = free_row(self)
        rows = grown_rows(self.rows, row, self.max_sessions)
        check_memory(self, rows)
        return row, rows

    def admit(self, session) -> int:
        """Admission, as ``session`` asks: a row for it (grown into when needed), or :class:`SessionsFull`. The
        row is its own from now on; its state is written when its set-up joins it (:meth:`join`)."""
        row, rows = self.check_room()
        if rows > self.rows:
            self.finish_running()
            self._grow(rows)
        if row == len(self.members):
            self.members.append(None)
        self.members[row] = session
        return row

    def set_up_stage(self):
        """One stage of the first joining conversation's set-up (``Session._set_up``), between two ticks; all of its
        stages while no conversation that has joined is open (no tick to hold back). -> that conversation, or None
        when none is setting up."""
        if not self.joining:
            return None
        session = self.joining[0]
        while next(session.set_up, StopIteration) is not StopIteration:
            if any(m is not None and not m.setting_up for m in self.members):
                return session
        session.set_up = None
        self.joining.popleft()
        return session

    def join(self, session, prompt_state: lm.LMState, tts_warm, prev_code: mx.array, frame0: mx.array) -> None:
        """``session``'s set-up into its row: its prompt's LLM state, its TTS warm-up caches and key, a fresh codec
        stream, pad ids (evaluated here, with no tick queued)."""
        self.finish_running()
        row = session.row
        self.lm.cache.put(row, prompt_state.cache)
        for rows_cache, one in zip(self.tts_state.caches, tts_warm.caches):
            rows_cache.put([row, self.rows + row], one)
        self.codec.restart_row(row)
        c = self.cfg
        put = lambda buf, value: mx.slice_update(buf, value.reshape(1, -1).astype(buf.dtype),  # noqa: E731
                                                 mx.array([row, 0]), axes=(0, 1))
        self.prev_ids = put(self.prev_ids, mx.array([c.pad_id, c.pad_id]))
        self.prev_code = put(self.prev_code, prev_code)
        self.frame0 = put(self.frame0, frame0)
        self.seen = put(self.seen, mx.zeros((c.llm.vocab_size,), mx.bool_))
        self.text_keys = put(self.text_keys, session.text_key)
        noise = session.noise
        self.tts_keys = put(self.tts_keys, noise.key if isinstance(noise, KeyNoise) else mx.zeros((2,), mx.uint32))
        mx.eval(self.prev_ids, self.prev_code, self.frame0, self.seen, self.text_keys, self.tts_keys)

    def held_bytes(self) -> int:
        """Bytes of the state the group holds now: every row's Mamba states, key/value buffers and seen ids
        (docs/batching.md §4)."""
        return sum(a.nbytes for a in (*self.lm.arrays, *self.tts_state.arrays(), self.seen))

    def leave(self, session) -> None:
        """Free ``session``'s row (its state stays until a joining conversation overwrites it); a conversation still
        setting up leaves its stages unrun."""
        self.finish_running()
        if session in self.joining:
            self.joining.remove(session)
            session.set_up = None
        if session.row is not None and self.members[session.row] is session:
            self.members[session.row] = None
        session.row = None

    def _grow(self, rows: int) -> None:
        """Room for ``rows`` conversations (:func:`grown_rows`): every batched state padded with fresh rows."""
        self.lm.cache.with_rows(rows)
        for cache in self.tts_state.caches:
            cache.with_rows(2 * rows, 2)
        self.codec.with_rows(rows)
        self.hearing.with_rows(rows)
        pad = lambda a: mx.pad(a, [(0, rows - a.shape[0]), (0, 0)])  # noqa: E731
        self.prev_ids, self.prev_code, self.frame0, self.seen, self.text_keys, self.tts_keys = (
            pad(a) for a in (self.prev_ids, self.prev_code, self.frame0, self.seen, self.text_keys, self.tts_keys))
        self.rows = rows

    # -- running ------------------------------------------------------------------------------------------------
    def step(self, lookahead: int = 0) -> dict:
        """One tick: a stage of a joining conversation's set-up, then every conversation whose next position is
        ready goes one position further, and the host reads it. -> {session: [Frame, ...]} of every conversation
        with finished frames (those of earlier ticks too) and of the one whose set-up advanced (it may have none):
        {} once nothing is left to run. ``lookahead``: ticks left running on the device when it returns, their frames
        read by a later step (the host builds the next tick meanwhile: docs/batching.md §5); 0 with tools."""
        staged, _ = self._turn(self._lookahead(lookahead))
        out = {m: frames for m in self.members if m is not None and (frames := m._take())}
        if staged is not None:
            out.setdefault(staged, [])
        return out

    def run(self, target) -> list:
        """Ticks while ``target`` has a ready position (every other ready conversation advancing with it); ->
        target's finished frames. While a tick runs on the device the next one is built (LOOKAHEAD; none with
        tools)."""
        lookahead = self._lookahead(LOOKAHEAD)
        while (target.setting_up or target._ready()) and target.failure is None:
            staged, tick = self._turn(lookahead)
            if staged is None and tick is None:
                break
        self.finish_running()
        if target.failure is not None:  # its on_frame raised (generate's progress callback: a cancel)
            failure, target.failure = target.failure, None
            target.on_frame = None
            raise failure
        return target._take()

    def _lookahead(self, wanted: int) -> int:
        """``wanted``, or 0 while a conversation has tools: each position is read back before the next is planned
        (docs/tools.md §5)."""
        return 0 if any(m is not None and m.tool_channel is not None for m in self.members) else wanted

    def _turn(self, lookahead: int) -> tuple:
        """One turn of the frame loop, the one both ``step`` and ``run`` take: a stage of a joining conversation's
        set-up, then a tick built and queued, and the queued ticks past ``lookahead`` read back -> (the conversation
        whose set-up advanced, the tick), each None when there was none."""
        staged = self.set_up_stage()
        tick = self._tick()
        if tick is not None:
            self.running.append(tick)
        while len(self.running) > lookahead:
            self._finish(self.running.popleft())
        return staged, tick

    def finish_running(self) -> None:
        while self.running:
            self._finish(self.running.popleft())

    def _tick(self) -> Optional[Tick]:
        """One tick built lazily and its evaluation queued (None when no conversation has a position ready)."""
        tick = self._build()
        if tick is not None:
            self._queue(tick)
        return tick

    def _queue(self, tick: Tick) -> None:
        mx.async_eval(tick.arrays)
        tick.state = []  # a queued tick keeps no reference to the state (docs/streaming.md §5)

    def _build(self) -> Optional[Tick]:
        """The ready rows' positions, lazily: one call per network for all rows."""
        started = time.perf_counter()
        rows = [(r, m._next_row()) for r, m in enumerate(self.members) if m is not None and m._ready()]
        rows = [(r, row) for r, row in rows if row is not None]
        if not rows:
            return None
        clock = self._clock(rows)
        active = np.zeros(self.rows, bool)
        active[[r for r, _ in rows]] = True
        steady = self._perceive(rows, clock)
        ids = self._think(rows, clock, steady)
        ids = self._fixed(rows, ids)
        heard = self._transcribe(rows, clock, steady)
        codes, samples = self._speak(rows, active, ids, clock)
        self.prev_ids = compute.kept_where(mx.array(active), ids, self.prev_ids)
        for _, row in rows:
            row.session.position += 1
        state = [*self.lm.arrays, *[a for c in self.tts_state.caches for a in c.arrays()], *self.codec.arrays,
                 self.prev_ids, self.prev_code, self.seen, self.text_keys, self.tts_keys,
                 *self.hearing.arrays]
        return Tick(rows, ids, codes, samples, heard, state, clock.seconds, started)

    def _clock(self, rows: list) -> "TickClock":
        """The tick's stage clock: it evaluates and times each stage when a row's session profiles."""
        return TickClock(any(row.session.clock.profile for _, row in rows))

    def _perceive(self, rows: list, clock: "TickClock") -> Optional[tuple]:
        """The steady frames of the rows that hear one, in one call for all rows (their mel columns, subsampling and
        conformer layers: ``PerceptionRows.steady``); a frame its conversation already computed alone (before a block
        of its own) is taken as it is. -> (the call's rows, projected [R, H], encoded [R, D]) or None without one."""
        waiting = [(r, row.listen) for r, row in rows if row.listen is not None and row.listen.encoded is None]
        steady = None
        if waiting:
            t0 = time.perf_counter()
            projected, encoded = self.hearing.steady(waiting)
            steady = ({r for r, _ in waiting}, projected, encoded)
            clock.stage("encoder", t0, projected, encoded, *self.hearing.arrays)
        for _, row in rows:
            if row.listen is not None:
                row.audio, row.encoded = row.listen.projected, row.listen.encoded
        return steady

    def _inputs(self, rows: list, kind: str, steady: Optional[tuple]) -> mx.array:
        """``rows``' (r, row) audio inputs (``kind`` "audio") or encoder frames ("encoded") in their order, [n, D]:
        the steady frames of this tick's call taken from its [R, D] output in one take, any other (a prompt position,
        a frame computed alone, a tool exchange's silence) stacked (no op per row of the call, docs/batching.md §2)."""
        computed, out = (steady[0], steady[1 if kind == "audio" else 2]) if steady else (set(), None)
        own = [i for i, (r, _) in enumerate(rows) if r not in computed]
        if not own:
            return out[mx.array([r for r, _ in rows])] if len(rows) < out.shape[0] else out
        stacked = mx.stack([getattr(rows[i][1], kind) for i in own])
        if len(own) == len(rows):
            return stacked
        slot = np.zeros(len(rows), np.int32)
        slot[own] = np.arange(len(own))
        mine = np.zeros(len(rows), bool)
        mine[own] = True
        taken = out[mx.array([r for r, _ in rows])]
        return compute.kept_where(mx.array(mine), stacked[mx.array(slot)], taken)

    def _transcribe(self, rows: list, clock: "TickClock", steady: Optional[tuple]) -> tuple:
        """The transcripts' first joint call of the rows that hear a valid encoder frame, in one call (each row's own
        prediction network state; docs/model.md §1.2 J) -> (their indices in ``rows``, enc(f) [n, J], ids [n])."""
        hearing = [i for i, (_, row) in enumerate(rows)
                   if row.session.rnnt is not None and row.valid and row.encoded is not None]
        if not hearing:
            return ()
        t0 = time.perf_counter()
        sessions = [rows[i][1].session for i in hearing]
        projected, ids = sessions[0].rnnt.first_joints([s.rnnt_state for s in sessions],
                                                       self._inputs([rows[i] for i in hearing], "encoded", steady))
        clock.stage("rnnt first joints", t0, projected, ids)
        for i, s in zip(hearing, sessions):
            rows[i][1].built_on = len(s.rnnt_state.tokens)
        return hearing, projected, ids

    def _think(self, rows: list, clock: "TickClock", steady: Optional[tuple]) -> mx.array:
        """The LLM for the rows past their prompt: fused input from each row's previous ids -> [R, 2] ids (text
        sampled with each row's settings, function greedy; pad for every other row) (docs/model.md §1.2 F)."""
        c = self.cfg
        thinking = [(r, row) for r, row in rows if row.audio is not None]
        pad = mx.full((self.rows, 2), c.pad_id, mx.int32)
        if not thinking:
            return pad
        t0 = time.perf_counter()
        think = np.zeros(self.rows, bool)
        think[[r for r, _ in thinking]] = True
        audio = self._row_audio(thinking, think, steady)
        has_func = self.stt.function_head is not None
        text, func = lm.step(self.stt, c, self.lm, audio, self.prev_ids[:, 0],
                             self.prev_ids[:, 1] if has_func else None, active=think)
        t1 = clock.stage("llm decode", t0, text, *([func] if func is not None else []), *self.lm.arrays)
        best_text = mx.argmax(text, axis=-1).astype(mx.int32)
        gens = [self.members[r].gen if think[r] else thinking[0][1].session.gen for r in range(self.rows)]
        temperature = column([g.text_temperature for g in gens])
        sampled = think & (np.array([g.text_temperature for g in gens]) > 0)
        text_id = best_text
        if sampled.any():  # greedy rows draw nothing: their keys stay as they are
            split = mx.vmap(lambda key: mx.random.split(key))(self.text_keys)
            self.text_keys = compute.kept_where(mx.array(sampled), split[:, 0], self.text_keys)
            penalties = [g.text_repetition_penalty for g in gens]
            tops = [g.text_top_p for g in gens]
            text_id = sample_text_tokens(text, best_text, self.seen, self.special_ids, temperature, column(penalties),
                                         column(tops), split[:, 1], any(p != 1.0 for p in penalties),
                                         any(p < 1.0 for p in tops))
        func_id = mx.argmax(func, axis=-1).astype(mx.int32) if func is not None else pad[:, 1]
        new = (mx.arange(self.seen.shape[1])[None] == text_id[:, None]) & ~mx.any(
            text_id[:, None] == self.special_ids[None], axis=-1, keepdims=True)
        self.seen = compute.kept_where(mx.array(think), self.seen | new, self.seen)
        ids = compute.kept_where(mx.array(think), mx.stack([text_id, func_id], axis=1), pad)
        clock.stage("text sampling", t1, ids, self.seen, self.text_keys)
        clock.stage("llm", t0)
        return ids

    def _row_audio(self, thinking: list, think: np.ndarray, steady: Optional[tuple]) -> mx.array:
        """The thinking rows' audio inputs in their rows, zeros elsewhere: [R, H] (a take and a ``where``)."""
        audio = self._inputs(thinking, "audio", steady)
        if len(thinking) < self.rows:
            slot = np.zeros(self.rows, np.int32)
            slot[[r for r, _ in thinking]] = np.arange(len(thinking))
            zero = mx.zeros((1, audio.shape[1]), audio.dtype)
            audio = compute.kept_where(mx.array(think), audio[mx.array(slot)], zero)
        return audio

    def _fixed(self, rows: list, ids: mx.array) -> mx.array:
        """The ids a script or a tool channel fixes for a row's position replace the model's (docs/tools.md §5): one
        ``where`` for all rows, the fixes made on the host per conversation."""
        fixes = [(r, row.session._fixes(row)) for r, row in rows]
        fixes = [(r, f) for r, f in fixes if f != (None, None, None)]
        if not fixes:
            return ids
        table = np.full((self.rows, 3), -1, np.int32)  # text, function, the function id that pads the text
        for r, f in fixes:
            table[r] = [-1 if v is None else v for v in f]
        table = mx.array(table)
        text, func = ids[:, 0], ids[:, 1]
        func = mx.where(table[:, 1] >= 0, table[:, 1], func)
        text = mx.where(table[:, 0] >= 0, table[:, 0], text)
        text = mx.where((table[:, 2] >= 0) & (func == table[:, 2]), self.cfg.pad_id, text)
        return mx.stack([text, func], axis=1)

    def _speak(self, rows: list, active: np.ndarray, ids: mx.array, clock: "TickClock"):
        """The TTS step of the rows past position 0 and the codec's new samples of the rows past their decoder's
        start, lazily: (codes [R, Q] or None, samples [R, 1764] or None)."""
        c = self.cfg
        speak = np.zeros(self.rows, bool)
        speak[[r for r, row in rows if row.t >= 1]] = True
        decode = np.zeros(self.rows, bool)
        decode[[r for r, row in rows if row.t >= row.session.decoder_from]] = True
        codes = samples = None
        if speak.any():
            t0 = time.perf_counter()
            speaking = mx.array(speak)
            text_id = ids[:, 0]
            prev = self.prev_code
            if c.tts.force_silence_on_eos:  # docs/model.md §1.2 H: the silence codes precede an EOS frame
                prev = mx.where(((text_id == c.eos_id) & speaking)[:, None], self.silence[None], prev)
            model = self.tts.tts_model
            hidden = model.step_hidden(self.tts_state, prev, text_id, active=speak)
            caches = [a for cache in self.tts_state.caches for a in cache.arrays()]
            t1 = clock.stage("tts backbone", t0, hidden, *caches)
            gumbels, normals = self._draws(rows, speak)
            first = rows[0][1].session.settings
            settings = [self.members[r].settings if speak[r] else first for r in range(self.rows)]
            codes = model.generate_rows(hidden, gumbels, normals, settings)
            self.prev_code = compute.kept_where(speaking, codes, prev)
            clock.stage("tts codes", t1, codes, self.prev_code, self.tts_keys)
            clock.stage("tts", t0)
        if decode.any():
            t0 = time.perf_counter()
            frame = self.frame0 if codes is None else compute.kept_where(mx.array(speak), codes, self.frame0)
            samples = self.codec.append_rows(frame[:, None], decode)
            clock.stage("codec", t0, samples, *self.codec.arrays)
        return codes, samples

    def _draws(self, rows: list, speak: np.ndarray) -> tuple[mx.array, mx.array]:
        """Each speaking row's MoG draws from its own key (one call for all rows), or from the noise source a test
        gave its conversation: (gumbels [n, R, components], normals [n, R, latent])."""
        model = self.tts.tts_model
        n = sum(1 for k in model.schedule if k > 0)
        comps, latent = model.mog_head.num_predictions, model.rvq_embs.shape[-1]
        keys, gumbels, normals = key_draws(self.tts_keys, n, comps, latent)
        self.tts_keys = compute.kept_where(mx.array(speak), keys, self.tts_keys)
        gumbels, normals = gumbels[:, :, 0].swapaxes(0, 1), normals[:, :, 0].swapaxes(0, 1)  # [n, R, ...]
        replayed = [(r, row.session.noise) for r, row in rows
                    if speak[r] and not isinstance(row.session.noise, KeyNoise)]
        for r, noise in replayed:  # a test's recorded draws: per conversation, by design
            g, z = noise.frame(n, comps, latent)
            gumbels = mx.slice_update(gumbels, g.astype(gumbels.dtype), mx.array([0, r, 0]), axes=(0, 1, 2))
            normals = mx.slice_update(normals, z.astype(normals.dtype), mx.array([0, r, 0]), axes=(0, 1, 2))
        return gumbels, normals

    def _finish(self, tick: Tick) -> None:
        """The host side of an evaluated tick: each row's ids, codes and samples to its conversation."""
        ids = np.asarray(tick.ids)
        codes = np.asarray(tick.codes) if tick.codes is not None else None
        samples = np.asarray(tick.samples) if tick.samples is not None else None
        if tick.heard:
            hearing, projected, first = tick.heard
            for n, (i, token) in enumerate(zip(hearing, np.asarray(first).tolist())):
                tick.rows[i][1].first = (projected, n, token)
        now = time.perf_counter()
        took = now - max(tick.started, self.finished_at)  # its wall time, not the one before it (look-ahead)
        self.finished_at = now
        for r, row in tick.rows:
            row.session._finish_row(row, ids[r], codes[r] if codes is not None and row.t >= 1 else None,
                                    samples[r] if samples is not None and row.t >= row.session.decoder_from else None,
                                    {"total": took, **tick.seconds})


class TickClock:
    """Wall seconds per stage of a tick, when a row's session profiles (each stage then evaluated on its own): the
    networks ("encoder", "rnnt first joints", "llm", "tts", "codec") and the parts of two of them ("llm decode" and
    "text sampling" make up "llm"; "tts backbone" and "tts codes" make up "tts")."""

    def __init__(self, profile: bool):
        self.profile = profile
        self.seconds: dict[str, float] = {}

    def stage(self, name: str, t0: float, *arrays) -> float:
        """The stage that began at ``t0`` ends once ``arrays`` are evaluated; -> when it ended (the next part's
        start), or ``t0`` unprofiled."""
        if not self.profile:
            return t0
        mx.eval(*arrays)
        now = time.perf_counter()
        self.seconds[name] = now - t0
        return now
