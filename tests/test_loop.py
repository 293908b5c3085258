"""Many conversations on one model (docs/batching.md): each conversation of a group gives exactly what it gives alone.

The reference is the same conversation run alone (a lone session: itself checked against NeMo's offline output on
every fixture by tests/test_conversation.py). In the group, conversations join at different ticks (so their caches hold
different lengths), with different prompts, seeds, speakers, chunkings, text sampling and output modes; rows are
reused after a conversation leaves, one conversation is cancelled halfway, and one calls tools. Encoder frames (the
streaming perception: every row's steady frame in one call), transcript ids, text ids, function ids and codes must be
identical at every position, the samples within 1e-5.
"""

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pytest

from conftest import HARNESS_RUNS, HARNESS_WAV, NEMO
import voicechat
from voicechat import GenerationConfig
from voicechat.errors import SessionsFull
from voicechat.timeline.conversation import Session

from test_conversation import TTS, model, recording  # the lone session's fixtures: the reference

RATE = 16000
SPEAKER = NEMO / "speaker_22k.wav"


def noise(seconds: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(RATE * seconds)) * 0.1).astype(np.float32)


@dataclass
class Talk:
    """One conversation of a test: what it is fed and how, when it joins the group, whether it is cancelled."""

    audio: np.ndarray
    chunk: int
    join: int = 0  # the group tick at which it opens
    prompt: str = ""
    seed: int = 0
    speaker: Optional[str] = None
    config: dict = field(default_factory=dict)
    cancel_after: Optional[int] = None  # chunks pushed before it is closed
    script: object = None  # a tools test's scripted function head
    tools: tuple = ()

    def chunks(self) -> list:
        return [self.audio[i:i + self.chunk] for i in range(0, len(self.audio), self.chunk)]

    def open(self, m, group=None) -> Session:
        s = Heard(m, self.prompt, self.seed, self.speaker, GenerationConfig(**self.config), self.tools,
                    script=self.script() if self.script else None, group=group)
        if s.script is not None:
            s.script.session = s
        return s


class Heard(Session):
    """A session that keeps the encoder frame each of its positions heard (None over the prompt and tool exchanges),
    read back as the position finishes."""

    def __init__(self, *args, **kwargs):
        self.encoder_frames = []
        super().__init__(*args, **kwargs)

    def _finish_row(self, row, *args):
        heard = row.encoded is not None and row.t >= self.prompt_frames
        self.encoder_frames.append(np.array(row.encoded) if heard else None)
        super()._finish_row(row, *args)


def same_frames(a: list, b: list) -> bool:
    def same(x, y) -> bool:
        return (x is None and y is None) or (x is not None and y is not None and np.array_equal(x, y))

    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def alone(m, talk: Talk) -> tuple[list, Session]:
    """The conversation as a lone session: (every frame, the session)."""
    s = talk.open(m)
    frames = list(s.prompt_output)
    chunks = talk.chunks()
    for i, chunk in enumerate(chunks):
        if talk.cancel_after is not None and i == talk.cancel_after:
            return frames, s
        frames += s.feed(chunk, RATE)
        frames += s.settle()
    return frames + s.flush(), s


def together(m, talks: list[Talk], max_sessions: int, lookahead: int = 0) -> list[tuple[list, Session]]:
    """The conversations in one group, driven as a server drives it: each tick every open conversation pushes its
    next chunk, then the group steps (leaving ``lookahead`` ticks running); a conversation whose input is used up
    flushes (the others advance in its ticks); the group never holds more than ``max_sessions`` (a conversation
    waits for a free row)."""
    group = m.sessions(max_sessions)
    waiting = sorted(range(len(talks)), key=lambda i: talks[i].join)
    state = {}  # index -> [session, chunks left, chunks pushed]
    frames = {i: [] for i in range(len(talks))}
    done = {}
    tick = left_running = 0
    while waiting or state:
        while waiting and talks[waiting[0]].join <= tick and group.open < max_sessions:
            i = waiting.pop(0)
            state[i] = [talks[i].open(m, group), talks[i].chunks(), 0]
        for i, (s, chunks, pushed) in list(state.items()):
            talk = talks[i]
            if talk.cancel_after is not None and pushed == talk.cancel_after:
                frames[i] += s.close()
                done[i] = s
                del state[i]
            elif chunks:
                s.push(chunks.pop(0), RATE)
                state[i][2] += 1
            elif s.tool_channel is None or not s.tool_channel.paused():
                frames[i] += s.flush()
                done[i] = s
                del state[i]
        for s, out in group.step(lookahead).items():
            i = next(i for i, entry in state.items() if entry[0] is s)
            frames[i] += out
        left_running = max(left_running, len(group.running))
        tick += 1
    assert left_running == lookahead  # the steps did leave that many ticks on the device
    return [(frames[i], done[i]) for i in range(len(talks))]


