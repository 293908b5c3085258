"""Talk live from the terminal: the microphone and the speakers through sounddevice (PortAudio), on the engine's live
streaming session.

    python -m voicechat live --demo                     # tiny random model: shows the loop, answers are noise
    python -m voicechat live --input-file question.wav --output-file answer.wav --fast

Threads. PortAudio's callbacks only copy numpy arrays (voicechat/devices.py). The engine's thread owns MLX and runs
the session. The caller's thread runs :class:`LiveCall`:
it moves the microphone's audio (resampled to 16 kHz with soxr's stream resampler) into the live handle, the
answer's frames (22.05 kHz, resampled to the speaker's rate) into the jitter buffer, draws the terminal, and stops
the call when the session falls behind real time, a device stops, or the user presses Ctrl+C.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import sys
import threading
import time
import unicodedata
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

import numpy as np

from .config import FRAME_SECONDS, INPUT_SAMPLE_RATE, MAX_LAG_SECONDS, OUTPUT_SAMPLE_RATE
from .devices import (EchoCanceller, FileMicrophone, FileSpeaker, Microphone, Speaker,
                      import_sounddevice, pick_device)
from .errors import FellBehind, VoiceChatError

TICK = 0.01  # the main loop wakes at least this often (seconds)
SAVED_FILES = ("conversation.wav", "conversation.json")  # what --save DIR writes
STATUS_EVERY = 0.2  # redraw the status line this often on a terminal (seconds); 1 s when not a terminal
HEADPHONES = ("Wear headphones: without --echo-cancel, the model hears itself through speakers (and answers "
              "itself).")
ECHO_CANCEL = "Echo cancellation is on (WebRTC AEC3): it learns the room in the first seconds the model talks."


# ---------------------------------------------------------------------------------------------------------------
# numbers and the terminal
# ---------------------------------------------------------------------------------------------------------------
class LiveStats:
    """Per-frame compute time over the last ``window`` frames (p50, p95, real-time factor) and slow frames."""

    def __init__(self, window: int = 250):
        self.recent: deque[float] = deque(maxlen=window)
        self.frames = 0
        self.late = 0  # frames that took longer than their 80 ms to compute
        self.total_seconds = 0.0

    def add(self, frame) -> None:
        seconds = float(frame.seconds["total"])  # the position's wall time (the other keys are parts of it)
        self.recent.append(seconds)
        self.frames += 1
        self.total_seconds += seconds
        self.late += seconds > FRAME_SECONDS

    def summary(self) -> dict:
        if not self.recent:
            return {"frames": 0}
        ms = 1000 * np.asarray(self.recent)
        return {"frames": self.frames, "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
                "rtf": float(ms.mean() / (1000 * FRAME_SECONDS)), "late_frames": self.late}


def status_line(stats: LiveStats, lag: float, buffered: float, underruns: int) -> str:
    s = stats.summary()
    if not s["frames"]:
        return f"listening | lag {1000 * lag:.0f} ms | buffered {1000 * buffered:.0f} ms"
    return (f"frame p50 {s['p50_ms']:.1f} ms p95 {s['p95_ms']:.1f} ms | RTF {s['rtf']:.2f} | lag {1000 * lag:.0f} ms"
            f" | buffered {1000 * buffered:.0f} ms | late frames {s['late_frames']} | underruns {underruns}")


def terminal_text(text: str) -> str:
    """``text`` with its control characters other than newline and tab escaped (``\\x1b``): a model's text can hold
    any character, and raw ones would move the cursor or recolour the terminal."""
    return "".join(c.encode("unicode_escape").decode() if unicodedata.category(c) == "Cc" and c not in "\n\t" else c
                   for c in text)


class TerminalView:
    """The conversation as it happens: a labelled line per speaker turn ("you", "assistant", "function"), one line
    per tool event, and a status line under them. On a terminal the open line and the status line are redrawn in
    place; otherwise (a pipe, a test) finished lines are printed as they end and the status once a second."""

    def __init__(self, out: TextIO = None, tty: Optional[bool] = None):
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.done: list[str] = []  # finished lines not printed yet
        self.speaker: Optional[str] = None
        self.open = ""  # the current speaker's line so far
        self.status = ""
        self._rows = 0  # rows of the open line drawn last time (the cursor is on the status row below them)
        self._last_status = 0.0

    def say(self, speaker: str, text: str) -> None:
        if not text.strip() and speaker != self.speaker:  # a space alone does not start a line
            return
        if speaker != self.speaker:
            self.end_line()
            self.speaker = speaker
            text = text.lstrip()
        self.open += terminal_text(text)

    def end_line(self) -> None:
        if self.speaker is not None and self.open.strip():
            self.done.append(f"{self.speaker}: {self.open.strip()}")
        self.speaker, self.open = None, ""

    def note(self, line: str) -> None:
        """A line of its own (tool calls, messages), after the open line."""
        self.end_line()
        self.done.append(terminal_text(line))

    def show(self, status: str, now: float, force: bool = False) -> None:
        self.status = status
        every = STATUS_EVERY if self.tty else 1.0
        if self.done or force or now - self._last_status >= every:
            self._draw(status_due=force or now - self._last_status >= every)
            if force or now - self._last_status >= every:
                self._last_status = now

    def close(self, status: str) -> None:
        self.end_line()
        self.status = status
        self._draw(status_due=True)
        if self.tty:
            self.out.write("\n")
        self.out.flush()

    def _draw(self, status_due: bool) -> None:
        if not self.tty:
            for line in self.done:
                self.out.write(line + "\n")
            if status_due:
                self.out.write(f"status: {self.status}\n")
            self.done.clear()
            self.out.flush()
            return
        width = max(20, shutil.get_terminal_size().columns)
        # back to where the open line starts, clear to the end of the screen, draw again
        self.out.write((f"\x1b[{self._rows}A" if self._rows else "") + "\r\x1b[J")
        for line in self.done:
            self.out.write(line + "\n")
        self.done.clear()
        self._rows = 0
        if self.speaker is not None:
            line = f"{self.speaker}: {self.open}"
            self.out.write(line + "\n")
            self._rows = max(1, math.ceil(len(line) / width))
        self.out.write(self.status[:width - 1])
        self.out.flush()


def tool_lines(event) -> list[str]:
    """What the terminal shows for a tool event of the function channel (issue 13's ToolEvent)."""
    if event.kind == "call":
        return [f"tool call: {c.name or '?'}({json.dumps(c.arguments, ensure_ascii=False)})" for c in event.calls]
    if event.kind == "result":
        return [f"tool result: {c.name or '?'} -> "
                f"{json.dumps(c.result, ensure_ascii=False) if c.error is None else 'error: ' + c.error}"
                for c in event.calls]
    return []


class LagGuard:
    """Stops a call that falls more than ``max_lag`` seconds behind real time, without stopping one that holds the
    user's audio on purpose: while a tool exchange runs, the session inserts the call and the response on the
    timeline and queues the user's audio (issue 13). During an exchange the bound is not applied; after it, the
    backlog the exchange left is allowed on top of ``max_lag``, and that allowance shrinks as the session catches
    up. ``max_lag`` 0 never stops."""

    def __init__(self, max_lag: float):
        self.max_lag = max_lag
        self.in_tool_exchange = False
        self.allowance = 0.0

    def tool_event(self, kind: str, lag: float) -> None:
        if kind == "call_start":
            self.in_tool_exchange = True
        elif kind == "end":
            self.in_tool_exchange = False
            self.allowance = lag

    def check(self, lag: float) -> None:
        self.allowance = min(self.allowance, lag)
        if self.max_lag <= 0 or self.in_tool_exchange or lag <= self.max_lag + self.allowance:
            return
        raise FellBehind(f"stopped: the model fell {lag:.1f} s behind real time on this machine (each 80 ms frame "
                         f"takes longer than 80 ms to compute); use a faster machine or a smaller checkpoint, or "
                         f"allow more delay with --max-lag")


# ---------------------------------------------------------------------------------------------------------------
# one call
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LiveOptions:
    model: str
    demo: bool = False  # a tiny random-weight model instead of ``model`` (answers are noise)
    system_prompt: str = ""
    seed: int = 0
    tools: tuple = ()  # voicechat.tools.Tool objects the model may call
    input_device: Optional[str] = None  # None: the system's default; a number or part of a name
    output_device: Optional[str] = None
    save: Optional[Path] = None  # folder for conversation.wav (stereo) and conversation.json
    input_file: Optional[Path] = None  # played as the microphone
    output_file: Optional[Path] = None  # what the speaker would have played (only with input_file)
    fast: bool = False  # input_file as fast as the session takes it (needs output_file)
    tail: float = 4.0  # seconds of silence after input_file
    seconds: Optional[float] = None  # stop after this many seconds of input
    max_lag: float = MAX_LAG_SECONDS  # 0: never stop for lag
    echo_cancel: bool = False  # WebRTC's echo canceller between the speaker and the microphone (pip install livekit)
    offline: bool = False
    tokenizer: Optional[str] = None
    voice: Any = None  # a voicechat.voices.Voice (None: the checkpoint's)


def open_ends(o: LiveOptions):
    """(source, sink, echo canceller or None): the microphone or the input file, the speaker or the virtual one.
    Runs before the model loads, so a missing PortAudio, device, file or package fails at once."""
    from .audio import read_audio

    sd = import_sounddevice() if o.input_file is None or o.output_file is None else None
    if o.input_file is not None:
        samples, rate = read_audio(o.input_file)
        source = FileMicrophone(samples, rate, o.tail, o.fast)
    else:
        source = Microphone(sd, *pick_device(sd, o.input_device, "input"))
    sink = FileSpeaker(OUTPUT_SAMPLE_RATE, o.fast) if o.output_file is not None else \
        Speaker(sd, *pick_device(sd, o.output_device, "output"), keep_played=o.echo_cancel)
    # the delay from playing a sample to hearing it back: both devices' buffers and one main-loop tick
    echo = EchoCanceller(round(1000 * (source.stream.latency + sink.stream.latency + TICK))) if o.echo_cancel \
        else None
    return source, sink, echo


class Resampler:
    """Chunks at ``rate`` -> chunks at ``target`` through one soxr stream resampler (chunk edges leave no trace);
    ``flush()`` gives what its filter still holds, once the input has ended."""

    def __init__(self, rate: int, target: int):
        import soxr

        self.stream = None if rate == target else soxr.ResampleStream(rate, target, 1, dtype="float32")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return x if self.stream is None or not x.size else self.stream.resample_chunk(x)

    def flush(self) -> np.ndarray:
        return np.zeros(0, np.float32) if self.stream is None else self.stream.resample_chunk(
            np.zeros(0, np.float32), last=True)


def model_loader(o: LiveOptions):
    from .engine import demo_model, hub_model

    return demo_model() if o.demo else hub_model(o.model, offline=o.offline)


def wait_for_engine(engine, say: Callable[[str], None]) -> None:
    """Block until the engine has loaded its model; show what it is doing (download progress, loading)."""
    from .engine import FAILED, READY

    shown = ""
    while True:
        status = engine.status()
        if status.state == READY:
            say(f"{status.message} (loaded in {status.load_seconds:.1f} s)")
            return
        if status.state == FAILED:
            raise VoiceChatError(status.message)
        if status.message != shown and (status.fraction is None or not shown.startswith("Downloading")):
            say(status.message)
            shown = status.message
        time.sleep(0.1)


class ctrl_c_stops:
    """While active, the first Ctrl+C calls ``on_stop`` (a clean stop); a second one interrupts as usual."""

    def __init__(self, on_stop: Callable[[], None]):
        self.on_stop = on_stop
        self.previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        signal.signal(signal.SIGINT, self.previous)
        self.on_stop()

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


class LiveCall:
    """One conversation on the engine's live handle: moves audio both ways, draws the terminal, enforces the lag
    bound, stops cleanly, and returns the Result."""

    def __init__(self, live, source, sink, view: TerminalView, o: LiveOptions, echo: Optional[EchoCanceller] = None):
        self.live, self.source, self.sink, self.view, self.o, self.echo = live, source, sink, view, o, echo
        self.to_model = Resampler(source.rate, INPUT_SAMPLE_RATE)
        self.to_speaker = Resampler(OUTPUT_SAMPLE_RATE, sink.rate)
        self.played_to_model = Resampler(sink.rate, INPUT_SAMPLE_RATE)
        self.stats = LiveStats()
        self.started = self.wall_seconds = 0.0  # when the devices started; how long the call ran
        self.guard = LagGuard(0.0 if o.fast else o.max_lag)
        self.heard: list[np.ndarray] = []  # what the session was sent, at 16 kHz
        self.sent_seconds = 0.0
        self.stop_requested = threading.Event()  # Ctrl+C
        self.stop_reason = ""
        self.error: Optional[VoiceChatError] = None
        self.ending = False  # input is over (flushed or closed): only the session's last frames remain
        self.closed = False

    @property
    def lag(self) -> float:
        """Seconds of input sent and not yet turned into frames."""
        return self.live.backlog_seconds

    # ---- the loop ---------------------------------------------------------------------------------------------
    def run(self):
        self.wait_until_ready()
        self.started = time.monotonic()
        self.source.start()
        self.sink.start()
        with ctrl_c_stops(self.stop_requested.set):
            while not self.closed:
                self.handle(self.live.next_event(TICK))
                if not self.ending:
                    self.pump_input()
                    self.check()
                self.sink.tick()
                self.view.show(self.status(), time.monotonic())
        self.finish_output()
        self.wall_seconds = time.monotonic() - self.started
        return self.live.result()

    def wait_until_ready(self) -> None:
        while True:
            event = self.live.next_event(None)
            if event.kind == "ready":
                self.view.note(f"ready (system prompt: {event.prompt_frames} positions, set up in "
                               f"{event.setup_seconds:.1f} s). Talk now; Ctrl+C stops.")
                return
            if event.kind == "error":
                raise VoiceChatError(event.message)
            if event.kind == "closed":
                raise VoiceChatError("the live session closed before it started")

    def handle(self, event) -> None:
        while event is not None:
            if event.kind == "frames":
                for frame in event.frames:
                    self.show_frame(frame)
            elif event.kind == "error":  # the session ended on it; "closed" follows
                self.error = self.error or VoiceChatError(event.message)
                self.stop_reason = self.stop_reason or "stopped on an error"
                self.ending = True
            elif event.kind == "closed":
                self.closed = True
                return
            event = self.live.next_event(0)

    def show_frame(self, frame) -> None:
        self.stats.add(frame)
        self.view.say("you", frame.transcript)
        self.view.say("assistant", frame.text)
        if not self.o.tools:  # with tools, the calls show as tool lines
            self.view.say("function", frame.function_text)
        if frame.turn == "end" and self.view.speaker == "assistant":
            self.view.end_line()
        for event in frame.events:
            self.guard.tool_event(event.kind, self.lag)
            for line in tool_lines(event):
                self.view.note(line)
        self.sink.buffer.write(self.to_speaker(frame.audio))

    def pump_input(self) -> None:
        if self.echo is not None:  # what the speaker played first: the echo canceller needs it before the echo
            self.echo.played(self.played_to_model(self.sink.played.read()))
        x = self.to_model(self.source.pull(self.lag))
        if self.echo is not None:
            x = self.echo.clean(x)
        self.send(x)

    def send(self, x: np.ndarray) -> None:
        if x.size == 0:
            return
        self.live.send(x, INPUT_SAMPLE_RATE)
        self.heard.append(x)
        self.sent_seconds += x.size / INPUT_SAMPLE_RATE

    def check(self) -> None:
        """Whatever ends the input: a stop, an error, the end of the file, the time limit."""
        try:
            self.source.check()
            self.sink.check()
            self.guard.check(self.lag)
        except VoiceChatError as e:
            self.error = e
            self.stop_now(f"stopped on an error ({type(e).__name__})")
            return
        if self.stop_requested.is_set():
            self.stop_now("stopped (Ctrl+C)")
        elif self.o.seconds is not None and self.sent_seconds >= self.o.seconds:
            self.stop_now(f"stopped after {self.o.seconds:g} s")
        elif self.source.finished:
            self.stop_reason = "end of the input file"
            self.ending = True
            self.send(self.to_model.flush())  # the whole file reaches the session, as if fed at once
            self.live.flush()  # the session answers what is left, then closes

    def stop_now(self, reason: str) -> None:
        self.stop_reason = reason
        self.ending = True
        self.source.close()
        self.live.close()

    def finish_output(self) -> None:
        """After the session closed: play out what is queued (a natural end) or cut it (a stop)."""
        self.source.close()
        if self.stop_reason == "end of the input file" and self.error is None:
            self.sink.buffer.drain()
            deadline = time.monotonic() + self.sink.buffer.buffered_seconds + 1.0
            while self.sink.buffer.ring.available and time.monotonic() < deadline:
                self.sink.tick()
                time.sleep(TICK)
        self.sink.close()

    def status(self) -> str:
        return status_line(self.stats, self.lag, self.sink.buffer.buffered_seconds, self.sink.buffer.underruns)

    def summary(self) -> dict:
        return {**self.stats.summary(), "stop": self.stop_reason, "wall_seconds": round(self.wall_seconds, 3),
                "lag_s": round(self.lag, 3),
                "underruns": self.sink.buffer.underruns, "dropped_output_seconds": round(
                    (self.sink.buffer.dropped + self.sink.buffer.ring.dropped) / self.sink.rate, 3),
                "input_seconds": round(self.sent_seconds, 3),
                "echo_cancel_ms_per_frame": None if self.echo is None else round(self.echo.ms_per_model_frame, 3),
                "input_device": self.source.name, "output_device": self.sink.name}

    def user_audio(self) -> np.ndarray:
        return np.concatenate(self.heard) if self.heard else np.zeros(0, np.float32)


# ---------------------------------------------------------------------------------------------------------------
# saving and the whole command
# ---------------------------------------------------------------------------------------------------------------
def save_conversation(directory: Path, model, result, call: "LiveCall", o: LiveOptions) -> tuple[Path, Path]:
    """conversation.wav (stereo, :func:`voicechat.answer.stereo_timeline`) and conversation.json: the app's and the
    CLI's record (voicechat.result.conversation_json, source "live") plus ``live``, the call's numbers."""
    from .audio import write_wav
    from .config import GenerationConfig
    from .answer import make_answer, stereo_timeline
    from .files import write_atomically
    from .result import conversation_json

    directory.mkdir(parents=True, exist_ok=True)
    wav, js = (directory / name for name in SAVED_FILES)
    write_wav(wav, stereo_timeline(call.user_audio(), INPUT_SAMPLE_RATE, result), result.sample_rate)
    summary = call.summary()
    record = conversation_json(
        make_answer(model, result, summary["wall_seconds"]), source="live", model=o.model, demo_model=o.demo,
        input_file=o.input_file.name if o.input_file else f"microphone: {call.source.name}",
        input_sample_rate=call.source.rate, input_seconds=call.sent_seconds, system_prompt=o.system_prompt,
        seed=o.seed, generation_config=GenerationConfig(), answer_file=wav.name)
    write_atomically(js, (json.dumps({**record, "live": summary}, indent=1, default=str) + "\n").encode("utf-8"))
    return wav, js


def run_live(o: LiveOptions, view: Optional[TerminalView] = None, messages: TextIO = None) -> dict:
    """The whole ``live`` command: open the audio ends, load the model, talk, save. Returns the call's numbers;
    raises VoiceChatError (after saving what there is) when the call ended on an error."""
    from .audio import write_wav
    from .engine import Engine

    messages = messages or sys.stderr
    view = view or TerminalView()

    def say(line: str) -> None:
        print(line, file=messages, flush=True)

    source, sink, echo = open_ends(o)
    if o.input_file is None:
        say(ECHO_CANCEL if echo is not None else HEADPHONES)
    engine = Engine(model_loader(o), name="the demo model" if o.demo else o.model).start()
    try:
        wait_for_engine(engine, say)
        live = engine.open_live(live_request(o))
        call = LiveCall(live, source, sink, view, o, echo)
        try:
            result = call.run()
        finally:
            live.close()
        view.close(call.status())
    finally:
        source.close()
        sink.close()
        engine.close()
    summary = call.summary()
    if o.output_file is not None:
        write_wav(o.output_file, sink.audio(), sink.rate)
        say(f"wrote {o.output_file} ({sink.audio().size / sink.rate:.2f} s at {sink.rate} Hz)")
    if o.save is not None:
        wav, js = save_conversation(o.save, engine.model, result, call, o)
        say(f"saved {wav} and {js}")
    say(f"{call.stop_reason}: {summary.get('frames', 0)} frames")
    if call.error is not None:
        raise call.error
    return summary


def live_request(o: LiveOptions):
    from .engine import LiveRequest

    return LiveRequest(system_prompt=o.system_prompt, seed=o.seed, tools=o.tools, speaker=o.voice)
