"""The Talk live tab: full duplex from the browser's microphone, the answer heard as it is spoken.

The page (voicechat/webui/static/live.js) speaks the OpenAI Realtime protocol to the app's own ``/v1/realtime``
(voicechat/realtime/, mounted here beside the Gradio page): the microphone goes out as 24 kHz PCM16 from an
AudioWorklet, the answer comes back and plays through an AudioWorklet jitter buffer (voicechat/webui/static/jitter.js).
This module serves those files and what the page asks the server:

    GET  /live/status              the model, this machine's measured speed (keeps up with real time or not), busy, the
                                   voices of the library
    POST /live/measure             measure the speed again
    POST /live/tool                run one of the built-in tools the page offers the model (the page is the Realtime
                                   client, and Realtime tools are run by the client)
    POST /live/save/{session_id}   write the conversation: a stereo WAV (user left, assistant right, on the 80 ms
                                   timeline) and conversation.json (voicechat.result.conversation_json)
    POST /live/voice/add           a voice from a recording (form: name, file), into the app's library
    POST /live/voice/hear          the voice ``name`` saying the fixed sentence -> the WAV's URL
    GET  /live/voice/heard/{name}  that WAV
    GET  /live/files/{session_id}/{name}   the saved files

One live conversation at a time (one model): the Realtime server turns a second one away; the status says since when
the model is busy, and the page starts as soon as it frees. No MLX here: the engine runs the sessions.
"""

from __future__ import annotations

import asyncio
import collections
import html
import json
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
from fastapi import APIRouter, Body, File, Form, HTTPException, Request, UploadFile
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles

from voicechat import engine as eng
from voicechat.audio import duration_words, to_float32, write_wav
from voicechat.config import FRAME_SECONDS, INPUT_SAMPLE_RATE, MAX_LAG_SECONDS, GenerationConfig
from voicechat.answer import make_answer, stereo_timeline
from voicechat.errors import VoiceChatError
from voicechat.realtime import RATE as WIRE_RATE, RealtimeServer
from voicechat.result import conversation_json
from voicechat.tools import BUILTIN_TOOLS
from voicechat.tools.calls import TIMEOUT_RESULT
from voicechat.tools.runner import ToolRunner
from voicechat.voices import PREVIEW_SENTENCE

from . import stream
from .uploads import upload_name
from .voices import VoiceActions

STATIC = Path(__file__).resolve().parent / "static"
STATIC_URL = "/webui"  # the page's JS modules and worklets
API = "/live"
FRAME_MS = 1000 * FRAME_SECONDS  # one timeline position; the page reads it from /live/status
KEEPS_UP_MS = 0.8 * FRAME_MS  # median compute per frame below this: keeps up with room for the page and the network
SPEED_FRAMES = 12  # silent frames the speed check measures (after its warm-up frames) ...
SPEED_WARMUP = 2  # ... the first ones, which may compile or fill caches
SPEED_BUDGET_S = 20.0  # ... or fewer once this much compute has been spent (a slow machine; at least 4 frames)
SPEED_ROUNDS = 3  # a round that does not keep up is measured again (the best round counts), up to this many, ...
SPEED_RETRY_BELOW_MS = 4 * FRAME_MS  # ... unless it is this slow (no load elsewhere makes a machine 4x slower)
SPEED_RETRY_PAUSE_S = 1.0  # ... a pause between rounds (the page that asked is often still loading)
KEEP_CONVERSATIONS = 3  # finished conversations kept in memory until saved
SAVE_WAIT_S = 60.0  # how long a save waits for the engine to let go of the conversation