def assert_same(solo: list, grouped: list, solo_session: Session, group_session: Session, whole: bool) -> None:
    assert [f.position for f in grouped] == list(range(len(grouped)))
    assert len(grouped) == len(solo) if whole else 0 < len(grouped) <= len(solo)
    solo = solo[:len(grouped)]
    assert [f.text_id for f in grouped] == [f.text_id for f in solo]
    assert [f.function_id for f in grouped] == [f.function_id for f in solo]
    assert np.array_equal(np.stack([f.codes for f in grouped]), np.stack([f.codes for f in solo]))
    assert same_frames(group_session.encoder_frames, solo_session.encoder_frames[:len(grouped)])
    assert not whole or any(f is not None for f in group_session.encoder_frames)
    if solo_session.rnnt is not None:  # the transcript's ids as far as the group ran it
        tokens = solo_session.rnnt_state.tokens
        assert tokens[:len(group_session.rnnt_state.tokens)] == group_session.rnnt_state.tokens
        assert not whole or tokens == group_session.rnnt_state.tokens
    for a, b in zip(grouped, solo):
        assert a.audio.shape == b.audio.shape
        assert a.audio.size == 0 or np.abs(a.audio - b.audio).max() <= 1e-5
        assert (a.text, a.function_text, a.transcript, a.turn) == (b.text, b.function_text, b.transcript, b.turn)
    if whole:
        r, q = group_session.result(), solo_session.result()
        assert np.array_equal(r.text_tokens, q.text_tokens) and np.array_equal(r.audio_codes, q.audio_codes)
        assert r.audio.shape == q.audio.shape and np.abs(r.audio - q.audio).max() <= 1e-5
        assert (r.text, r.function_text, r.user_transcript) == (q.text, q.function_text, q.user_transcript)


def check(m, talks: list[Talk], max_sessions: int, lookahead: int = 0) -> list[Session]:
    grouped = together(m, talks, max_sessions, lookahead)
    for talk, (frames, s) in zip(talks, grouped):
        solo, solo_session = alone(m, talk)
        assert_same(solo, frames, solo_session, s, talk.cancel_after is None)
    return [s for _, s in grouped]


@pytest.mark.parametrize("run", sorted(HARNESS_RUNS))
def test_each_conversation_of_a_group_is_the_conversation_alone(run):
    """Four conversations, at most three at once, on each NeMo fixture: staggered joins, a row reused after a
    leave, one cancelled halfway; prompts, seeds, speakers, chunkings, text sampling and output modes differ."""
    name, tts = HARNESS_RUNS[run]
    m, x = model(name), recording()
    talks = [
        Talk(x, 1280, 0, "You are a helpful assistant.", 0, None, dict(reference=True, **TTS[tts])),
        Talk(x[::-1].copy(), 999, 3, "", 7, str(SPEAKER), dict(**TTS[tts])),
        Talk(noise(1.5, 1), 4000, 5, "Be brief.", 3, None,
             dict(text_temperature=0.8, text_top_p=0.9, text_repetition_penalty=1.3, extra_seconds=0.0)),
        Talk(x, 2560, 9, "Say hello to everyone you meet today, and then say it once more.", 11, None,
             dict(reference=True, text_temperature=1.0, tts_top_p=0.8, tts_top_k=None), cancel_after=6),
    ]
    check(m, talks, max_sessions=3)


