"""VoiceChat desktop app: talk to NVIDIA's NemotronLabs-VoiceChat-11B from the browser.

    python app.py                       # downloads the 4-bit checkpoint on first use, then http://127.0.0.1:7860
    python app.py --model DIR           # a checkpoint directory (e.g. from `hf download ... --local-dir DIR`)
    python app.py --demo                # a tiny random-weight model built locally: the UI works, the answers are noise
    python app.py --share --port 8000   # also serve a public Gradio link (only outputs/ and assets/ are served)

This file is the UI only: the page around its tabs, and the command. The page is a set of tabs around one engine:
``build_app`` puts each tab's ``build()`` in a ``gr.Tab`` (Record and run: voicechat/webui/record.py; Talk live:
voicechat/webui/talk.py; the timeline drawing: voicechat/webui/timeline.py). All model work happens on the engine
thread (voicechat/engine/); the tabs' handlers submit jobs and render the engine's events.

One queue: the engine's. Gradio hands every Run to its handler at once (no concurrency limit on it), the handler
submits it to the engine, and the engine's queue is the only place where requests wait: its positions and expected
waits are what the status card shows. Gradio's own queue stays (streaming handlers need it) but never holds a Run.
"""

from __future__ import annotations

import argparse
import html
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from voicechat import engine as eng  # noqa: E402
from voicechat.errors import ConfigError, ModelUnavailable, VoiceChatError  # noqa: E402
from voicechat.limits import DEFAULT_DRAIN_SECONDS, SettingError, check_range  # noqa: E402
from voicechat.realtime import sockets  # noqa: E402
from voicechat.realtime.drain import run_until_stopped  # noqa: E402
from voicechat.webui import talk, timeline  # noqa: E402
from voicechat.webui.record import NVIDIA_PROMPT, RTF_MEANING, RecordAndRun, load_examples  # noqa: E402
from voicechat.webui.access import KeyGuard  # noqa: E402
from voicechat.webui.uploads import UPLOADS_CAP_BYTES, FileGuard  # noqa: E402

APP_DIR = Path(__file__).resolve().parent
ASSETS = APP_DIR / "assets"
DEFAULT_OUTPUTS = APP_DIR / "outputs"
MAX_WAITING = 8  # jobs that may wait for the engine; more are turned away with a message
FORMATS = "WAV, FLAC, OGG, MP3, M4A/AAC, Opus or WebM"  # soundfile, and PyAV for the rest (voicechat.audio)

HOW_TO = f"""
1. **Record** your question with the microphone, or **drop an audio file** on the input ({FORMATS}; any sample
   rate, mono or stereo). Or pick one of the examples below the Run button. The recording is checked at once.
2. Optionally choose **who the assistant is** (system prompt) and a **seed**: the same recording, prompt and seed give
   the same answer; another seed gives another take of the voice. Choose the **Voice** it answers in; under
   **Voices** add one from the microphone or a file (3 s or more of speech) and hear it. Under **Tools**, tick the
   built-in tools the model may call (the time, a calculator, unit conversion): they run on this computer, and each
   call and its result show under **Tool calls** and on the timeline.
3. Press **Run** (or **Ctrl+Enter**). The assistant's words appear while it thinks and the answer plays when it is
   ready. **Cancel** stops within one frame.

The model is full-duplex: it listens and speaks on one 80 ms timeline. Here it hears your recording followed by
silence and answers in that silence; the **Timeline** shows both sides with each word where it was spoken.
"""

LIMITS = f"""
- **English only**, spoken input only. The answer speaks in the checkpoint's voice (the built-in "Aria") or in a voice
  you add under **Voices** from a few seconds of a recording (docs/voices.md).
- Trained on conversations of up to about **2 minutes**: keep recordings short (under a minute works best).
- **Speed depends on the machine.** The 4-bit model has been reported to run near real time on recent Apple Silicon;
  on a Linux or Intel CPU it is around 100x slower than real time. {RTF_MEANING}
- **Use headphones** when you talk to it live: there is no echo cancellation, so through speakers it hears itself.
- The **function channel** shows the model's tool-call tokens. The app runs only the built-in tools ticked under
  **Tools** (none by default); the model reads their descriptions before your recording, so it starts later.
- It is a research model: answers can be wrong, repetitive or cut off.
"""

