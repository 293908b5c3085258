"""voicechat.engine without Gradio: the job queue, cancel within one frame, error propagation, thread ownership.

The model is `ScriptedModel`, a stand-in that follows voicechat's model contract (``.config``, ``.tokenizer``,
``.prompt_length``, ``.encoder_frames``, ``.sessions(n)`` and ``.recording(audio, sample_rate, system_prompt=, seed=,
config=, progress=, group=)``, whose ``advance()`` the engine calls between ticks until the run is over, then
``result()`` -> ``Result``; progress after every position, the prompt's included, with the session's ``Frame``) with a
fixed answer, so the engine (and, in test_app.py / test_browser.py, the UI) can be tested without MLX work. Its
frames can be held by a semaphore, so a test decides exactly how far a job gets. The record-and-run parts run on
the real tiny model too (the demo checkpoint, at the end).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import numpy as np
import pytest

from voicechat import engine as eng
from voicechat.audio import prepare_input
from voicechat.errors import AudioInputError, ConfigError, ModelUnavailable
from voicechat.config import GenerationConfig
from voicechat.result import FrameUpdate, Result
from voicechat.timeline.conversation import Frame
from voicechat.tokenizer import TextTokenizer

TESTS = Path(__file__).parent
TOKENIZER = TESTS / "fixtures" / "nemo" / "tiny_model" / "tokenizer.json"  # pad 12, bos 1, eos 2 (NeMo tiny model)
QUESTION = TESTS / "fixtures" / "nemo" / "question_16k.wav"
TIMEOUT = 10.0


class ScriptedModel:
    """A stand-in model: it answers every recording with the same words, one token every other frame after a short
    pause, and a synthetic voice (harmonic bursts whose phase depends on the seed)."""

    IN_RATE, OUT_RATE, FRAME = 16000, 22050, 0.08
    HOP = round(OUT_RATE * FRAME)  # answer samples per position
    CODEBOOKS = 31
    TTS = dict(guidance_scale=0.35, top_p=0.9, noise_scale=0.004)  # its "checkpoint's" voice sampling

    def __init__(self, answer: str = "Paris is the capital of France.",
                 transcript: str = "hi there what is the capital of france", function: str = "",
                 frame_delay: float = 0.0, gate: Optional[threading.Semaphore] = None,
                 error: Optional[Exception] = None):
        self.tokenizer = TextTokenizer(TOKENIZER)
        self.config = SimpleNamespace(frame_length=self.FRAME, input_sample_rate=self.IN_RATE,
                                      output_sample_rate=self.OUT_RATE, pad_id=12, bos_id=1, eos_id=2,
                                      tts=SimpleNamespace(**self.TTS), speaker_name="Aria", speaker_reference=None)
        self.answer, self.transcript, self.function = answer, transcript, function
        self.frame_delay, self.gate, self.error = frame_delay, gate, error
        self.threads: set[int] = set()
        self.frames_started = 0
        self.calls: list[dict] = []

    def script(self, frames_before: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-frame text and function ids: pause 3 frames, BOS, a word every 2 frames, EOS, 4 frames of tail."""
        cfg = self.config
        words = self.tokenizer.encode(self.answer)
        n = frames_before + 3 + 1 + 2 * len(words) + 1 + 4
        text = np.full(n, cfg.pad_id, np.int64)
        start = frames_before + 3
        text[start] = cfg.bos_id
        text[start + 1: start + 1 + 2 * len(words): 2] = words
        text[start + 1 + 2 * len(words)] = cfg.eos_id
        function = np.full(n, cfg.pad_id, np.int64)
        calls = self.tokenizer.encode(self.function) if self.function else []
        function[start + 1: start + 1 + len(calls)] = calls
        return text, function

    def speakers(self) -> list[str]:
        """Its "checkpoint's" voices (the voice library lists them first)."""
        return ["Aria"]

    def prompt_length(self, system_prompt: str) -> int:
        """Positions of the system prompt: [bos] + its tokens + [eos], as the real model's."""
        return len(self.tokenizer.encode(system_prompt)) + 2 if system_prompt else 0

    def encoder_frames(self, samples: int) -> int:
        """Positions of a recording of ``samples`` at 16 kHz: one per started 80 ms."""
        return math.ceil(samples / round(self.IN_RATE * self.FRAME))

    def frames_to_say(self, input_frames: int, n_tokens: int, system_prompt: str = "") -> int:
        """Positions the run takes until its first ``n_tokens`` answer tokens are out."""
        return self.prompt_length(system_prompt) + input_frames + 3 + 2 * n_tokens

    def decoded(self, ids: np.ndarray) -> str:
        specials = (self.config.pad_id, self.config.bos_id, self.config.eos_id)
        return self.tokenizer.decode([int(i) for i in ids if i not in specials])

    def voice(self, text: np.ndarray, seed: int) -> np.ndarray:
        """A tone burst (a vowel-like stack of harmonics) for every word frame. [frames] -> [frames * 1764]"""
        hop = round(self.OUT_RATE * self.FRAME)
        t = np.arange(2 * hop) / self.OUT_RATE
        rng = np.random.default_rng(seed)
        out = np.zeros(len(text) * hop, np.float32)
        for f in np.flatnonzero(text > 20):
            f0 = 110 + 7 * (int(text[f]) % 13)
            burst = sum(np.sin(2 * np.pi * k * f0 * t + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 6))
            burst *= np.hanning(burst.size) * 0.3
            end = min(out.size, f * hop + burst.size)
            out[f * hop:end] += burst[: end - f * hop]
        return out

    def sessions(self, max_sessions, max_minutes=None):
        """The engine's group: this stand-in's recordings run a frame at each ``advance`` (it has no live
        conversations), so its ticks have nothing to do; its memory always has room (``check_room``)."""
        return SimpleNamespace(step=dict, check_room=lambda: (0, 1))

    def recording(self, audio, sample_rate, system_prompt="", seed=0, speaker=None, config=None, progress=None,
                  tools=(), group=None):
        return ScriptedRecording(self, audio, sample_rate, system_prompt, seed, speaker, config, progress)