# ---------------------------------------------------------------------------------------------------------------
# is this machine fast enough?
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Speed:
    """The per-frame compute of the loaded model, measured on a short live session of silence."""

    state: str  # "unmeasured", "measuring", "measured", "failed"
    frames_ms: tuple = ()  # compute of each measured frame (Frame.seconds["total"])
    message: str = ""  # "failed": why

    @property
    def median_ms(self) -> Optional[float]:
        """The verdict's number: a few frames on a machine that also runs other things, so the median (a moment of
        load elsewhere does not make a fast machine look slow; a slow machine is slow at every frame)."""
        return float(np.median(self.frames_ms)) if self.frames_ms else None

    @property
    def verdict(self) -> str:
        """"keeps up", "tight" (under 80 ms, but with little room) or "too slow"; "" before a result."""
        if self.state != "measured":
            return ""
        return "keeps up" if self.median_ms <= KEEPS_UP_MS else "tight" if self.median_ms <= FRAME_MS else "too slow"

    def json(self) -> dict:
        ms = np.asarray(self.frames_ms, float)
        numbers = ({"frames": int(ms.size), "p50_ms": round(self.median_ms, 1), "mean_ms": round(float(ms.mean()), 1),
                    "p95_ms": round(float(np.percentile(ms, 95)), 1),
                    "realtime_factor": round(self.median_ms / FRAME_MS, 3)} if ms.size else {})
        return {"state": self.state, "verdict": self.verdict, "frame_ms": FRAME_MS, **numbers, "text": self.text()}

    def text(self) -> str:
        """One line for the page, before Start."""
        if self.state in ("unmeasured", "measuring"):
            return "Measuring this machine's speed (a few silent frames)…"
        if self.state == "failed":
            return f"The speed could not be measured: {self.message}"
        ms = np.asarray(self.frames_ms, float)
        numbers = (f"{self.median_ms:.0f} ms of computing per {FRAME_MS:.0f} ms frame (median of {ms.size} frames; "
                   f"mean {ms.mean():.0f} ms, p95 {np.percentile(ms, 95):.0f} ms)")
        if self.verdict == "keeps up":
            return f"This machine keeps up with real time: {numbers}."
        if self.verdict == "tight":
            return (f"This machine just keeps up with real time: {numbers}. It may fall behind when something else "
                    "runs; close other programs.")
        return (f"This machine does not keep up with real time: {numbers}, {self.median_ms / FRAME_MS:.1f}x slower. "
                f"Live talk needs under {FRAME_MS:.0f} ms per frame: the 11B model needs Apple Silicon. Use Record and "
                "run here.")


class SpeedCheck:
    """Measures the engine's per-frame time once the model is loaded (on the first status request, so that an app
    nobody opens the tab of never runs it): a live session fed silence, the warm-up frames left out."""

    def __init__(self, engine: eng.Engine):
        self.engine = engine
        self.speed = Speed("unmeasured")
        self.lock = threading.Lock()

    def start(self) -> None:
        """Measure in the background unless a measurement runs (or the model is not there)."""
        with self.lock:
            if self.speed.state == "measuring" or self.engine.status().state != eng.READY:
                return
            before, self.speed = self.speed, Speed("measuring")
        threading.Thread(target=self.measure, args=(before,), name="voicechat-speed-check", daemon=True).start()

    def measure(self, before: Speed) -> None:
        """Rounds of :meth:`measure_round` until one keeps up (or is hopelessly slow, or fails, or the rounds are
        spent): the first round often shares the CPU with the page that asked for it, still loading (on a 2-core
        machine with one core busy elsewhere the first round measured 122 ms per frame, the next ones 29 and 42 ms);
        the fastest counts."""
        best = None
        for attempt in range(SPEED_ROUNDS):
            if attempt:
                time.sleep(SPEED_RETRY_PAUSE_S)
            speed = self.measure_round()
            if speed is None:  # the model is taken: keep what was known, try again later
                self.speed = best or before
                return
            if best is None or speed.state != "measured" or speed.median_ms < best.median_ms:
                best = speed
            if speed.state != "measured" or speed.verdict == "keeps up" or speed.median_ms >= SPEED_RETRY_BELOW_MS:
                break
        self.speed = best

    def measure_round(self) -> Optional[Speed]:
        """One live session of silence: the compute of each frame after the warm-up; None if the model is taken."""
        try:
            live = self.engine.open_live(eng.LiveRequest(), owner="speed check")
        except (eng.EngineBusy, eng.EngineFull):
            return None
        frames = SPEED_WARMUP + SPEED_FRAMES
        for _ in range(frames + 1):  # one frame per message: the engine reports (and can stop) after each; one more
            # for the mel's look-ahead
            live.send(np.zeros(round(FRAME_SECONDS * INPUT_SAMPLE_RATE), np.float32), INPUT_SAMPLE_RATE)
        seconds, error = [], ""
        for event in live:
            if event.kind == eng.FRAMES:
                seconds += [f.seconds["total"] for f in event.frames]
                measured = seconds[SPEED_WARMUP:]
                if len(seconds) >= frames or (len(measured) >= 4 and sum(measured) >= SPEED_BUDGET_S):
                    live.close()
            elif event.kind == eng.ERROR:
                error = event.message
        measured = tuple(round(1000 * s, 2) for s in seconds[SPEED_WARMUP:frames])
        return Speed("measured", measured) if measured and not error else \
            Speed("failed", message=error or "the engine computed no frame")