CSS = """
.vc-status {border-radius: 10px; padding: 10px 14px; border: 1px solid var(--border-color-primary);
            background: var(--block-background-fill);}
.vc-status .vc-title {font-weight: 600; font-size: 1.05em;}
.vc-status .vc-detail {opacity: .8; font-size: .9em; margin-top: 2px;}
.vc-bar {height: 6px; border-radius: 3px; background: var(--border-color-primary); margin-top: 8px; overflow: hidden;}
.vc-bar > div {height: 100%; background: var(--color-accent); transition: width .3s;}
.vc-dot {display: inline-block; width: 10px; height: 10px; border-radius: 50%; margin-right: 8px;
         background: #a3a3a3; vertical-align: 1px;}
.vc-wait .vc-dot, .vc-warn .vc-dot {background: #eab308;}
.vc-warn {border-color: #ca8a04; background: rgba(234, 179, 8, .10);}
.vc-run .vc-dot {background: var(--color-accent); animation: vc-pulse 1s ease-in-out infinite alternate;}
.vc-done .vc-dot {background: #16a34a;}
.vc-error .vc-dot {background: #dc2626;}
.vc-error {border-color: #dc2626; background: rgba(220, 38, 38, .08);}
.vc-done {border-color: #16a34a;}
@keyframes vc-pulse {from {opacity: 1;} to {opacity: .3;}}
.vc-model[data-state="failed"] {color: #dc2626; opacity: 1;}
.vc-banner {border-radius: 10px; padding: 8px 14px; background: rgba(234, 179, 8, .15); border: 1px solid #ca8a04;}
.vc-model {font-size: .92em; opacity: .85;}
#vc-downloads .empty {min-height: 48px !important; height: 48px;}
#vc-downloads .empty .icon {display: none;}
""" + timeline.CSS

# Ctrl+Enter (Cmd+Enter on a Mac) presses the Run button of the tab in view, when it can be pressed; when Run is off
# (an answer running or cancelling, no model yet) a note says so for a few seconds instead of dropping the key.
SHORTCUTS_JS = """
() => document.addEventListener('keydown', (event) => {
  if (event.key !== 'Enter' || !(event.ctrlKey || event.metaKey)) return;
  const shown = [...document.querySelectorAll('button.vc-run')].filter((b) => b.offsetParent !== null);
  const run = shown.find((b) => !b.disabled);
  if (run) { event.preventDefault(); run.click(); return; }
  if (!shown.length) return;
  event.preventDefault();
  const state = document.querySelector('#vc-status .vc-title');
  let note = document.getElementById('vc-shortcut-note');
  if (!note) {
    note = Object.assign(document.createElement('div'), { id: 'vc-shortcut-note', role: 'status' });
    shown[0].after(note);
  }
  const why = state ? ` (${state.textContent.trim()})` : '';
  note.textContent = `Run is off${why}: press Ctrl+Enter again once it is on.`;
  clearTimeout(note.timer);
  note.timer = setTimeout(() => note.remove(), 4000);
})
"""


# ---------------------------------------------------------------------------------------------------------------
# the page
# ---------------------------------------------------------------------------------------------------------------
def model_status_html(status: eng.EngineStatus, name: str) -> str:
    if status.state == eng.READY:
        text = f"{name} is ready" + (f" (loaded in {status.load_seconds:.1f} s)" if status.load_seconds else "")
    elif status.state == eng.FAILED:
        text = f"{name} is not loaded (what to do: below)"
    else:
        text = status.message + (f" ({100 * status.fraction:.0f}%)" if status.fraction else "")
    return f'<div class="vc-model" data-state="{status.state}">Model: {html.escape(text)}</div>'


class Page:
    """What every tab shares: the model line at the top, and the engine's state pushed to each tab (on page load,
    then every second until the model is loaded or has failed)."""

    def __init__(self, engine: eng.Engine, tabs: Sequence):
        self.engine, self.tabs = engine, tabs

    def on_load(self) -> tuple:
        status = self.engine.status()
        return (self._model_line(status), gr.Timer(active=not self._settled(status)),
                *(update for tab in self.tabs for update in tab.on_model(status)))

    def on_tick(self) -> tuple:
        """Like on_load, but the tabs hear only of the change to loaded (or failed): a tick leaves their status
        cards alone while the model loads."""
        status = self.engine.status()
        if self._settled(status):
            return self.on_load()
        skips = [gr.skip() for tab in self.tabs for _ in tab.model_outputs]
        return (self._model_line(status), gr.Timer(active=True), *skips)

    def outputs(self, model_line, timer) -> list:
        return [model_line, timer, *(c for tab in self.tabs for c in tab.model_outputs)]

    def _model_line(self, status: eng.EngineStatus) -> str:
        return model_status_html(status, self.engine.name)

    @staticmethod
    def _settled(status: eng.EngineStatus) -> bool:
        return status.state in (eng.READY, eng.FAILED, eng.CLOSED)