@pytest.mark.parametrize("lookahead", [0, 1])
def test_eight_conversations_at_once(lookahead):
    """Up to eight rows (the group's rows grow 1, 2, 4, 8 as conversations join), every conversation exact, its
    encoder frames too (on the CPU each conversation's rows are their own products: docs/batching.md §3); with a
    tick left running on the device by each step as well (its frames come with the next)."""
    m, x = model("tiny_model_aria"), recording()
    talks = [Talk(np.roll(x, 1000 * i), (640, 1280, 1500, 4096)[i % 4], i, ("", "Hi.", "Be kind.")[i % 3], i,
                  str(SPEAKER) if i % 2 else None,
                  dict(text_temperature=0.5 * (i % 3)) | (dict(reference=True) if i % 2 == 0 else {}))
             for i in range(8)]
    check(m, talks, max_sessions=8, lookahead=lookahead)


def test_thirty_six_conversations_at_once():
    """More rows than the CUDA rows kernel's tile (32, voicechat/rows_kernel.py): 36 conversations joining one a
    tick (the rows grow 1, 2, 4 ... 32, 36), each exact, its encoder frames too."""
    m = model("tiny_model_aria")
    talks = [Talk(noise(0.5 + 0.02 * (i % 5), 100 + i), (640, 1280, 999)[i % 3], i, ("", "Hi.")[i % 2], i, None,
                  dict(text_temperature=0.5 * (i % 2)))
             for i in range(36)]
    check(m, talks, max_sessions=36)


def test_rows_of_very_different_lengths():
    """Rows whose lengths differ by blocks: a long prompt beside a short one, a conversation that runs past two
    blocks (512 positions), and one that joins once it has, so its run alone reads buffers of the first capacity
    (256) and in the group the long row's (1024): each exact, each holding its own length's blocks."""
    m = model("tiny_model_aria")
    talks = [Talk(noise(44.0, 1), 1280, 0, LONG_PROMPT, 1, None, {}),  # a position a tick: 97 + 550 positions
             Talk(noise(3.0, 2), 999, 1, "Hi.", 2, None, dict(text_temperature=0.8)),
             Talk(noise(2.0, 3), 1280, 480, "", 3, None, dict(reference=True))]  # the first past 512 positions
    first, _, last = check(m, talks, max_sessions=3)
    assert first.position > 2 * 256 + 100 > 100 > last.position


def test_a_conversation_with_tools_in_a_group(tmp_path):
    """The tool channel fixes one row's ids (docs/tools.md §5) while the others run free."""
    from test_tools import ScriptedHead
    from voicechat.random_checkpoint import write_tiny_checkpoint
    from voicechat.tools import tool

    @tool
    def add(a: int, b: int) -> dict:
        """Add two integers."""
        return {"sum": a + b}

    m = voicechat.load(write_tiny_checkpoint(tmp_path / "model", seed=0), offline=True)
    calls = ['<TOOLCALL>[{"name": "add", "arguments": {"a": 40, "b": 2}}]</TOOLCALL>'] * 2
    talks = [Talk(noise(2.0, 0), 2560, 0, "", 0, None, {}, script=lambda: ScriptedHead(m.tokenizer, list(calls)),
                  tools=(add,)),
             Talk(noise(1.0, 1), 1280, 1, "Hi.", 1, None, {}),
             Talk(noise(1.5, 2), 3000, 2, "", 2, None, dict(reference=True))]
    told = check(m, talks, max_sessions=3)[0]
    assert len(told.tool_calls) == 2 and all(c.result == {"sum": 42} for c in told.tool_calls)