# ---------------------------------------------------------------------------------------------------------------
# the conversations the Realtime server runs, kept until saved
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class RecordedConversation:
    session_id: str
    started: float = field(default_factory=time.monotonic)
    created: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))
    heard: list = field(default_factory=list)  # the int16 chunks that went to the model, at ...
    rate: int = WIRE_RATE  # ... the session's input rate (24 kHz PCM16, or 8 kHz G.711)
    live: Any = None  # the engine's LiveJob, once closed
    wall_seconds: float = 0.0
    closed: threading.Event = field(default_factory=threading.Event)
    files: Optional[tuple[Path, Path]] = None


class Recorder:
    """The Realtime server's observer (RealtimeServer(observer=...)): keeps each conversation's input audio and, once
    the engine has let go of it, its LiveJob (``result()``); writes them on request."""

    def __init__(self):
        self.conversations: collections.OrderedDict[str, RecordedConversation] = collections.OrderedDict()
        self.lock = threading.Lock()

    def opened(self, session_id: str) -> None:
        with self.lock:
            self.conversations[session_id] = RecordedConversation(session_id)  # a restarted session starts again
            self.conversations.move_to_end(session_id)
            while len(self.conversations) > KEEP_CONVERSATIONS:
                self.conversations.popitem(last=False)

    def heard(self, session_id: str, samples: np.ndarray, rate: int) -> None:
        conversation = self.get(session_id)
        if conversation is not None:
            conversation.heard.append(samples)
            conversation.rate = rate  # fixed once audio has started (docs/realtime.md "Phone audio")

    def closed(self, session_id: str, live) -> None:
        conversation = self.get(session_id)
        if conversation is not None:
            conversation.live, conversation.wall_seconds = live, time.monotonic() - conversation.started
            conversation.closed.set()

    def open_since(self) -> Optional[float]:
        """Seconds the running conversation has held the model (None when none runs)."""
        with self.lock:
            running = [c for c in self.conversations.values() if not c.closed.is_set()]
        return time.monotonic() - running[-1].started if running else None

    def get(self, session_id: str) -> Optional[RecordedConversation]:
        with self.lock:
            return self.conversations.get(session_id)


class SaveError(Exception):
    """A conversation that cannot be saved (unknown, never started, or still held by the engine)."""