class ScriptedRecording:
    """``ScriptedModel.recording``: the engine's contract of voicechat.timeline.recording.OfflineInput (``advance``
    until it says the run is over, ``result``, ``session.close`` / ``session.waits_for_tool``); a frame per
    ``advance``."""

    def __init__(self, model: ScriptedModel, audio, sample_rate, system_prompt, seed, speaker, config, progress):
        model.threads.add(threading.get_ident())
        model.calls.append(dict(system_prompt=system_prompt, seed=seed, config=config, sample_rate=sample_rate,
                                speaker=speaker))
        self.model, self.progress, self.seed, self.speaker = model, progress, seed, speaker
        self.system_prompt, self.session = system_prompt, self
        self.t0 = time.perf_counter()
        x = prepare_input(audio, sample_rate, model.IN_RATE, round(model.IN_RATE * model.FRAME))
        if model.error is not None:
            raise model.error
        self.prompt_frames = model.prompt_length(system_prompt)
        self.input_frames = model.encoder_frames(x.size)
        self.text, self.function = model.script(self.input_frames)
        self.voice = model.voice(self.text, seed)
        self.total = self.prompt_frames + len(self.text)
        self.t = 0
        if progress is not None:
            progress(0, self.total, FrameUpdate("prompt", time.perf_counter() - self.t0, 0.0, "", ""))

    def advance(self) -> bool:
        if self.t == self.total:
            return False
        m, t = self.model, self.t
        m.threads.add(threading.get_ident())
        m.frames_started += 1
        if m.gate is not None:
            assert m.gate.acquire(timeout=TIMEOUT), "test never released this frame"
        time.sleep(m.frame_delay)
        self.t += 1
        if self.progress is not None:
            f = t - self.prompt_frames  # the answer's frame (negative over the prompt)
            text, function = self.text, self.function
            before, said = m.decoded(text[:max(f, 0)]), m.decoded(text[:max(f + 1, 0)])
            ids = (int(text[f]), int(function[f])) if f >= 0 else (m.config.pad_id, m.config.pad_id)
            frame = Frame(position=t, text_id=ids[0], function_id=ids[1], codes=np.zeros(m.CODEBOOKS, np.int32),
                          audio=self.voice[max(f, 0) * m.HOP:max(f + 1, 0) * m.HOP], text=said[len(before):],
                          function_text="", transcript="", turn=None, seconds={})
            elapsed = time.perf_counter() - self.t0
            self.progress(t + 1, self.total, FrameUpdate("frames", elapsed, (t + 1) / max(elapsed, 1e-6), said,
                                                         m.decoded(function[:max(f + 1, 0)]), frame))
        return True

    def waits_for_tool(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def result(self) -> Result:
        m = self.model
        return Result(
            text=m.answer, function_text=m.function, user_transcript=m.transcript,
            audio=self.voice, sample_rate=m.OUT_RATE, text_tokens=self.text, function_tokens=self.function,
            audio_codes=np.zeros((len(self.text), m.CODEBOOKS), np.int64), first_frame=self.prompt_frames,
            prompt_frames=self.prompt_frames, input_frames=self.input_frames, frame_seconds=m.FRAME,
            timings={"perception": 0.01, "frames": time.perf_counter() - self.t0, "codec": 0.02},
            settings={"seed": self.seed, "system_prompt": self.system_prompt,
                      "voice": getattr(self.speaker, "name", self.speaker) or "Aria"})


def loader_for(model, record: Optional[dict] = None):
    def load(progress_bar):
        if record is not None:
            record["thread"] = threading.get_ident()
            record["bar"] = progress_bar
        return model

    return load


def collect(job: eng.Job) -> list[eng.Event]:
    events = []
    while True:
        event = job.next_event(timeout=TIMEOUT)
        assert event is not None, f"job {job.id} stalled after {[e.kind for e in events]}"
        events.append(event)
        if event.terminal:
            return events


def until(job: eng.Job, predicate) -> eng.Event:
    while True:
        event = job.next_event(timeout=TIMEOUT)
        assert event is not None, "no event"
        if predicate(event):
            return event


def question() -> eng.Request:
    return eng.Request(str(QUESTION), None, system_prompt="Be brief.", seed=3)


@pytest.fixture
def engine_of():
    engines = []

    def make(model, **kwargs):
        engines.append(eng.Engine(loader_for(model, kwargs.pop("record", None)), name="scripted", **kwargs).start())
        return engines[-1]

    yield make
    for e in engines:
        e.close()


def test_a_job_runs_to_the_end_with_progress_and_a_numpy_answer(engine_of):
    model = ScriptedModel()
    events = collect(engine_of(model).submit(question()))
    kinds = [e.kind for e in events]
    assert kinds[0] == eng.QUEUED and kinds[1] == eng.STARTED and kinds[-1] == eng.DONE
    assert events[1].prompt_frames == model.prompt_length("Be brief.") > 0
    progress = [e for e in events if e.kind == eng.PROGRESS]
    assert progress[0].done == 0 and progress[0].update.stage == "prompt"  # the set-up, before the first position
    # then one event per position, the prompt's included, in order
    assert [e.done for e in progress[1:]] == list(range(1, progress[-1].total + 1))
    assert progress[-1].update.text == model.answer  # the partial text grows to the whole answer
    answer = events[-1].answer
    assert isinstance(answer.result.audio, np.ndarray) and answer.result.user_transcript == model.transcript
    assert answer.timeline_frames == progress[-1].done  # one frame count from start to end
    # each event carries the position's new answer samples: together they are the answer
    assert [e.frame.position for e in progress[1:]] == list(range(progress[-1].total))
    assert np.array_equal(np.concatenate([e.frame.audio for e in progress[1:]]), answer.result.audio)
    assert model.calls[0]["system_prompt"] == "Be brief." and model.calls[0]["seed"] == 3


def test_answer_places_each_word_at_its_frame(engine_of):
    model = ScriptedModel(answer="Hello there, how can I help?")
    answer = collect(engine_of(model).submit(question()))[-1].answer
    r = answer.result
    words = model.tokenizer.encode(model.answer)
    start = r.first_frame + r.input_frames + 3  # the script: BOS 3 frames after the recording, a word every 2
    assert answer.turn_starts == (start,) and answer.turn_ends == (start + 1 + 2 * len(words),)
    assert [p.frame for p in answer.text_pieces] == [start + 1 + 2 * i for i in range(len(words))]
    assert [p.token_id for p in answer.text_pieces] == words
    assert "".join(p.text for p in answer.text_pieces) == model.answer  # pieces concatenate to the decoded text
    assert [p.token for p in answer.text_pieces[:2]] == ["Hell", "o"]
    assert answer.function_pieces == ()


def test_a_multi_byte_character_belongs_to_the_token_that_completes_it(engine_of):
    model = ScriptedModel(answer="Café olé")
    answer = collect(engine_of(model).submit(question()))[-1].answer
    assert "".join(p.text for p in answer.text_pieces) == "Café olé"
    assert "\ufffd" not in "".join(p.text for p in answer.text_pieces)
    assert len(answer.text_pieces) == len(model.tokenizer.encode("Café olé"))


def test_function_channel_pieces(engine_of):
    model = ScriptedModel(function="get weather")
    answer = collect(engine_of(model).submit(question()))[-1].answer
    ids = model.tokenizer.encode("get weather")
    assert [p.token_id for p in answer.function_pieces] == ids
    assert "".join(p.text for p in answer.function_pieces) == "get weather"


def test_model_is_loaded_and_run_on_the_engine_thread_only(engine_of):
    record = {}
    model = ScriptedModel()
    engine = engine_of(model, record=record)
    collect(engine.submit(question()))
    collect(engine.submit(question()))
    assert record["thread"] == engine.thread.ident != threading.get_ident()
    assert model.threads == {engine.thread.ident}
    assert engine.status().state == eng.READY


def test_cancel_stops_a_running_job_within_one_frame(engine_of):
    gate = threading.Semaphore(0)
    model = ScriptedModel(gate=gate)
    job = engine_of(model).submit(question())
    for _ in range(3):
        gate.release()
    until(job, lambda e: e.kind == eng.PROGRESS and e.done == 3)
    deadline = time.monotonic() + TIMEOUT
    while model.frames_started < 4 and time.monotonic() < deadline:  # frame 4 starts and waits for the gate
        time.sleep(0.01)
    job.cancel()
    gate.release()  # let frame 4 finish: its progress callback must stop the job
    events = collect(job)
    assert events[-1].kind == eng.CANCELLED and "4 of" in events[-1].message
    assert [e.kind for e in events[:-1]] == []  # no progress event after the cancel
    time.sleep(0.2)
    assert model.frames_started == 4  # no fifth frame was started


def test_queue_positions_and_cancelling_a_waiting_job(engine_of):
    gate = threading.Semaphore(0)
    engine = engine_of(ScriptedModel(gate=gate))
    first = engine.submit(question(), owner="a")
    until(first, lambda e: e.kind == eng.STARTED)
    second, third = engine.submit(question(), owner="b"), engine.submit(question(), owner="c")
    assert second.next_event(TIMEOUT).position == 1 and third.next_event(TIMEOUT).position == 2
    assert engine.cancel_owner("b") == 1
    assert collect(second)[-1].kind == eng.CANCELLED  # at once, while the first job still holds the engine
    assert third.next_event(TIMEOUT).position == 1  # moved up
    for _ in range(1000):
        gate.release()
    assert collect(first)[-1].kind == eng.DONE
    events = collect(third)
    assert [e.position for e in events if e.kind == eng.QUEUED] == [0] and events[-1].kind == eng.DONE
    assert engine.pending() == 0


def test_a_full_queue_turns_requests_away(engine_of):
    gate = threading.Semaphore(0)
    engine = engine_of(ScriptedModel(gate=gate), max_waiting=1)
    running = engine.submit(question())
    until(running, lambda e: e.kind == eng.STARTED)
    engine.submit(question())
    with pytest.raises(eng.EngineFull, match="already waiting"):
        engine.submit(question())
    engine.close(timeout=0)
    for _ in range(1000):
        gate.release()


@pytest.mark.parametrize("audio, rate, message", [
    (np.zeros(0, np.float32), 16000, "empty"),
    (np.full(16000, np.nan, np.float32), 16000, "NaN"),
    (np.zeros(100, np.float32), 16000, "shorter than one"),
])
def test_bad_input_is_an_error_event_and_the_engine_keeps_serving(engine_of, audio, rate, message):
    engine = engine_of(ScriptedModel())
    events = collect(engine.submit(eng.Request(audio, rate)))
    assert events[-1].kind == eng.ERROR and message in events[-1].message
    assert collect(engine.submit(question()))[-1].kind == eng.DONE


def test_unreadable_file_is_an_error_event(engine_of, tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("this is not audio")
    events = collect(engine_of(ScriptedModel()).submit(eng.Request(str(bad), None)))
    assert events[-1].kind == eng.ERROR and "notes.wav is not a readable audio file" in events[-1].message


def test_an_unexpected_exception_is_reported_in_one_line(engine_of, capsys):
    model = ScriptedModel(error=RuntimeError("kernel exploded"))
    engine = engine_of(model)
    events = collect(engine.submit(question()))
    assert events[-1].kind == eng.ERROR
    assert events[-1].message == "Engine error: RuntimeError: kernel exploded"
    assert "Traceback" in capsys.readouterr().err  # the traceback goes to the terminal, not the user
    model.error = None
    assert collect(engine.submit(question()))[-1].kind == eng.DONE


def test_a_user_error_keeps_its_message(engine_of):
    events = collect(engine_of(ScriptedModel(error=AudioInputError("the recording is 700.0 s long"))).submit(
        question()))
    assert (events[-1].kind, events[-1].message) == (eng.ERROR, "the recording is 700.0 s long")


def test_load_failure_is_shown_and_retried_on_the_next_job():
    attempts = []

    def load(progress_bar):
        attempts.append(threading.get_ident())
        if len(attempts) < 3:
            raise ModelUnavailable("org/model is not in the local Hugging Face cache; run `hf download org/model`")
        return ScriptedModel()

    engine = eng.Engine(load, name="org/model").start()
    try:
        events = collect(engine.submit(question()))  # attempt 1 at start, attempt 2 for this job
        assert events[-1].kind == eng.ERROR and "hf download org/model" in events[-1].message
        status = engine.status()
        assert status.state == eng.FAILED and "hf download" in status.message
        assert collect(engine.submit(question()))[-1].kind == eng.DONE  # attempt 3 succeeds
        assert engine.status().state == eng.READY and set(attempts) == {engine.thread.ident}
    finally:
        engine.close()


def test_download_bar_reports_byte_progress():
    reports = []
    bar_class = eng.download_bar("org/model", reports.append)
    with bar_class(total=4 * 2**20, unit="B", unit_scale=True, disable=True) as hidden:  # counts while disabled
        hidden.update(2**20)
    assert reports[-1].fraction == 0.25
    with bar_class(total=4 * 2**20, unit="B", unit_scale=True, file=io.StringIO()) as bar:
        bar.update(2**20)
        bar.update(2**20)
    assert reports[-1].state == eng.DOWNLOADING and reports[-1].fraction == 0.5
    assert reports[-1].message == "Downloading org/model: 2.10MB of 4.19MB"
    with bar_class(total=3, file=io.StringIO()) as files:  # the "Fetching N files" bar counts files, not bytes
        files.update(1)
    assert len(reports) == 3


def test_download_bar_draws_only_on_a_terminal():
    """huggingface_hub gives a class of its own no ``disable``: tqdm's default drew it, carriage returns and all, into
    the pipe or log that the app's and serve's stderr is (issue 39)."""
    bar_class = eng.download_bar("org/model", lambda status: None)
    bar_class.monitor_interval = 0  # no tqdm monitor thread left running after the test
    log = io.StringIO()
    with bar_class(total=4 * 2**20, unit="B", unit_scale=True, file=log) as bar:
        bar.update(2**20)
    assert log.getvalue() == ""
    leader, follower = os.openpty()
    with open(follower, "w") as terminal, bar_class(total=4, file=terminal) as bar:
        bar.update(1)
    assert b"\r" in os.read(leader, 4096)
    os.close(leader)


def test_close_cancels_waiting_jobs_and_stops_the_thread():
    gate = threading.Semaphore(0)
    engine = eng.Engine(loader_for(ScriptedModel(gate=gate)), name="scripted").start()
    running = engine.submit(question())
    until(running, lambda e: e.kind == eng.STARTED)
    waiting = engine.submit(question())
    engine.close(timeout=0)
    assert collect(waiting)[-1].kind == eng.CANCELLED
    gate.release()
    assert collect(running)[-1].kind == eng.CANCELLED
    engine.thread.join(TIMEOUT)
    assert not engine.thread.is_alive() and engine.status().state == eng.CLOSED
    with pytest.raises(eng.EngineFull):
        engine.submit(question())


# ---------------------------------------------------------------------------------------------------------------
# live conversations, on the real tiny model (the demo checkpoint)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    from voicechat.random_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("demo") / "model", seed=0)


@pytest.fixture
def live_engine(demo_dir):
    engine = eng.Engine(eng.hub_model(str(demo_dir), offline=True), name="demo").start()
    yield engine
    engine.close()


def test_estimates_come_from_this_machines_measured_ticks(live_engine):
    """Before any run, a few frames of a live conversation (the Talk live tab's speed check) measure this machine:
    the estimates use the median of the last ticks, not the speed assumed for the device."""
    wait_until(lambda: live_engine.status().state == eng.READY)
    assert not live_engine.status().measured
    live = live_engine.open_live(eng.LiveRequest())
    live.send(np.zeros(16000, np.float32), 16000)
    until(live, lambda e: e.kind == eng.FRAMES)
    live.close()
    status = live_engine.status()
    assert status.realtime_factor is None and status.measured
    assert status.expected_realtime_factor == status.tick_seconds / 0.08 != status.facts.expected_realtime_factor


def live_events(live, until=eng.CLOSED, timeout=60.0) -> list:
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = live.next_event(timeout=0.5)
        if event is not None:
            events.append(event)
            if event.kind == until:
                return events
    raise AssertionError(f"no {until} event within {timeout} s; got {[e.kind for e in events]}")


def test_live_conversation_gives_the_sessions_frames(live_engine, demo_dir):
    """Audio sent from another thread in 20 ms pieces of 24 kHz int16 comes back as the frames a session on the same
    checkpoint gives for the same audio, each one as its 80 ms are complete; the result holds all of them."""
    import soundfile as sf
    import soxr
    import voicechat

    x, _ = sf.read(QUESTION, dtype="float32")
    pcm = np.round(soxr.resample(x, 16000, 24000) * 32767).astype(np.int16)
    live = live_engine.open_live(eng.LiveRequest(system_prompt="Be brief.", seed=3))

    def speak():
        for i in range(0, len(pcm), 480):
            live.send(pcm[i:i + 480], 24000)
        live.flush()

    sender = threading.Thread(target=speak)
    sender.start()
    events = live_events(live)
    sender.join()
    kinds = [e.kind for e in events]
    assert kinds[:2] == [eng.QUEUED, eng.READY] and kinds[-1] == eng.CLOSED and eng.ERROR not in kinds
    frames = [f for e in events if e.kind == eng.FRAMES for f in e.frames]
    assert all(isinstance(f.audio, np.ndarray) and isinstance(f.codes, np.ndarray) for f in frames)
    assert sum(1 for e in events if e.kind == eng.FRAMES) > 5  # frames came back while the audio was arriving

    m = voicechat.load(demo_dir, offline=True)  # a second copy, on this thread
    s = m.session("Be brief.", seed=3)
    direct = s.feed(pcm, 24000) + s.flush()
    assert [f.position for f in frames] == [f.position for f in direct]
    assert [f.text_id for f in frames] == [f.text_id for f in direct]
    assert np.array_equal(np.stack([f.codes for f in frames]), np.stack([f.codes for f in direct]))
    r = live.result()
    assert np.array_equal(r.audio_codes, s.result().audio_codes) and np.array_equal(r.audio, s.result().audio)


def test_one_live_conversation_at_a_time(live_engine):
    first = live_engine.open_live(eng.LiveRequest())
    assert live_events(first, until=eng.READY)[-1].kind == eng.READY
    with pytest.raises(eng.EngineBusy, match="already running"):
        live_engine.open_live(eng.LiveRequest())
    first.send(np.zeros(1280 * 3, np.float32), 16000)
    first.close()  # stops at the next frame
    assert live_events(first)[-1].kind == eng.CLOSED
    assert first.result() is not None
    second = live_engine.open_live(eng.LiveRequest())  # free again
    second.close()
    assert live_events(second)[-1].kind == eng.CLOSED


def test_bad_live_audio_ends_the_conversation_with_a_message(live_engine):
    live = live_engine.open_live(eng.LiveRequest())
    live.send(np.array([0.0, np.nan] * 800, np.float32), 16000)
    events = live_events(live)
    errors = [e for e in events if e.kind == eng.ERROR]
    assert len(errors) == 1 and "NaN" in errors[0].message and events[-1].kind == eng.CLOSED
    ok = live_engine.open_live(eng.LiveRequest())  # the engine serves the next one
    ok.send(np.zeros(1280 * 2, np.float32), 16000)
    ok.flush()
    assert any(e.kind == eng.FRAMES for e in live_events(ok))


def test_a_live_conversation_at_the_engines_cap_ends_with_a_message(demo_dir):
    """``max_minutes`` (``serve --max-minutes``): a live conversation that would pass it ends with an ERROR event
    that names the cap, then CLOSED; the frames before the cap were given out."""
    engine = eng.Engine(eng.hub_model(str(demo_dir), offline=True), name="demo", max_minutes=0.05).start()
    try:
        live = engine.open_live(eng.LiveRequest())
        live.send(np.zeros(1280 * 6, np.float32), 16000)  # 0.48 s: within the cap's 37 positions
        events = live_events(live, until=eng.FRAMES)
        for _ in range(9):  # the seventh message passes the cap
            live.send(np.zeros(1280 * 6, np.float32), 16000)
        events += live_events(live)
    finally:
        engine.close()
    errors = [e for e in events if e.kind == eng.ERROR]
    assert len(errors) == 1 and "37 timeline positions" in errors[0].message
    assert "cap on a conversation" in errors[0].message and events[-1].kind == eng.CLOSED
    assert any(e.kind == eng.FRAMES for e in events)


def started(job: eng.Job, done: int = 0) -> eng.Event:
    """Its first PROGRESS event with at least ``done`` positions run (60 s at most)."""
    return until_within(job, lambda e: e.kind == eng.PROGRESS and e.done >= done, 60.0)


def until_within(job: eng.Job, predicate, timeout: float) -> eng.Event:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = job.next_event(timeout=0.5)
        if event is not None and predicate(event):
            return event
        assert event is None or not event.terminal, f"job {job.id} ended: {event.kind} {event.message}"
    raise AssertionError(f"job {job.id}: nothing matching within {timeout} s")


def solo_answer(demo_dir, request: eng.Request):
    """The same recording run alone, by ``generate`` on a second copy of the model (this thread)."""
    import voicechat

    m = voicechat.load(demo_dir, offline=True)
    return m.generate(request.audio, request.sample_rate, system_prompt=request.system_prompt, seed=request.seed,
                      config=request.config)


def assert_same_answer(result, alone) -> None:
    assert np.array_equal(result.text_tokens, alone.text_tokens)
    assert np.array_equal(result.function_tokens, alone.function_tokens)
    assert np.array_equal(result.audio_codes, alone.audio_codes)
    assert result.audio.shape == alone.audio.shape and np.abs(result.audio - alone.audio).max() <= 1e-5


def long_recording(seed: int, prompt: str = "Hi.") -> eng.Request:
    """The question and 12 s of silence after it (fixed length): about 180 positions."""
    import soundfile as sf

    x, _ = sf.read(QUESTION, dtype="float32")
    return eng.Request(x if seed % 2 == 0 else x[::-1].copy(), 16000, system_prompt=prompt, seed=seed,
                       config=GenerationConfig(extra_seconds=12.0))


def test_a_live_conversation_joins_while_a_recording_runs(live_engine, demo_dir):
    """A live conversation opened during a recording joins at the next tick: it waits for nothing (QUEUED 0), is
    READY and gives its first frames while the recording still runs; the recording's answer and the conversation's
    frames equal the same work alone."""
    import soundfile as sf
    import voicechat

    x, _ = sf.read(QUESTION, dtype="float32")
    request = long_recording(4)
    job = live_engine.submit(request)
    started(job, done=5)
    live = live_engine.open_live(eng.LiveRequest(system_prompt="Be brief.", seed=2))
    first = live.next_event(timeout=TIMEOUT)
    assert first.kind == eng.QUEUED and first.position == 0
    for i in range(0, 1280 * 10, 1280):
        live.send(x[i:i + 1280], 16000)
    events = live_events(live, until=eng.FRAMES)
    assert not job.finished.is_set()  # the recording still ran when the conversation's first frames came
    assert eng.READY in [e.kind for e in events]
    for i in range(1280 * 10, len(x), 1280):
        live.send(x[i:i + 1280], 16000)
    live.flush()
    events += live_events(live)
    answer = [e for e in collect_within(job, 120.0) if e.terminal][-1]
    assert answer.kind == eng.DONE and eng.ERROR not in [e.kind for e in events]
    assert_same_answer(answer.answer.result, solo_answer(demo_dir, request))
    frames = [f for e in events if e.kind == eng.FRAMES for f in e.frames]
    s = voicechat.load(demo_dir, offline=True).session("Be brief.", seed=2)
    direct = s.feed(x, 16000) + s.flush()
    assert [f.position for f in frames] == [f.position for f in direct]
    assert [f.text_id for f in frames] == [f.text_id for f in direct]
    assert np.array_equal(np.stack([f.codes for f in frames]), np.stack([f.codes for f in direct]))
    assert np.array_equal(live.result().audio_codes, s.result().audio_codes)
    assert np.abs(live.result().audio - s.result().audio).max() <= 1e-5


def collect_within(job: eng.Job, timeout: float) -> list:
    events, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = job.next_event(timeout=0.5)
        if event is not None:
            events.append(event)
            if event.terminal:
                return events
    raise AssertionError(f"job {job.id} did not end within {timeout} s; got {[e.kind for e in events]}")


def test_recordings_step_together_each_as_alone_and_one_cancelled(demo_dir):
    """``max_recordings=2``: two recordings run at once (each one's frames go on while the other runs), a third
    waits behind both with its position; one of the two cancelled halfway frees its row for the third. The two that
    finish equal their ``generate`` alone."""
    engine = eng.Engine(eng.hub_model(str(demo_dir), offline=True), name="demo", max_recordings=2).start()
    try:
        wait_until(lambda: engine.status().state == eng.READY)
        requests = [long_recording(0, "Hi."), long_recording(1, "Be brief."), long_recording(2, "")]
        first, second = engine.submit(requests[0]), engine.submit(requests[1])
        started(first, done=1)
        started(second, done=1)
        assert not first.finished.is_set()  # the second's frames came while the first ran
        third = engine.submit(requests[2])
        assert third.next_event(TIMEOUT).position == 2  # both rows taken
        assert engine.wait_seconds(third) > 0
        halfway = started(second, done=40)
        assert not first.finished.is_set() and halfway.done < halfway.total
        second.cancel()
        cancelled = collect_within(second, 60.0)[-1]
        assert cancelled.kind == eng.CANCELLED and "of" in cancelled.message
        moved = third.next_event(60.0)
        assert moved.kind == eng.QUEUED and moved.position == 0  # the cancelled row is free for it
        started(third, done=1)
        assert not first.finished.is_set()  # the third joined while the first ran
        answers = [[e for e in collect_within(job, 120.0) if e.terminal][-1] for job in (first, third)]
    finally:
        engine.close()
    assert [a.kind for a in answers] == [eng.DONE, eng.DONE]
    for answer, request in zip(answers, (requests[0], requests[2])):
        assert_same_answer(answer.answer.result, solo_answer(demo_dir, request))


def test_a_record_and_run_job_on_the_demo_model(live_engine):
    """The real tiny model through the engine: the expected length known at submission is the progress total (the
    tools' block of the prompt included), one count from the first position (the prompt's) to the last, and the
    frames' new samples are the answer."""
    import soundfile as sf
    from voicechat.tools import get_current_time

    x, rate = sf.read(QUESTION, dtype="float32")
    wait_until(lambda: live_engine.status().state == eng.READY)
    job = live_engine.submit(eng.Request(x, rate, "Be brief.", seed=3, config=GenerationConfig(max_extra_seconds=1),
                                         tools=(get_current_time,)))
    events = collect(job)
    progress = [e for e in events if e.kind == eng.PROGRESS]
    answer = events[-1].answer
    assert events[1].kind == eng.STARTED and events[1].prompt_frames == answer.result.prompt_frames > 0
    assert job.frames_expected == progress[-1].total  # known before it ran
    assert [e.done for e in progress[1:]] == list(range(1, answer.timeline_frames + 1))
    assert [e.frame.position for e in progress[1:]] == list(range(answer.timeline_frames))
    r = answer.result
    # the samples that became final with each position after the prompt; the codec runs 6 samples behind the
    # timeline (docs/streaming.md §6), so they start 6 samples before the answer and its last 6 come with the end
    spoken = np.concatenate([e.frame.audio for e in progress[1:] if e.frame.position >= r.first_frame])
    assert len(r.audio) == len(spoken) == (answer.timeline_frames - r.first_frame) * 1764
    assert np.array_equal(r.audio[:-6], spoken[6:])
    status = live_engine.status()
    assert status.realtime_factor == answer.realtime_factor == pytest.approx(
        answer.wall_seconds / (answer.timeline_frames * r.frame_seconds))
    assert progress[-1].seconds <= answer.wall_seconds  # the same clock


def test_the_status_gives_the_models_numbers(engine_of):
    import mlx.core as mx

    engine = engine_of(ScriptedModel())
    wait_until(lambda: engine.status().state == eng.READY)
    device = "gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"
    assert engine.status().facts == eng.ModelFacts(
        frame_seconds=0.08, tts_guidance_scale=0.35, tts_top_p=0.9, tts_noise_scale=0.004,
        expected_realtime_factor=eng.EXPECTED_REALTIME_FACTOR[device])
    assert engine.status().realtime_factor is None and engine.status().tick_seconds is None
    assert engine.status().expected_realtime_factor == eng.EXPECTED_REALTIME_FACTOR[device]
    answer = collect(engine.submit(question()))[-1].answer
    assert engine.status().realtime_factor == answer.realtime_factor


def test_the_expected_wait_comes_from_measured_frame_times_and_the_queued_lengths(engine_of):
    gate = threading.Semaphore(0)
    model = ScriptedModel(gate=gate)
    engine = engine_of(model)
    wait_until(lambda: engine.status().state == eng.READY)
    samples = np.zeros(16000 * 3, np.float32)
    config = GenerationConfig(extra_seconds=2.0)
    first = engine.submit(eng.Request(samples, 16000, "Be brief.", config=config))
    second = engine.submit(eng.Request(samples, 16000, "Be brief.", config=config))
    third = engine.submit(eng.Request(samples, 48000, "", config=config))  # 1 s at 48 kHz
    prompt = model.prompt_length("Be brief.")
    assert second.frames_expected == prompt + 63  # the prompt, then 3 s + 2 s of extra in 80 ms positions (62.5)
    assert third.frames_expected == 38  # 1 s at 48 kHz + 2 s (37.5)
    until(first, lambda e: e.kind == eng.PROGRESS and e.done == 0)  # started, nothing measured yet
    expected = engine.status().expected_realtime_factor * 0.08
    assert engine.wait_seconds(second) == pytest.approx(first.progress[1] * expected)
    for _ in range(3):
        gate.release()
    measured = until(first, lambda e: e.kind == eng.PROGRESS and e.done == 3)
    per_frame = measured.seconds / 3  # the running job's own speed
    left = measured.total - 3
    assert engine.wait_seconds(second) == pytest.approx(left * per_frame)
    assert engine.wait_seconds(third) == pytest.approx((left + second.frames_expected) * per_frame)
    assert engine.wait_seconds(first) is None  # running, not waiting
    engine.close(timeout=0)
    for _ in range(1000):
        gate.release()


def wait_until(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_live_conversations_and_a_recording_step_together_each_as_alone(demo_dir):
    """``max_sessions=2``: two live conversations at once while a recording runs; a third live one is refused. Each
    live conversation's frames and the recording's answer equal the same work done alone; the recording started
    before the live conversations had ended (it stepped with them)."""
    import soundfile as sf
    import voicechat

    x, _ = sf.read(QUESTION, dtype="float32")
    engine = eng.Engine(eng.hub_model(str(demo_dir), offline=True), name="demo", max_sessions=2).start()
    try:
        lives = [engine.open_live(eng.LiveRequest(system_prompt=p, seed=i)) for i, p in enumerate(["Be brief.", ""])]
        with pytest.raises(eng.EngineBusy, match="2 live conversations are already running"):
            engine.open_live(eng.LiveRequest())
        assert all(live_events(live, until=eng.READY)[-1].kind == eng.READY for live in lives)
        for live in lives:
            live.send(x[:1280 * 5], 16000)
        job = engine.submit(eng.Request(x[::-1].copy(), 16000, system_prompt="Hi.", seed=5))
        started = job.next_event(60.0)
        while started.kind != eng.STARTED:
            started = job.next_event(60.0)
        for i in range(5, len(x) // 1280):  # the rest in 80 ms pieces while the recording runs
            for live in lives:
                live.send(x[1280 * i:1280 * (i + 1)], 16000)
        for live in lives:
            live.flush()
        answer = [e for e in job if e.terminal][-1]
        events = [live_events(live) for live in lives]
    finally:
        engine.close()
    assert answer.kind == eng.DONE
    m = voicechat.load(demo_dir, offline=True)
    alone = m.generate(x[::-1].copy(), 16000, system_prompt="Hi.", seed=5)
    assert np.array_equal(answer.answer.result.audio_codes, alone.audio_codes)
    assert np.array_equal(answer.answer.result.text_tokens, alone.text_tokens)
    assert np.abs(answer.answer.result.audio - alone.audio).max() <= 1e-5
    for (prompt, seed), evs in zip([("Be brief.", 0), ("", 1)], events):
        frames = [f for e in evs if e.kind == eng.FRAMES for f in e.frames]
        s = m.session(prompt, seed=seed)
        direct = s.feed(x[:1280 * (len(x) // 1280)], 16000) + s.flush()
        assert [f.position for f in frames] == [f.position for f in direct]
        assert [f.text_id for f in frames] == [f.text_id for f in direct]
        assert np.array_equal(np.stack([f.codes for f in frames]), np.stack([f.codes for f in direct]))
        assert eng.ERROR not in [e.kind for e in evs]


def test_an_engine_for_many_conversations_warms_every_row_count_up(demo_dir, traces):
    """With compiled per-frame functions (a GPU), an engine of ``max_sessions=2`` warms up, before it is ready, every
    row count its group meets (two live conversations and a recording: rows 1, 2, 3), so conversations joining it
    afterwards trace nothing while the others talk."""
    import soundfile as sf

    x, _ = sf.read(QUESTION, dtype="float32")
    engine = eng.Engine(eng.hub_model(str(demo_dir), offline=True), name="demo", max_sessions=2).start()
    try:
        wait_until(lambda: engine.status().state == eng.READY, timeout=300)
        ready = len(traces)
        lives = [engine.open_live(eng.LiveRequest(system_prompt=p, seed=i)) for i, p in enumerate(["Be brief.", ""])]
        assert all(live_events(live, until=eng.READY)[-1].kind == eng.READY for live in lives)
        job = engine.submit(eng.Request(x[:16000], 16000, system_prompt="Hi.", seed=5))
        for i in range(12):
            for live in lives:
                live.send(x[1280 * i:1280 * (i + 1)], 16000)
        for live in lives:
            live.flush()
        assert [e for e in job if e.terminal][-1].kind == eng.DONE
        events = [live_events(live) for live in lives]
    finally:
        engine.close()
    assert all(sum(len(e.frames) for e in evs if e.kind == eng.FRAMES) > 12 for evs in events)
    assert ready > 0 and [getattr(f, "__qualname__", f) for f in traces[ready:]] == []


def test_the_recording_rows_are_at_least_one():
    with pytest.raises(ConfigError, match="max_recordings must be at least 1, got 0"):
        eng.Engine(loader_for(ScriptedModel()), name="scripted", max_recordings=0)


def test_the_live_conversations_are_at_least_one():
    """The engine's admission owns the limit: 0 is refused, not taken for one (None: as many as fit)."""
    with pytest.raises(ConfigError, match="max_sessions must be at least 1, got 0"):
        eng.Engine(loader_for(ScriptedModel()), name="scripted", max_sessions=0)
    with pytest.raises(ConfigError, match="--max-sessions must be at least 1, got -1"):
        eng.check_limits(-1, flags=True)


def test_a_conversations_cap_is_above_zero_minutes():
    with pytest.raises(ConfigError, match="max_minutes must be above 0, got 0"):
        eng.Engine(loader_for(ScriptedModel()), name="scripted", max_minutes=0)
    with pytest.raises(ConfigError, match="--max-minutes must be above 0, got -1"):
        eng.check_limits(1, max_minutes=-1, flags=True)


# ---------------------------------------------------------------------------------------------------------------
# recordings that wait for memory, on the real tiny model under a real memory limit
# ---------------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def memory_for(model, conversations: float):
    """The device's memory limit set to what is in use now plus room for ``conversations`` conversations' state at
    the timeline limit in the admission's share. A real limit, not a patch: ``group.free_memory`` reads it on a GPU
    and on a CPU alike, and the group's own check weighs its own ``state_bytes`` against it (docs/batching.md §4),
    so 1.5 admits one conversation and refuses a second while the first runs."""
    import mlx.core as mx
    from voicechat import compute
    from voicechat.timeline.admission import MEMORY_SHARE, state_bytes
    from voicechat.limits import TIMELINE_LIMIT

    one = state_bytes(model.config, [TIMELINE_LIMIT], compute.speech_dtype().size)
    previous = mx.set_memory_limit(mx.get_active_memory() + int(conversations * one / MEMORY_SHARE))
    try:
        yield
    finally:
        mx.set_memory_limit(previous)


def follow(jobs: list) -> list:
    """Each job's events, read as they come on a thread of its own; at its STARTED event, which of ``jobs`` had
    finished (a job's DONE is emitted before the next one's STARTED, so a reader's delay cannot hide the order). ->
    [(events, finished at its start) per job] once all have ended (120 s at most)."""
    out = [None] * len(jobs)

    def read(n: int) -> None:
        events, finished = [], None
        while not (events and events[-1].terminal):
            events.append(jobs[n].next_event(120.0))
            assert events[-1] is not None, f"job {jobs[n].id} stalled after {[e.kind for e in events[:-1]]}"
            if events[-1].kind == eng.STARTED:
                finished = [j.finished.is_set() for j in jobs]
        out[n] = (events, finished)

    threads = [threading.Thread(target=read, args=(n,)) for n in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150.0)
    assert all(o is not None for o in out), "a job's events were not all read"
    return out


def alone_on_a_fresh_engine(demo_dir, request: eng.Request):
    """The recording's answer from an engine of its own that runs nothing else (no memory limit)."""
    engine = eng.Engine(eng.hub_model(str(demo_dir), offline=True), name="alone").start()
    try:
        end = collect_within(engine.submit(request), 120.0)[-1]
    finally:
        engine.close()
    assert end.kind == eng.DONE, end.message
    return end.answer.result


def test_recordings_that_do_not_fit_in_memory_wait_for_it_in_order(demo_dir):
    """Memory for one recording at a time (``memory_for``: a real limit the group's admission reads) on an engine
    with rows for three: of four recordings submitted, the first runs and the others wait for memory, their QUEUED
    events saying so; the fourth, cancelled while it waits, leaves at once; the three others run one after another in
    submission order (each starts once the one before has ended), each answer equal to the same recording on a fresh
    engine of its own."""
    requests = [long_recording(seed, prompt) for seed, prompt in enumerate(["Hi.", "Be brief.", "", "Hi."])]
    engine = eng.Engine(eng.hub_model(str(demo_dir), offline=True), name="demo", max_recordings=3).start()
    try:
        wait_until(lambda: engine.status().state == eng.READY)
        with memory_for(engine.model, 1.5):
            jobs = [engine.submit(request) for request in requests]
            waiting = until_within(jobs[3], lambda e: e.kind == eng.QUEUED and e.message, 60.0)
            jobs[3].cancel()
            cancelled = collect(jobs[3])[-1]
            assert not jobs[0].finished.is_set()  # it left while the first still ran
            followed = follow(jobs[:3])
    finally:
        engine.close()
    assert waiting.message == "waiting for memory: 1 conversation running"
    assert waiting.position == 3  # two recordings ahead, one running
    assert cancelled.kind == eng.CANCELLED and cancelled.message == "Cancelled while waiting."
    assert [events[-1].kind for events, _ in followed] == [eng.DONE] * 3, [e[-1].message for e, _ in followed]
    assert [finished for _, finished in followed] == [[False, False, False], [True, False, False],
                                                      [True, True, False]]  # one at a time, in submission order
    reasons = [{e.message for e in events if e.kind == eng.QUEUED} for events, _ in followed]
    assert reasons[0] == {""} and all("waiting for memory: 1 conversation running" in r for r in reasons[1:])
    for (events, _), request in zip(followed, requests):
        assert_same_answer(events[-1].answer.result, alone_on_a_fresh_engine(demo_dir, request))


def test_a_recording_that_can_never_fit_ends_with_the_message(demo_dir):
    """With room for half a conversation (``memory_for``) and nothing else running, a recording can never fit: it
    ends with the admission's one-line message, as a live conversation's refusal does, without waiting for memory."""
    engine = eng.Engine(eng.hub_model(str(demo_dir), offline=True), name="demo", max_recordings=3).start()
    try:
        wait_until(lambda: engine.status().state == eng.READY)
        with memory_for(engine.model, 0.5):
            events = collect_within(engine.submit(long_recording(0)), 60.0)
    finally:
        engine.close()
    assert events[-1].kind == eng.ERROR
    assert events[-1].message.startswith("one more conversation would not fit in memory: ")
    assert "\n" not in events[-1].message and not any(e.message for e in events if e.kind == eng.QUEUED)
    assert engine.pending() == 0