def test_a_group_with_transcripts(tmp_path):
    """The release layout's RNNT transcript head beside the batched perception: the rows' first joint calls and
    prediction networks in one call per tick (random weights emit at most frames, so the rows' hypotheses move at
    different frames, and a tick built ahead meets a stale first call). Chunkings give one steady frame a push
    (1280, 999, 640: computed in the ticks, several waiting over a long prompt) or several (4000: a block of the
    conversation alone), and 1500 both, so a block comes after steady frames still waiting."""
    from voicechat.random_checkpoint import write_tiny_checkpoint

    m = voicechat.load(write_tiny_checkpoint(tmp_path / "model", seed=1), offline=True)
    x = np.concatenate([recording(), recording()[::-1]])  # 4.3 s: the rows overlap for most of their frames
    long = "Say hello to everyone you meet today, and then say it once more."
    talks = [Talk(x, 1280, 0, "Hi.", 0, None, {}),
             Talk(x[::-1].copy(), 1500, 0, long, 1, None, dict(reference=True)),
             Talk(noise(4.0, 5), 999, 1, "", 2, None, dict(text_temperature=0.7)),
             Talk(x, 4000, 2, "Be brief.", 3, None, {}, cancel_after=9),
             Talk(noise(3.0, 6), 640, 3, "Hi.", 4, None, {})]
    grouped = check(m, talks, max_sessions=4)
    assert all(s.rnnt_state.tokens for s in grouped)


LONG_PROMPT = " ".join(["Say hello to everyone you meet today, and then say it once more."] * 3)  # 97 positions


def drive(group, talks: dict) -> dict:
    """Each tick every session pushes its next chunk, then the group steps; a session whose chunks are used up
    flushes. talks: {session: chunks left} -> {session: its frames}."""
    frames = {s: [] for s in talks}
    while any(not s.ended for s in talks):
        for s, chunks in talks.items():
            if chunks:
                s.push(chunks.pop(0), RATE)
            elif not s.ended:
                frames[s] += s.flush()
        for s, out in group.step().items():
            frames[s] += out
    return frames