# ---------------------------------------------------------------------------------------------------------------
# the tab
# ---------------------------------------------------------------------------------------------------------------
class TalkLive:
    """The Talk live tab: ``build()`` inside a ``gr.Tab``; ``routes()`` go into the app's FastAPI app (beside the
    Gradio page, e.g. ``demo.launch(app_kwargs={"routes": tab.routes()})``)."""

    model_outputs: tuple = ()  # the page polls /live/status itself: nothing for app.Page to push

    def __init__(self, engine: eng.Engine, outputs: Path, demo_mode: bool = False, system_prompt: str = "",
                 api_key: Optional[str] = None):
        """``api_key``: what /v1/realtime and /live/tool require (as ``serve --api-key``); the tab asks for it."""
        self.engine, self.outputs, self.demo_mode, self.system_prompt = engine, Path(outputs), demo_mode, system_prompt
        self.recorder = Recorder()
        self.voices = VoiceActions(engine, self.outputs)  # the library Record and run's Voices panel changes too
        self.realtime = RealtimeServer(engine, api_key=api_key, model_name=engine.name, observer=self.recorder,
                                       voices=self.voices.library().folder)
        self.speed = SpeedCheck(engine)
        self.lag_limit_s = MAX_LAG_SECONDS  # the page's lag guard reads it (static/lag.js)
        self.tools = {tool.name: tool for tool in BUILTIN_TOOLS}
        self.writing = threading.Lock()  # one save at a time (a second one of the same conversation finds its files)

    # ---- the page ------------------------------------------------------------------------------------------------
    def build(self) -> None:
        import gradio as gr

        gr.HTML(panel_html(self.system_prompt), js_on_load=MOUNT_JS, elem_id="live-panel", css_template=CSS)

    def on_model(self, status: eng.EngineStatus) -> tuple:
        return ()

    # ---- the server ----------------------------------------------------------------------------------------------
    def routes(self) -> list:
        router = APIRouter()
        router.include_router(self.realtime.router())
        router.add_api_route(f"{API}/status", self.status, methods=["GET"])
        router.add_api_route(f"{API}/measure", self.measure, methods=["POST"])
        router.add_api_route(f"{API}/tool", self.run_tool, methods=["POST"])
        router.add_api_route(f"{API}/save/{{session_id}}", self.save, methods=["POST"])
        router.add_api_route(f"{API}/files/{{session_id}}/{{name}}", self.file, methods=["GET"])
        router.add_api_route(f"{API}/voice/add", self.add_voice, methods=["POST"])
        router.add_api_route(f"{API}/voice/hear", self.hear_voice, methods=["POST"])
        router.add_api_route(f"{API}/voice/heard/{{name}}", self.heard_voice, methods=["GET"])
        router.mount(STATIC_URL, StaticFiles(directory=STATIC), name="webui")
        return [*router.routes, *stream.ANSWERS.routes()]  # and the record-and-run answers' streams

    def status(self, request: Request) -> dict:
        model = self.engine.status()
        if model.state == eng.READY and self.speed.speed.state == "unmeasured" and not self.realtime.active:
            self.speed.start()
        since = self.recorder.open_since()
        busy = len(self.realtime.active) >= self.engine.max_sessions  # every conversation slot is taken
        return {"model": {"state": model.state, "message": model.message}, "demo": self.demo_mode,
                "speed": self.speed.speed.json(), "lag_limit_ms": round(1000 * self.lag_limit_s), "frame_ms": FRAME_MS,
                "busy": {"busy": busy, "seconds": since, "text": busy_text(since) if busy else ""},
                "key_required": not self.realtime.authorized(request),  # the tab asks for it (docs/limits.md §3)
                "tools": [{"type": "function", **tool.declaration()} for tool in self.tools.values()],
                "voices": [{"name": v.name, "label": v.describe()} for v in self.voices.library().voices()]}

    def measure(self, request: Request) -> dict:
        self.speed.start()
        return self.status(request)

    async def run_tool(self, request: Request, name: str = Body(), arguments: str = Body()) -> dict:
        """One call of a built-in tool, as the model wrote it (``arguments``: its JSON text) -> ``{"output": the JSON
        text the page hands back (function_call_output)}``: the tool's result, or NVIDIA's error objects. With an
        API key, only for ``Authorization: Bearer KEY``."""
        self.check_key(request)
        return {"output": await asyncio.to_thread(self.tool_output, name, arguments)}

    def tool_output(self, name: str, arguments: str) -> str:
        tool = self.tools.get(name)
        try:
            args = json.loads(arguments)
        except json.JSONDecodeError:
            args = None
        if tool is None or not isinstance(args, dict):
            error = f"no tool named {name!r} here" if tool is None else "the arguments are not a JSON object"
            return json.dumps({"error": error})
        runner = ToolRunner()  # the session's own rules: its thread, its timeout, its error lines
        runner.start("call", tool.fn, args, tool.timeout)
        runner.wait(["call"])
        outcome = runner.poll("call")
        value = TIMEOUT_RESULT if outcome.timed_out else {"error": outcome.error} if outcome.error else outcome.result
        return json.dumps(value, ensure_ascii=False)

    async def save(self, session_id: str) -> dict:
        try:
            wav, js, seconds = await asyncio.to_thread(self.write, session_id)
        except SaveError as e:
            raise HTTPException(status_code=404, detail=str(e))
        files = f"{API}/files/{session_id}"
        return {"wav": f"{files}/{wav.name}", "json": f"{files}/{js.name}", "seconds": round(seconds, 2),
                "folder": wav.parent.relative_to(self.outputs).as_posix()}  # no server path beyond the outputs

    def write(self, session_id: str) -> tuple[Path, Path, float]:
        """conversation.wav and conversation.json of a finished conversation (once; later calls give the same)."""
        conversation = self.recorder.get(session_id)
        if conversation is None:
            raise SaveError("no such conversation here (only the last few are kept until saved)")
        if not conversation.closed.wait(SAVE_WAIT_S):
            raise SaveError("the conversation is still running: press Stop first")
        with self.writing:
            if conversation.files is None:
                conversation.files = self.write_files(conversation)
        wav, js = conversation.files
        return wav, js, conversation.wall_seconds

    def write_files(self, conversation: RecordedConversation) -> tuple[Path, Path]:
        result = conversation.live.result()
        if result is None or not len(result.text_tokens):
            raise SaveError("the conversation had not started: nothing to save")
        folder = self.outputs / "live" / f"{conversation.created}-{conversation.session_id[-6:]}"
        folder.mkdir(parents=True, exist_ok=True)
        user = np.concatenate(conversation.heard) if conversation.heard else np.zeros(0, np.int16)
        wav = write_wav(folder / "conversation.wav", stereo_timeline(to_float32(user), conversation.rate, result),
                        result.sample_rate)
        # the words at their frames need the tokenizer: the engine's model, read here only for it (no MLX)
        answer = make_answer(self.engine.model, result, conversation.wall_seconds)
        record = conversation_json(
            answer, source="live", model=self.engine.name, demo_model=self.demo_mode, input_file="microphone",
            input_sample_rate=conversation.rate, input_seconds=len(user) / conversation.rate,
            system_prompt=result.settings.get("system_prompt", ""), seed=result.settings.get("seed", 0),
            generation_config=GenerationConfig(), answer_file=wav.name)
        js = folder / "conversation.json"
        js.write_text(json_text(record))
        return wav, js

    def check_key(self, request: Request) -> None:
        """With an API key, only for ``Authorization: Bearer KEY`` (the routes that run tools, write voices or
        queue work)."""
        if not self.realtime.authorized(request):
            raise HTTPException(403, "this app needs its API key: send Authorization: Bearer KEY")

    async def add_voice(self, request: Request, name: str = Form(""), file: UploadFile = File()) -> dict:
        """A voice from an uploaded recording (a file, or what the page recorded from the microphone); a bad one is
        refused with one line (HTTP 400)."""
        self.check_key(request)
        data = await file.read()
        try:
            with tempfile.TemporaryDirectory(dir=self.outputs) as folder:
                # the upload as a file of its own name's kind (the decoders look at its suffix too)
                recording = Path(folder) / upload_name(file.filename or "recording")
                await asyncio.to_thread(recording.write_bytes, data)
                voice = await self.voices.add(name, recording, recording.name)
        except VoiceChatError as e:
            raise HTTPException(status_code=400, detail=str(e))
        return {"added": voice.describe(), "name": voice.name}

    async def hear_voice(self, request: Request, name: str = Body(embed=True)) -> dict:
        self.check_key(request)
        try:
            voice, wav = await asyncio.to_thread(self.voices.hear, name)
        except VoiceChatError as e:
            raise HTTPException(status_code=400, detail=str(e))
        return {"wav": f"{API}/voice/heard/{wav.name}", "text": f"{voice.name}: \u201c{PREVIEW_SENTENCE}\u201d"}

    def heard_voice(self, name: str) -> FileResponse:
        wav = self.voices.previews / name
        if Path(name).name != name or not wav.is_file():
            raise HTTPException(status_code=404, detail="no such preview")
        return FileResponse(wav, media_type="audio/wav")

    def file(self, session_id: str, name: str) -> FileResponse:
        conversation = self.recorder.get(session_id)
        files = {p.name: p for p in (conversation.files or ())} if conversation is not None else {}
        if name not in files:
            raise HTTPException(status_code=404, detail="no such file: save the conversation first")
        return FileResponse(files[name], filename=name)