def build_app(engine: eng.Engine, *, outputs: Path = DEFAULT_OUTPUTS, demo_mode: bool = False,
              api_key: Optional[str] = None) -> gr.Blocks:
    """The Blocks UI. Gradio's upload and cache folders are put under ``outputs`` (before any component exists), so
    that, with ``allowed_paths=serve_paths(outputs)``, the app serves nothing but its outputs and the examples.
    ``api_key``: what the Talk live tab's /v1/realtime and /live/tool require, as ``serve --api-key`` does."""
    outputs = Path(outputs).resolve()
    outputs.mkdir(parents=True, exist_ok=True)
    os.environ["GRADIO_TEMP_DIR"] = str(uploads_folder(outputs))
    os.environ["GRADIO_EXAMPLES_CACHE"] = str(uploads_folder(outputs) / EXAMPLES_CACHE)
    record = RecordAndRun(engine, outputs, demo_mode, ASSETS)  # the Record-and-run tab (webui/record.py)
    live = talk.TalkLive(engine, outputs, demo_mode, system_prompt=NVIDIA_PROMPT,  # the Talk live tab (webui/talk.py)
                         api_key=api_key)
    page = Page(engine, [record, live])

    with gr.Blocks(title="VoiceChat", analytics_enabled=False) as demo:
        gr.Markdown("# VoiceChat\nAsk a question out loud; NVIDIA's NemotronLabs-VoiceChat-11B answers in speech.")
        if demo_mode:
            gr.HTML('<div class="vc-banner"><b>Demo mode.</b> This is a tiny model with random weights, built '
                    'locally so you can try the interface without the download. <b>Its answers are noise</b>: '
                    'random words and a buzzing voice. Start the app without <code>--demo</code> for the real '
                    'model.</div>')
        model_line = gr.HTML(model_status_html(engine.status(), engine.name))
        with gr.Tabs():
            with gr.Tab("Record and run", id="record"):
                record.build()
            with gr.Tab("Talk live", id="live"):
                live.build()
        with gr.Accordion("How to use", open=False):
            gr.Markdown(HOW_TO)
        with gr.Accordion("What this model can and cannot do", open=False):
            gr.Markdown(LIMITS)
        timer = gr.Timer(1.0)
        for event, handler in ((timer.tick, page.on_tick), (demo.load, page.on_load)):
            event(handler, None, page.outputs(model_line, timer), api_visibility="private", queue=False,
                  show_progress="hidden")
    demo.queue()
    talk.serve_with(demo, live)  # /v1/realtime and the Talk live tab's routes, beside the page
    return demo


EXAMPLES_CACHE = "examples"  # Gradio's examples cache, inside the uploads folder (never pruned)


def uploads_folder(outputs: Path) -> Path:
    """Gradio's uploads (and cache) folder: GRADIO_TEMP_DIR."""
    return Path(outputs).resolve() / "gradio"


def serve_paths(outputs: Path) -> list[str]:
    """All the app serves: its outputs folder (Gradio's uploads and cache live there) and the example WAVs."""
    return [str(Path(outputs).resolve()), *(str(ASSETS / e["file"]) for e in load_examples(ASSETS))]


def launch(demo: gr.Blocks, outputs: Path, uploads_cap_bytes: int = UPLOADS_CAP_BYTES, **kwargs):
    """Serve the page and return at once (the server runs on Gradio's thread); files go out as audio or downloads,
    and the uploads keep to ``uploads_cap_bytes``, oldest removed first (voicechat/webui/uploads.py)."""
    from starlette.middleware import Middleware

    guard = Middleware(FileGuard, uploads=uploads_folder(outputs), cap_bytes=uploads_cap_bytes, keep=(EXAMPLES_CACHE,))
    launched = demo.launch(allowed_paths=serve_paths(outputs), run_history=False, max_file_size="200mb", css=CSS,
                           js=SHORTCUTS_JS, theme=gr.themes.Soft(primary_hue="orange", secondary_hue="blue"),
                           app_kwargs={**talk.app_kwargs(demo), "middleware": [*key_guard(demo), guard]},
                           **{**kwargs, "prevent_thread_lock": True})
    sockets.guard(demo.server)  # serve's request deadline and connection cap (docs/limits.md §2)
    return launched


def key_guard(demo: gr.Blocks) -> list:
    """With ``--api-key``: the guard before every route of the app (voicechat/webui/access.py), outermost."""
    from starlette.middleware import Middleware

    realtime = talk.TABS[demo].realtime
    return [Middleware(KeyGuard, api_key=realtime.api_key, authorized=realtime.authorized)] if realtime.api_key else []


# ---------------------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------------------
def fix_commands(spec: str) -> str:
    """For a Hub repo id: the commands that fetch it into a folder and start the app on that folder."""
    if Path(spec).expanduser().exists() or spec.count("/") != 1:
        return ""
    folder = f"~/models/{spec.split('/')[1]}"
    return f"For this app: `hf download {spec} --local-dir {folder}`, then `python app.py --model {folder}`."