def test_a_long_prompt_joins_in_stages_while_another_conversation_runs():
    """A joining conversation's set-up runs a stage a tick (docs/batching.md §1): the speaker's codes, the TTS
    warm-up WARMUP_STAGE_LAYERS layers a stage (a voice new to the model: a fresh one, and a voice cloned from the
    question's recording, unlike the running conversation's), then its prompt's prefill PREFILL_STAGE positions a
    stage, then the join, a stage of its own. The running conversation advances a position in each of those ticks;
    the joining one's audio pushed meanwhile waits (nothing lost); both equal their runs alone."""
    from voicechat.timeline.conversation import PREFILL_STAGE, WARMUP_STAGE_LAYERS

    m, x = voicechat.load(NEMO / "tiny_model"), recording()
    talks = [Talk(x, 1280, 0, "Hi.", 1), Talk(x[::-1].copy(), 999, 0, LONG_PROMPT, 2, str(HARNESS_WAV))]
    group = m.sessions(2)
    a, a_chunks = talks[0].open(m, group), talks[0].chunks()
    a.push(a_chunks.pop(0), RATE)
    frames = {a: group.step()[a]}  # alone in the group, its set-up ran whole (nobody to hold back)
    assert not a.setting_up and a.position == 1
    b, b_chunks = talks[1].open(m, group), talks[1].chunks()
    assert b.row == 1 and b.setting_up and not b._ready()
    frames[b], stages = [], 0
    while b.setting_up:
        before = a.position
        a.push(a_chunks.pop(0), RATE)
        b.push(b_chunks.pop(0), RATE)
        out = group.step()
        assert b in out and a.position == before + 1  # a stepped in every tick of b's set-up
        frames[a] += out[a]
        frames[b] += out[b]
        stages += 1
    layers = len(m.net.tts_model.tts_model.backbone.layers)
    assert stages == 1 + -(-layers // WARMUP_STAGE_LAYERS) + -(-b.prompt_frames // PREFILL_STAGE) + 1
    assert b.prompt_frames > 2 * PREFILL_STAGE
    assert b.position == 1 and len(b.prompt_inputs) == b.prompt_frames - 1 and not b.started  # joined, then a tick
    for s, out in drive(group, {a: a_chunks, b: b_chunks}).items():
        frames[s] += out
    for talk, s in zip(talks, (a, b)):
        solo, solo_session = alone(m, talk)
        assert_same(solo, frames[s], solo_session, s, True)


def test_a_conversation_closed_during_its_set_up_leaves_nothing_behind():
    """A conversation closed before it has joined gives no frames and frees its row at once; its stages never run.
    The running conversation and the next one to take the row equal their runs alone."""
    m, x = model("tiny_model_aria"), recording()
    group = m.sessions(2)
    talks = [Talk(x, 1280, 0, "Be brief.", 1), Talk(noise(2.0, 3), 1500, 0, "", 4)]
    a, a_chunks = talks[0].open(m, group), talks[0].chunks()
    a.push(a_chunks.pop(0), RATE)
    frames = {a: group.step()[a]}
    gone = group.session(LONG_PROMPT, seed=9)
    gone.push(noise(0.5, 2), RATE)
    frames[a] += group.step()[a]  # one stage of its set-up ran
    assert gone.setting_up
    assert gone.close() == [] and not gone.setting_up and gone.row is None and group.members[1] is None
    assert not group.joining and gone.position == 0 and gone.result().text_tokens.size == 0
    c, c_chunks = talks[1].open(m, group), talks[1].chunks()
    assert c.row == 1
    frames[c] = []
    for s, out in drive(group, {a: a_chunks, c: c_chunks}).items():
        frames[s] += out
    for talk, s in zip(talks, (a, c)):
        solo, solo_session = alone(m, talk)
        assert_same(solo, frames[s], solo_session, s, True)


def talk_in_turn(m, prompts: list[str], frames: int) -> list[Session]:
    """Conversations of one group joining one by one (every few ticks, so the rows grow 1, 2, 4 ...), each fed
    ``frames`` x 80 ms of the harness question, one push per tick."""
    group = m.sessions(len(prompts))
    x = recording()
    sessions, fed = [], []
    for tick in range(frames + 3 * len(prompts)):
        if tick % 3 == 0 and len(sessions) < len(prompts):
            sessions.append(group.session(prompts[len(sessions)], seed=len(sessions)))
            fed.append(0)
        for i, s in enumerate(sessions):
            if fed[i] < frames:
                s.push(x[1280 * fed[i]:1280 * (fed[i] + 1)], RATE)
                fed[i] += 1
        group.step()
    for s in sessions:
        s.flush()
    return sessions


def test_a_group_warmed_up_for_its_rows_traces_nothing_when_they_grow(traces):
    """``Model.warm_up(sessions=N)`` (the engine's, with compiled per-frame functions as on a GPU) traces each
    per-frame function at every row count a group of N meets; conversations joining one by one afterwards, past
    their prompts to speech and the codec, trace nothing new. Warmed for one row only (``load``), the same
    conversations trace the LLM, the TTS, the codec and the perception again at each new row count."""
    prompts, frames = ["You are a helpful assistant.", "", "Be brief.", "Hi."], 12  # rows 1, 2, 4
    cold = voicechat.load(NEMO / "tiny_model_aria")  # fresh: its compiled functions are made at this load
    at_load = len(traces)
    sessions = talk_in_turn(cold, prompts, frames)
    assert all(s.position > s.prompt_frames + frames // 2 and s.decoded for s in sessions)
    met = {getattr(f, "__name__", "") for f in traces[at_load:]}
    assert {"run_decode", "run_step", "_stream_frame", "_decode_frame"} <= met, met
    warm = voicechat.load(NEMO / "tiny_model_aria")
    warm.warm_up(sessions=len(prompts))
    warmed = len(traces)
    sessions = talk_in_turn(warm, prompts, frames)
    assert all(s.position > s.prompt_frames + frames // 2 and s.decoded for s in sessions)
    assert [getattr(f, "__qualname__", f) for f in traces[warmed:]] == []


def test_a_full_group_refuses_a_conversation_and_a_freed_row_takes_the_next():
    m = model("tiny_model")
    group = m.sessions(2)
    a, b = group.session(), group.session("Hi.")
    with pytest.raises(SessionsFull, match="2 conversations at most"):
        group.session()
    a.close()
    c = group.session(seed=4)
    assert c.row == 0 and group.open == 2 and b.row == 1


def test_the_state_a_group_holds_is_what_admission_counts():
    """``state_bytes`` (what admission weighs against free memory) is the bytes of the group's batched arrays
    (``held_bytes``): two conversations of different lengths, the buffers at the longer one's capacity."""
    from voicechat import compute
    from voicechat.timeline.admission import state_bytes

    m = model("tiny_model_aria")
    group = m.sessions(2)
    a, b = group.session("You are a helpful assistant.", seed=1), group.session(seed=2)
    a.push(noise(24.0, 3), RATE)  # 300 positions: past the first capacity (256)
    b.push(noise(1.0, 4), RATE)
    while group.step():
        pass
    held = [*group.lm.arrays, *group.tts_state.arrays(), group.seen]
    assert a.position > 256 > b.position
    assert group.held_bytes() == sum(x.nbytes for x in held)
    assert group.held_bytes() == state_bytes(m.config, [a.position, b.position], compute.speech_dtype().size)
    assert all(x.shape[0] in (2, 4) for x in held)  # rows: two conversations (the TTS's: two CFG rows each)


def test_a_conversation_that_would_not_fit_is_refused_at_admission():
    """With the device's memory limit just above what is in use, a group cannot take a conversation that could grow
    to the timeline limit: a clear refusal when it would join, not an out-of-memory failure later."""
    import mlx.core as mx

    m = model("tiny_model")
    group = m.sessions(4)
    previous = mx.set_memory_limit(mx.get_active_memory() + 100_000)
    try:
        with pytest.raises(SessionsFull, match="would not fit in memory"):
            group.session()
    finally:
        mx.set_memory_limit(previous)
    assert group.open == 0
    group.session()  # with the memory back, it fits


def test_admission_reserves_each_conversation_up_to_its_cap_and_refuses_only_what_does_not_fit():
    """With memory for two and a half conversations of one minute (``max_minutes``), a group of one-minute
    conversations admits two and refuses the third; the same memory holds no conversation that may reach the
    timeline's limit. A conversation at its cap is refused its next audio, with the cap in the message, and a recording
    that would pass it is refused before it starts."""
    import mlx.core as mx
    from voicechat import compute
    from voicechat.errors import TimelineFull
    from voicechat.limits import SettingError
    from voicechat.timeline.recording import open_recording
    from voicechat.timeline.admission import MEMORY_SHARE, state_bytes

    m = model("tiny_model")
    itemsize = compute.speech_dtype().size
    need = [state_bytes(m.config, [750] * n, itemsize) for n in (1, 2, 3)]
    assert need[2] < state_bytes(m.config, [8192], itemsize)
    capped, whole = m.sessions(3, max_minutes=1.0), m.sessions(3)
    previous = mx.set_memory_limit(mx.get_active_memory() + int((need[1] + need[2]) / 2 / MEMORY_SHARE))
    try:
        capped.session(), capped.session()
        with pytest.raises(SessionsFull, match=r"3 conversations of 750 positions \(1 min\) need"):
            capped.session()
        with pytest.raises(SessionsFull, match="1 conversations of 8192 positions"):
            whole.session()
    finally:
        mx.set_memory_limit(previous)
    assert capped.open == 2 and whole.open == 0
    short = m.sessions(1, max_minutes=0.05).session()
    with pytest.raises(TimelineFull, match=r"pass 37 timeline positions \(0.0493 min, this server's cap on a"):
        short.push(noise(4.0, 1), RATE)
    with pytest.raises(SettingError, match="more than this server's cap on a conversation, 37"):  # before it starts
        open_recording(m, noise(4.0, 2), RATE, group=m.sessions(1, max_minutes=0.05))


def test_a_servers_default_is_what_fits_at_most_the_measured_bound():
    import mlx.core as mx
    from voicechat.timeline.admission import DEFAULT_MOST_SESSIONS, fitting_sessions

    m = model("tiny_model")
    assert fitting_sessions(m) == DEFAULT_MOST_SESSIONS  # the tiny model's state fits many times here
    previous = mx.set_memory_limit(mx.get_active_memory() + 100_000)
    try:
        assert fitting_sessions(m) == 1  # at least one: the admission check refuses it if even that cannot fit
    finally:
        mx.set_memory_limit(previous)