# the app's Blocks -> its Talk live tab (app.build_app registers it, app.launch serves its routes)
TABS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def serve_with(demo, tab: TalkLive) -> None:
    """Serve ``tab``'s routes with the Gradio app ``demo`` (see :func:`app_kwargs`)."""
    TABS[demo] = tab


def app_kwargs(demo) -> dict:
    """``demo.launch(app_kwargs=...)``: the FastAPI app Gradio builds starts with the Talk live tab's routes (the
    Realtime WebSocket, the page's scripts and its API), so they come before Gradio's own."""
    return {"routes": TABS[demo].routes()} if demo in TABS else {}


def busy_text(seconds: Optional[float]) -> str:
    held = f" (for {duration_words(seconds)} so far)" if seconds is not None else ""
    return (f"Someone else is talking to the model live{held}: one conversation at a time. Start works as soon as it "
            "ends; this page checks every 2 seconds.")


def json_text(record: dict) -> str:
    return json.dumps(record, indent=1, ensure_ascii=False) + "\n"


# gr.HTML(js_on_load=...): `element` is the component; the page's code is an ES module served beside the app
MOUNT_JS = f"import('{STATIC_URL}/live.js').then((m) => m.mountLive(element));"


def panel_html(system_prompt: str) -> str:
    """The tab's elements; live.js gives them life. The ids are stable, for tests and users' scripts. The API key
    field shows when the status says the app needs one (app.py --api-key)."""
    return f"""
<div class="vc-live" data-state="idle">
  <div class="vc-status vc-wait" id="live-status" data-kind="wait"><div class="vc-title"><span class="vc-dot"></span>
    <span class="vc-live-title">Checking the model…</span></div><div class="vc-detail vc-live-detail"></div></div>
  <div class="vc-live-row"><span id="live-speed" class="vc-live-speed"></span>
    <button id="live-measure" class="vc-live-link" disabled>Measure again</button></div>
  <div class="vc-live-row">
    <button id="live-start" class="vc-live-button primary" disabled>Start</button>
    <button id="live-stop" class="vc-live-button stop" disabled>Stop</button>
    <div class="vc-live-meter" title="microphone level"><div id="live-meter"></div></div>
  </div>
  <label class="vc-live-check"><input type="checkbox" id="live-tools"> Let the model use tools: the time, a calculator
    and unit conversion (they run on this computer; its calls and their results show below). The model reads their
    descriptions before the conversation: it starts later.</label>
  <p class="vc-live-hint">Use headphones: through speakers the model hears itself. Speak after Start; the answer plays
  as it is spoken. The model listens all the time, so you can talk over it.</p>
  <div id="live-key-row" class="vc-live-key" hidden><label class="vc-live-label" for="live-key">API key (the app
    was started with --api-key)</label> <input type="password" id="live-key" autocomplete="off"></div>
  <label class="vc-live-label" for="live-voice">Voice (the checkpoint's, or one added here or under Record and
    run)</label>
  <div class="vc-live-row"><select id="live-voice" class="vc-live-select"></select>
    <button id="live-voice-hear" class="vc-live-link">Hear it</button></div>
  <details class="vc-live-voices"><summary>Add a voice from a recording (3 s or more of one person speaking)</summary>
    <div class="vc-live-row">
      <input type="file" id="live-voice-file" accept="audio/*,.m4a,.flac,.ogg,.opus,.webm">
      <button id="live-voice-record" class="vc-live-button">Record 5 s</button>
      <input type="text" id="live-voice-name" class="vc-live-name" placeholder="Name, e.g. Maya" maxlength="32">
      <button id="live-voice-add" class="vc-live-button">Add</button>
    </div>
  </details>
  <div id="live-voice-line" class="vc-live-hint"></div>
  <audio id="live-voice-audio" controls hidden></audio>
  <label class="vc-live-label" for="live-prompt">System prompt (read before the conversation starts)</label>
  <textarea id="live-prompt" rows="2">{html.escape(system_prompt)}</textarea>
  <div class="vc-live-columns">
    <div><div class="vc-live-label">Your words (what the model heard)</div><div id="live-transcript"
      class="vc-live-text"></div></div>
    <div><div class="vc-live-label">Assistant</div><div id="live-assistant" class="vc-live-text"></div></div>
  </div>
  <div class="vc-live-label">Function channel and tool calls</div>
  <div id="live-function" class="vc-live-text vc-live-function"></div>
  <div class="vc-live-label">Stats</div>
  <div id="live-stats" class="vc-live-stats">No conversation yet.</div>
  <div class="vc-live-row">
    <button id="live-save" class="vc-live-button" disabled>Save the conversation</button>
    <div id="live-saved"></div>
  </div>
</div>"""