def model_loader(spec: str, offline: bool) -> eng.ModelLoader:
    """The engine's loader for --model. A model it cannot load is reported in the terminal as well as on the page
    (the engine keeps the message); one it cannot get comes with the commands that fix it."""
    load = eng.hub_model(spec, offline=offline)

    def load_or_explain(progress_bar: type):
        try:
            return load(progress_bar)
        except ModelUnavailable as e:
            error = ModelUnavailable(f"{e} {fix_commands(spec)}".strip())
        except VoiceChatError as e:
            error = e
        print(f"The model is not loaded: {error}", file=sys.stderr, flush=True)
        raise error

    return load_or_explain


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    from voicechat.checkpoint import DEFAULT_MODEL

    p = argparse.ArgumentParser(description="VoiceChat: a browser UI for NemotronLabs-VoiceChat-11B on MLX.")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"Hugging Face repo id or local checkpoint directory (default: {DEFAULT_MODEL})")
    p.add_argument("--demo", action="store_true",
                   help="use a tiny random-weight model built locally (no download; the answers are noise)")
    p.add_argument("--offline", action="store_true", help="never contact the Hugging Face Hub; use the local cache")
    p.add_argument("--share", action="store_true", help="also create a public Gradio share link")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this computer)")
    p.add_argument("--port", type=int, default=7860, help="port (default: 7860)")
    p.add_argument("--max-sessions", type=int, default=None, metavar="N",
                   help="visitors who can Talk live at once, stepped together on the model with Record-and-run jobs "
                        "(default: as many as fit in memory, at most 4; docs/batching.md)")
    p.add_argument("--max-recordings", type=int, default=1, metavar="M",
                   help="Record-and-run jobs stepped at once beside the live visitors; more wait in the queue "
                        "(default: 1; docs/batching.md)")
    p.add_argument("--max-minutes", type=float, default=None, metavar="MIN",
                   help="a live conversation's most minutes: at them it ends with an error, and each conversation's "
                        "memory is reserved up to them (default: the timeline's 10.9; docs/batching.md §4)")
    p.add_argument("--outputs", type=Path, default=DEFAULT_OUTPUTS,
                   help="folder for answers, downloads and uploads (default: ./outputs next to app.py)")
    p.add_argument("--api-key", default=os.environ.get("VOICECHAT_API_KEY"),
                   help="every route of the app needs this key: the page asks for it once, scripts send "
                        "Authorization: Bearer KEY (default: $VOICECHAT_API_KEY; docs/limits.md §3)")
    p.add_argument("--drain-seconds", type=float, default=DEFAULT_DRAIN_SECONDS, metavar="SECONDS",
                   help=f"on SIGTERM, how long live visitors go on talking before they are closed (default "
                        f"{DEFAULT_DRAIN_SECONDS:g}; docs/operations.md)")
    cap_mb = UPLOADS_CAP_BYTES / 2 ** 20
    p.add_argument("--max-uploads-mb", type=float, default=cap_mb,
                   help=f"the uploads kept at most, in MiB; the oldest go first (default {cap_mb:g})")
    args = p.parse_args(argv)
    try:
        check_range("max_uploads_mb", "--max-uploads-mb", args.max_uploads_mb, 0.0, low_open=True)
        check_range("drain_seconds", "--drain-seconds", args.drain_seconds, 0.0)
    except SettingError as e:
        p.error(str(e))
    try:
        eng.check_limits(args.max_sessions, args.max_recordings, args.max_minutes, flags=True)
    except ConfigError as e:
        p.error(str(e))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.demo:
        loader = eng.demo_model()
        name = "tiny random-weight demo model"
        print("Demo mode: a tiny model with random weights. Its answers are noise; it shows how the app works.")
    else:
        loader = model_loader(args.model, offline=args.offline)
        name = args.model
        print(f"Model: {name} (downloaded on first use into the Hugging Face cache; progress is shown below "
              "and in the app).")
    if args.share and not args.api_key:
        print("--share without --api-key: anyone with the link can use the app, its voices and its Realtime API.")
    engine = eng.Engine(loader, name=name, max_waiting=MAX_WAITING, max_sessions=args.max_sessions,
                        max_recordings=args.max_recordings, max_minutes=args.max_minutes).start()
    demo = build_app(engine, outputs=args.outputs, demo_mode=args.demo, api_key=args.api_key)
    # Gradio's own start-up lines would tell to set `share=True` in `launch()`: here it is the --share flag
    launch(demo, args.outputs, uploads_cap_bytes=round(args.max_uploads_mb * 2 ** 20), server_name=args.host,
           server_port=args.port, share=args.share, quiet=True)
    print(f"* Running on local URL:  {demo.local_url}")
    print(f"* Running on public URL: {demo.share_url}" if demo.share_url else
          "* To create a public link too, start the app with --share.", flush=True)
    status = run_until_stopped(talk.TABS[demo].realtime, args.drain_seconds)  # docs/operations.md §3
    demo.close()
    engine.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