CSS = """
.vc-live {display: flex; flex-direction: column; gap: 10px;}
.vc-live .vc-status {border-radius: 10px; padding: 10px 14px; border: 1px solid var(--border-color-primary);
  background: var(--block-background-fill);}
.vc-live .vc-title {font-weight: 600; font-size: 1.05em;}
.vc-live .vc-detail {opacity: .8; font-size: .9em; margin-top: 2px;}
.vc-live .vc-dot {display: inline-block; width: 10px; height: 10px; border-radius: 50%; margin-right: 8px;
  background: #a3a3a3; vertical-align: 1px;}
.vc-live .vc-wait .vc-dot {background: #eab308;}
.vc-live .vc-run .vc-dot {background: var(--color-accent); animation: vc-pulse 1s ease-in-out infinite alternate;}
.vc-live .vc-done .vc-dot {background: #16a34a;}
.vc-live .vc-error .vc-dot {background: #dc2626;}
.vc-live .vc-error {border-color: #dc2626; background: rgba(220, 38, 38, .08);}
@keyframes vc-pulse {from {opacity: 1;} to {opacity: .3;}}
.vc-live-row {display: flex; gap: 10px; align-items: center; flex-wrap: wrap;}
.vc-live-button {padding: 8px 22px; border-radius: 8px; border: 1px solid var(--border-color-primary);
  background: var(--button-secondary-background-fill); color: var(--button-secondary-text-color);
  font-weight: 600; cursor: pointer;}
.vc-live-button.primary {background: var(--button-primary-background-fill); color: var(--button-primary-text-color);}
.vc-live-button.stop {background: var(--button-cancel-background-fill); color: var(--button-cancel-text-color);}
.vc-live-button:disabled {opacity: .45; cursor: not-allowed;}
.vc-live-meter {flex: 1; min-width: 160px; height: 10px; border-radius: 5px; background: var(--border-color-primary);
  overflow: hidden;}
.vc-live-meter > div {height: 100%; width: 0; background: #3b82f6; transition: width 60ms linear;}
.vc-live-hint {margin: 0; opacity: .8; font-size: .9em;}
.vc-live-speed {font-size: .92em;}
.vc-live-link {background: none; border: none; padding: 0; color: var(--link-text-color); cursor: pointer;
  font-size: .92em; text-decoration: underline;}
.vc-live-link:disabled {opacity: .45; cursor: not-allowed;}
.vc-live-check {font-size: .92em; display: flex; gap: 8px; align-items: baseline;}
.vc-live-check input {appearance: auto; width: 15px; height: 15px; flex: none; accent-color: var(--color-accent);}
.vc-live-label {font-weight: 600; font-size: .9em; opacity: .85;}
.vc-live-select {max-width: 28em; border-radius: 8px; padding: 6px 8px; border: 1px solid var(--border-color-primary);
  background: var(--input-background-fill); color: var(--body-text-color); font: inherit;}
.vc-live-name {border-radius: 8px; padding: 6px 8px; border: 1px solid var(--border-color-primary);
  background: var(--input-background-fill); color: var(--body-text-color); font: inherit;}
.vc-live-voices summary {cursor: pointer; font-size: .92em;}
.vc-live textarea {width: 100%; border-radius: 8px; padding: 6px 8px; border: 1px solid var(--border-color-primary);
  background: var(--input-background-fill); color: var(--body-text-color); font: inherit;}
.vc-live-columns {display: grid; grid-template-columns: 1fr 1fr; gap: 12px;}
.vc-live-text {min-height: 3.2em; max-height: 12em; overflow-y: auto; white-space: pre-wrap; border-radius: 8px;
  padding: 6px 8px; border: 1px solid var(--border-color-primary); background: var(--block-background-fill);}
.vc-live-text p {margin: 0 0 4px 0;}
.vc-live-function {font-family: ui-monospace, monospace; font-size: .85em; min-height: 2em;}
.vc-live-stats {font-family: ui-monospace, monospace; font-size: .85em; opacity: .9; white-space: pre-line;}
.vc-live a {color: var(--link-text-color); margin-right: 14px;}
"""
