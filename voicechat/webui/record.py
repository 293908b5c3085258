"""The Record-and-run tab: a recording in, the whole answer out (its status card, timeline, timings and downloads).

``RecordAndRun(engine, outputs, ...).build()`` inside a ``gr.Tab`` (app.py puts the tabs on one page); the handlers
submit jobs to the engine and render its events. No MLX here: the engine runs the conversations.
"""

from __future__ import annotations

import html
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

import gradio as gr
import numpy as np

from .. import engine as eng
from ..answer import Answer, realtime_factor
from ..audio import check_upload, duration_words, read_recording, write_wav
from ..config import NVIDIA_SAMPLING, OUTPUT_SAMPLE_RATE, GenerationConfig
from ..errors import AudioInputError
from ..limits import SettingError, TimeLimit, TimedOut, checked_prompt, checked_seed
from ..result import conversation_json
from ..tools import BUILTIN_TOOLS, system_prompt as tool_prompt
from ..voices import Voice, VoiceError
from . import stream, timeline
from .voices import VoicePanel

NVIDIA_PROMPT = (  # NVIDIA's deployment default (docs/model.md §6 point 7)
    "You are an AI voice assistant developed by NVIDIA. Your name is NVIDIA Voice Chat. Answer in a spoken, "
    "conversational style rather than a written one. Do not repeat the same sentence over and over again. "
    "Start the conversation by greeting the user."
)
PROMPT_PRESETS = {
    "NVIDIA default": NVIDIA_PROMPT,
    "Brief answers": "You are a helpful voice assistant. Answer in one or two short spoken sentences.",
    "Friendly tutor": "You are a patient, friendly tutor. Explain things simply and step by step, in a warm "
                      "spoken style, and check that the listener is following.",
    "Storyteller": "You are a storyteller. Answer every question with a short, vivid spoken story.",
    "No system prompt": "",
}

RTF_MEANING = ("RTF (real-time factor) = seconds of computing since the run started / seconds of timeline computed "
               "so far (system prompt, your recording and the silence after it); below 1 is faster than real time. "
               "The same number during the run and after it.")


# ---------------------------------------------------------------------------------------------------------------
# status lines
# ---------------------------------------------------------------------------------------------------------------
def status_html(kind: str, title: str, detail: str = "", fraction: Optional[float] = None) -> str:
    """The status card: a coloured dot and a title, an optional progress bar, a detail line."""
    bar = (f'<div class="vc-bar"><div style="width:{100 * min(max(fraction, 0.0), 1.0):.1f}%"></div></div>'
           if fraction is not None else "")
    detail = f'<div class="vc-detail">{html.escape(detail)}</div>' if detail else ""
    return (f'<div class="vc-status vc-{kind}" data-kind="{kind}"><div class="vc-title"><span class="vc-dot"></span>'
            f'{html.escape(title)}</div>{bar}{detail}</div>')


def idle_status() -> str:
    return status_html("idle", "Ready when you are", "Record or drop a question, then press Run (Ctrl+Enter).")


def not_loaded_status(status: eng.EngineStatus) -> str:
    return status_html("error", "The model is not loaded",
                       f"{status.message} (To try the interface without it: python app.py --demo.)")


def engine_status_card(status: eng.EngineStatus) -> str:
    """The status card before any run: ready, not loaded, or waiting for the model."""
    if status.state == eng.READY:
        return idle_status()
    if status.state in (eng.FAILED, eng.CLOSED):
        return not_loaded_status(status)
    return status_html("wait", "Waiting for the model", status.message + " Run works once it is loaded.",
                       status.fraction)


def rtf_text(rtf: float) -> str:
    return f"RTF {rtf:.2f} ({'faster' if rtf < 1 else 'slower'} than real time)"


def waiting_status(queued: eng.Event, wait_seconds: Optional[float], engine_status: eng.EngineStatus) -> str:
    """A waiting run's card from its last QUEUED event: the requests ahead, the engine's reason when it waits for
    more than its turn (memory: docs/batching.md §5) and the expected wait."""
    if engine_status.state in (eng.STARTING, eng.LOADING, eng.DOWNLOADING):
        return status_html("wait", "Waiting for the model", engine_status.message, engine_status.fraction)
    position, reason = queued.position, queued.message
    if position == 0 and not reason:
        return status_html("wait", "Starting", "Your request is next.")
    ahead = "1 request" if position == 1 else f"{position} requests"
    title = f"Waiting in line: {ahead} ahead of you" if position else "Waiting for memory"
    why = f"{reason[:1].upper()}{reason[1:]}. " if reason else ""
    wait = (f"Expected wait: up to about {duration_words(wait_seconds)} (from the measured speed and the lengths of "
            f"the recordings ahead). " if wait_seconds is not None else "")
    return status_html("wait", title, why + wait + "Yours starts automatically as soon as the model has room for it.")


def progress_status(event: eng.Event, prompt_frames: int, bounded: bool, frame_seconds: float) -> str:
    """One line per progress event: what it does, frame N of (up to) M, elapsed time, RTF, time left. In automatic
    mode M is a bound: the run stops earlier once the answer has ended."""
    reading = event.update.stage == "prompt" or event.done < prompt_frames
    title = "Reading the system prompt…" if reading else "Listening and answering…"
    of = f"up to {event.total}" if bounded else f"{event.total}"
    parts = [f"frame {event.done} of {of}", f"{event.seconds:.1f} s"]
    if event.done > 0:
        parts.append(rtf_text(realtime_factor(event.seconds, event.done, frame_seconds)))
        left = (event.total - event.done) * event.seconds / event.done
        parts.append(f"{'up to ' if bounded else ''}about {duration_words(left)} left")
    return status_html("run", title, " · ".join(parts), event.done / max(event.total, 1))


def done_status(answer: Answer) -> str:
    r = answer.result
    detail = (f"{answer.timeline_frames} frames ({answer.timeline_frames * r.frame_seconds:.1f} s of timeline) in "
              f"{answer.wall_seconds:.1f} s · {rtf_text(answer.realtime_factor)} · {r.seconds:.1f} s of answer audio")
    return status_html("done", "Answer ready", detail, 1.0)


# ---------------------------------------------------------------------------------------------------------------
# timings and downloads
# ---------------------------------------------------------------------------------------------------------------
def timings_markdown(answer: Answer, load_seconds: Optional[float]) -> str:
    r = answer.result
    wall = answer.wall_seconds
    # the stages the session times on their own (Result.timings); the rest of the run is the timeline's positions,
    # each one graph of all four networks (docs/streaming.md), so shares are of the whole run and add up to it
    stages = {**r.timings, "the 80 ms positions (all else)": max(0.0, wall - sum(r.timings.values()))}
    rows = [f"| {stage} | {seconds:.2f} | {100 * seconds / wall:.0f}% |" for stage, seconds in stages.items()]
    lines = ["| Stage | Seconds | Share |", "|---|---:|---:|", *rows,
             f"| **total (wall)** | **{answer.wall_seconds:.2f}** | |", "",
             f"{answer.timeline_frames} timeline frames of {1000 * r.frame_seconds:.0f} ms "
             f"({answer.timeline_frames * r.frame_seconds:.2f} s, the system prompt's {r.prompt_frames} included): "
             + rtf_text(answer.realtime_factor) + ".", "", RTF_MEANING]
    if load_seconds and load_seconds >= 0.1:
        lines.append(f"Model load (once per start): {load_seconds:.1f} s.")
    return "\n".join(lines)


@dataclass(frozen=True)
class Question:
    """One Run: the recording (mono float32 at its own rate) and the settings it was asked with."""

    samples: np.ndarray
    rate: int
    system_prompt: str  # the instructions; the model reads them with the tools' block (model_prompt)
    seed: int
    config: GenerationConfig
    input_name: str
    tools: tuple = ()  # voicechat.tools.Tool objects the model may call
    voice: Optional[Voice] = None  # the voice chosen (None: the checkpoint's default)


def save_outputs(answer: Answer, run_dir: Path, ask: Question, model: str, demo_model: bool) -> tuple[Path, Path]:
    """answer.wav (16-bit PCM at the model's rate) and conversation.json (the CLI's record, voicechat.result)."""
    r = answer.result
    run_dir.mkdir(parents=True, exist_ok=True)
    wav = write_wav(run_dir / "answer.wav", r.audio, r.sample_rate)
    record = conversation_json(answer, source="app", model=model, demo_model=demo_model, input_file=ask.input_name,
                               input_sample_rate=ask.rate, input_seconds=len(ask.samples) / ask.rate,
                               system_prompt=ask.system_prompt, seed=ask.seed, generation_config=ask.config,
                               answer_file=wav.name)
    js = run_dir / "conversation.json"
    js.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return wav, js


# ---------------------------------------------------------------------------------------------------------------
# tools
# ---------------------------------------------------------------------------------------------------------------
def summary(description: str) -> str:
    """A tool description's first clause, for a one-line label."""
    for stop in (". ", ": "):
        description = description.split(stop, 1)[0]
    return description.strip().rstrip(".")


def tool_choices() -> list[tuple[str, str]]:
    """The Tools panel's (label, value) pairs: each built-in tool (they run on this computer), named, with what it
    does."""
    return [(f"{t.name}: {summary(t.description)}", t.name) for t in BUILTIN_TOOLS]


def picked_tools(names: Optional[Sequence[str]]) -> tuple:
    """The ticked tools, in the panel's order (Gradio refuses a value that is not one of the choices)."""
    names = set(names or ())
    return tuple(t for t in BUILTIN_TOOLS if t.name in names)


def model_prompt(instructions: Optional[str], names: Optional[Sequence[str]]) -> str:
    """The system prompt the model reads: the instructions, with NVIDIA's tool block when tools are ticked (the
    engine builds the same from the request, voicechat.tools.system_prompt)."""
    return tool_prompt(instructions or "", picked_tools(names))


def tool_calls_text(calls: Sequence, recording_start: int, frame_seconds: float) -> str:
    """The Tool calls box: every call so far, two lines each (the timeline's tooltip of the call)."""
    return "\n".join(line for call in calls for line in timeline.call_lines(call, recording_start, frame_seconds))


def note_calls(calls: dict, event: eng.Event) -> None:
    """Keep, by call id, the newest record of each tool call that a progress event's frame reports."""
    for tool_event in event.frame.events if event.frame is not None else ():
        calls.update((call.call_id, call) for call in tool_event.calls)


# ---------------------------------------------------------------------------------------------------------------
# the record-and-run tab
# ---------------------------------------------------------------------------------------------------------------
# (temperature, top-p, repetition penalty) of the text channel: NeMo's greedy search, NVIDIA's wrapper
GREEDY_TEXT = (0.0, 1.0, 1.0)
NVIDIA_TEXT = tuple(NVIDIA_SAMPLING[k] for k in ("text_temperature", "text_top_p", "text_repetition_penalty"))


def generation_config(extra_seconds, max_extra_seconds, temperature, top_p, repetition_penalty, tts_override,
                      tts_guidance, tts_top_p, tts_noise, turn_markers, reference) -> GenerationConfig:
    """The Advanced controls as a GenerationConfig. extra_seconds 0 = automatic (until the answer ends); the voice
    sampling values apply only with tts_override (None = the checkpoint's)."""
    voice = (dict(tts_guidance_scale=float(tts_guidance), tts_top_p=float(tts_top_p), tts_noise_scale=float(tts_noise))
             if tts_override else {})
    return GenerationConfig(
        reference=bool(reference), extra_seconds=float(extra_seconds) or None,
        max_extra_seconds=float(max_extra_seconds), text_temperature=float(temperature), text_top_p=float(top_p),
        text_repetition_penalty=float(repetition_penalty), turn_markers=bool(turn_markers), **voice)


def bounded(config: GenerationConfig) -> bool:
    """Automatic mode: the run's length is a bound (it stops once the answer has ended)."""
    return not config.reference and config.extra_seconds is None


def load_examples(assets: Path) -> list[dict]:
    """The example questions listed in ``assets``/examples.json whose files are there."""
    listing = assets / "examples.json"
    return [e for e in json.loads(listing.read_text()) if (assets / e["file"]).is_file()] if listing.is_file() else []


class RecordAndRun:
    """The record-and-run tab: a recording in, the whole answer out. ``build()`` inside a ``gr.Tab``; the handlers
    submit jobs to the engine and render its events."""

    OUTPUTS = ("status", "answer_audio", "transcript", "assistant", "function", "timeline", "timings", "downloads",
               "player", "tool_calls")

    def __init__(self, engine: eng.Engine, outputs: Path, demo_mode: bool = False, assets: Optional[Path] = None):
        self.engine = engine
        self.outputs = outputs
        self.assets = assets  # the example questions' folder (app.py's assets/; None: no examples)
        self.demo_mode = demo_mode
        self.voices = VoicePanel(engine, outputs)  # the Voice control (voicechat/webui/voices.py)

    # ---- the widgets -------------------------------------------------------------------------------------------
    def build(self) -> None:
        facts = self.engine.status().facts
        with gr.Row(equal_height=False):
            with gr.Column(scale=5):
                audio_in = gr.Audio(sources=["upload", "microphone"], type="filepath", label="Your question",
                                    elem_id="vc-input")
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary", scale=3, interactive=False, elem_id="vc-run",
                                        elem_classes="vc-run")
                    cancel_btn = gr.Button("Cancel", variant="stop", scale=1, interactive=False, elem_id="vc-cancel")
                preset = gr.Dropdown(list(PROMPT_PRESETS), value="NVIDIA default", label="Assistant persona",
                                     info="Fills in the system prompt; edit it freely.")
                prompt = gr.Textbox(NVIDIA_PROMPT, lines=3, max_lines=8, label="System prompt",
                                    info="Read by the model before your recording (one timeline frame per token).")
                dice = gr.Button("New seed", size="sm", render=False)
                seed = gr.Number(0, precision=0, label="Seed", minimum=0, buttons=[dice],
                                 info="Same input + same seed = same answer. Another seed: another take of the voice.")
                voice_choice = self.voices.build()
                with gr.Accordion("Tools", open=True, elem_id="vc-tools"):
                    tools = gr.CheckboxGroup(tool_choices(), value=[], label="Built-in tools the model may call",
                                             info="They run on this computer; each call and its result show under "
                                                  "Tool calls and on the timeline. The model reads their "
                                                  "descriptions before your recording, so it starts later.",
                                             elem_id="tools-picker")
                    with gr.Accordion("What the model reads (the system prompt with the tools)", open=False):
                        reads = gr.Textbox(NVIDIA_PROMPT, lines=3, max_lines=14, interactive=False, show_label=False,
                                           buttons=["copy"], elem_id="vc-model-prompt")
                with gr.Accordion("Advanced", open=False):
                    extra = gr.Slider(0, 60, value=0, step=0.5, label="Extra seconds after your recording",
                                      info="Silence the model answers in. 0 = automatic: until the answer ends.")
                    max_extra = gr.Slider(1, 60, value=10, step=1, label="Most extra seconds (automatic mode)")
                    gr.Markdown("**Text sampling** (the words). Temperature 0 is greedy, like NeMo.")
                    with gr.Row():
                        greedy_btn = gr.Button("Greedy (NeMo)", size="sm")
                        nvidia_btn = gr.Button("NVIDIA's sampling (0.3 / 0.5 / 1.1)", size="sm")
                    temperature = gr.Slider(0, 1.5, value=0.0, step=0.05, label="Temperature")
                    top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                    repetition = gr.Slider(1.0, 2.0, value=1.0, step=0.05, label="Repetition penalty")
                    tts_override = gr.Checkbox(False, label="Override the voice sampling (EAR-TTS)",
                                               info="Off: the checkpoint's own values (shown once it is loaded).")
                    voice = self.voice_values(facts)
                    with gr.Row():
                        tts_guidance = gr.Slider(0, 2, value=voice[0], step=0.05, label="Guidance scale",
                                                 interactive=False, elem_id="vc-tts-guidance")
                        tts_top_p = gr.Slider(0.05, 1, value=voice[1], step=0.01, label="Top-p", interactive=False,
                                              elem_id="vc-tts-top-p")
                        tts_noise = gr.Slider(0, 1, value=voice[2], step=0.001, label="Noise scale",
                                              interactive=False, elem_id="vc-tts-noise")
                    turn_markers = gr.Checkbox(False, label="Show turn markers (<|t|> / <$t$>) in the assistant text")
                    reference = gr.Checkbox(False, label="Reference mode: NVIDIA's offline semantics (fixed "
                                                         "length, system-prompt frames kept in the audio)")
                examples = load_examples(self.assets) if self.assets else []
                if examples:
                    gr.Examples([[str(self.assets / e["file"])] for e in examples], inputs=[audio_in],
                                label="Example questions (a synthetic voice, espeak-ng)",
                                example_labels=[f'“{e["text"]}”  ({e["sample_rate"] / 1000:g} kHz, '
                                                f'{"stereo" if e["channels"] > 1 else "mono"})' for e in examples])
            with gr.Column(scale=6):
                status = gr.HTML(engine_status_card(self.engine.status()), label="Status", elem_id="vc-status")
                # the answer plays while it is generated (voicechat/webui/stream.py); this player is for listening again
                player = gr.HTML(stream.player_html(None), js_on_load=stream.MOUNT_JS, elem_id="vc-answer-stream")
                answer_audio = gr.Audio(label="Answer", type="filepath", interactive=False, elem_id="vc-answer")
                assistant = gr.Textbox(label="Assistant text", lines=3, max_lines=10, interactive=False,
                                       buttons=["copy"], elem_id="vc-assistant")
                transcript = gr.Textbox(label="Your words (transcript)", lines=2, max_lines=6, interactive=False,
                                        buttons=["copy"], elem_id="vc-transcript")
                function = gr.Textbox(label="Function channel", lines=1, max_lines=6, interactive=False,
                                      buttons=["copy"], placeholder="(tool-call tokens appear here)",
                                      elem_id="vc-function")
                tool_calls = gr.Textbox(label="Tool calls", lines=1, max_lines=10, interactive=False,
                                        buttons=["copy"], elem_id="vc-tool-calls",
                                        placeholder="(calls of the tools ticked under Tools, and their results)")
        with gr.Accordion("Timeline", open=True):
            timeline_view = gr.HTML(timeline.EMPTY, label="Timeline", elem_id="vc-timeline",
                                    js_on_load=timeline.SCRIPT)
        with gr.Row():
            with gr.Column():
                with gr.Accordion("Timings", open=False):
                    timings = gr.Markdown("No timings yet.", label="Timings")
            with gr.Column():
                downloads = gr.File(label="Downloads (answer WAV, conversation JSON)", file_count="multiple",
                                    interactive=False, elem_id="vc-downloads")

        outputs_list = [status, answer_audio, transcript, assistant, function, timeline_view, timings, downloads,
                        player, tool_calls]
        inputs_list = [audio_in, prompt, seed, extra, max_extra, temperature, top_p, repetition, tts_override,
                       tts_guidance, tts_top_p, tts_noise, turn_markers, reference, tools, voice_choice]
        # every Run reaches the engine at once (concurrency_limit=None): the engine's queue is the only queue
        (run_btn.click(self.buttons_busy, None, [run_btn, cancel_btn], api_visibility="private", queue=False)
         .then(self.run, inputs_list, outputs_list, api_name="run", show_progress="hidden", concurrency_limit=None)
         .then(self.buttons_idle, None, [run_btn, cancel_btn], api_visibility="private", queue=False))
        cancel_btn.click(self.cancel, None, status, api_name="cancel", queue=False)
        # checked when it arrives (upload, recording, example), not when Run is pressed
        audio_in.change(self.check_input, audio_in, [audio_in, *outputs_list], api_name="check", queue=False,
                        show_progress="hidden")
        preset.change(lambda name: PROMPT_PRESETS[name], preset, prompt, api_visibility="private", queue=False)
        for picked in (prompt, tools):  # a preset's prompt changes the prompt too
            picked.change(model_prompt, [prompt, tools], reads, api_visibility="private", queue=False,
                          show_progress="hidden")
        dice.click(lambda: secrets.randbelow(2**31), None, seed, api_visibility="private", queue=False)
        for button, values in ((greedy_btn, GREEDY_TEXT), (nvidia_btn, NVIDIA_TEXT)):
            button.click(constant(values), None, [temperature, top_p, repetition], api_visibility="private",
                         queue=False)
        tts_override.change(lambda on: [gr.Slider(interactive=on)] * 3, tts_override,
                            [tts_guidance, tts_top_p, tts_noise], api_visibility="private", queue=False)
        self.model_outputs = [status, run_btn, tts_guidance, tts_top_p, tts_noise, voice_choice]

    @staticmethod
    def voice_values(facts: Optional[eng.ModelFacts]) -> tuple:
        """The voice sliders' starting values: the checkpoint's EAR-TTS sampling (None until a model is loaded)."""
        if facts is None:
            return None, None, None
        return facts.tts_guidance_scale, facts.tts_top_p, facts.tts_noise_scale

    def on_model(self, status: eng.EngineStatus) -> tuple:
        """``model_outputs`` for the engine's state: the status card, Run (only with a model), the voice sliders."""
        ready = status.state == eng.READY
        voice = [gr.Slider(value=v) for v in self.voice_values(status.facts)] if ready else [gr.skip()] * 3
        return (engine_status_card(status), gr.Button(interactive=ready), *voice, self.voices.on_model(status))

    # ---- the handlers ------------------------------------------------------------------------------------------
    def _frame(self, **values) -> tuple:
        """One yield: the named outputs changed, the others left as they are."""
        return tuple(values.get(k, gr.skip()) for k in self.OUTPUTS)

    async def check_input(self, audio_path) -> tuple:
        """A new recording -> (the input, every output): refused at once (the input and the last answer cleared,
        with one line saying why) when it cannot be used or its check passes the time limit (docs/limits.md §2); a
        long one gets a warning with the expected wait at the measured speed (else the one expected on this
        machine)."""
        if not audio_path:
            return gr.skip(), *self._frame()
        status = self.engine.status()
        rtf = status.expected_realtime_factor
        try:
            check = await TimeLimit("checking the recording").run(check_upload, audio_path, rtf)
        except (AudioInputError, TimedOut) as e:
            return None, *self._frame(status=status_html("error", "This recording cannot be used", str(e)),
                                      **CLEARED)
        if status.state in (eng.FAILED, eng.CLOSED):
            return gr.skip(), *self._frame()  # the card keeps saying that the model is not there, and what to do
        ready = "Press Run (Ctrl+Enter)." if status.state == eng.READY else "Run works once the model is loaded."
        if not check.warning:
            return gr.skip(), *self._frame(status=status_html("idle", "Recording ready", f"{check.message} {ready}"))
        assumed = ("" if status.measured or rtf is None else
                   f" (RTF {rtf:g} is what this machine is expected to do; the first run measures it.)")
        return gr.skip(), *self._frame(status=status_html("warn", "A long recording",
                                                          f"{check.message}{assumed} {ready}"))

    def run(self, audio_path, system_prompt, seed, extra_seconds, max_extra_seconds, temperature, top_p,
            repetition_penalty, tts_override, tts_guidance, tts_top_p, tts_noise, turn_markers, reference,
            tools=None, voice=None, request: gr.Request = None) -> Iterator[tuple]:
        """Submit one conversation to the engine and stream its progress; the last yield has every output.
        ``tools``: the names of the built-in tools ticked (none: the model reads the system prompt alone);
        ``voice``: the name of the voice chosen (none: the checkpoint's)."""
        if not audio_path:
            yield self._frame(status=status_html("error", "No recording yet",
                                                 "Record with the microphone or drop an audio file first."))
            return
        try:
            samples, rate = read_recording(audio_path)
        except AudioInputError as e:
            yield self._frame(status=status_html("error", "This recording cannot be used", str(e)), **CLEARED)
            return
        try:  # the settings, checked as everywhere (voicechat/limits.py), before the engine queues anything
            config = generation_config(extra_seconds, max_extra_seconds, temperature, top_p, repetition_penalty,
                                       tts_override, tts_guidance, tts_top_p, tts_noise, turn_markers, reference)
            ask = Question(samples, rate, checked_prompt(system_prompt or ""), checked_seed(seed or 0), config,
                           Path(audio_path).name, picked_tools(tools), self.voices.voice(voice))
            job = self.engine.submit(eng.Request(ask.samples, ask.rate, ask.system_prompt, ask.seed, ask.config,
                                                 ask.tools, ask.voice), owner=getattr(request, "session_hash", None))
        except (SettingError, VoiceError, ValueError, TypeError) as e:
            yield self._frame(status=status_html("error", "A setting cannot be used", str(e)), **CLEARED)
            return
        except eng.EngineFull as e:
            yield self._frame(status=status_html("error", "The app is busy", str(e)))
            return
        answer = stream.ANSWERS.open(OUTPUT_SAMPLE_RATE)  # heard while it is generated (voicechat/webui/stream.py)
        try:
            yield self._frame(status=status_html("wait", "Queued"), player=stream.player_html(answer), **CLEARED)
            yield from self._follow(job, ask, answer)
        finally:
            answer.end()
            job.cancel()  # the browser went away or the event was cancelled: free the engine (no-op when finished)

    def _follow(self, job: eng.Job, ask: Question, answer: stream.AnswerStream) -> Iterator[tuple]:
        """Render the job's events until it ends; progress at most 5 times a second."""
        queued, last_shown, unshown = eng.Event(eng.QUEUED), 0.0, None
        running, frames = False, None  # once it runs: (the prompt's positions, seconds per position)
        calls: dict = {}  # call id -> the newest record of each tool call the frames reported
        while True:
            event = job.next_event(timeout=0.25)
            if event is None:  # nothing new; yield anyway: Gradio can only close (cancel) a generator at a yield
                if unshown is not None:
                    yield self._progress_frame(unshown, frames, ask, calls)
                    unshown = None
                else:
                    yield self._frame() if running else self._waiting_frame(job, queued)
            elif event.kind == eng.QUEUED:
                queued = event
                yield self._waiting_frame(job, queued)
            elif event.kind == eng.STARTED:
                running, frames = True, (event.prompt_frames, self.engine.status().facts.frame_seconds)
                yield self._frame(status=status_html("run", "Starting…", "", 0.0))
            elif event.kind == eng.PROGRESS:
                if event.frame is not None and event.frame.position >= (0 if ask.config.reference else frames[0]):
                    answer.push(event.frame.audio, event.seconds)  # the answer's positions (Result.audio's)
                note_calls(calls, event)
                unshown = event
                if time.monotonic() - last_shown >= 0.2:
                    last_shown = time.monotonic()
                    yield self._progress_frame(event, frames, ask, calls)
                    unshown = None
            elif event.kind == eng.DONE:
                yield self._finished(event.answer, ask, job.id)
                return
            elif event.kind == eng.CANCELLED:
                yield self._frame(status=status_html("cancelled", "Cancelled", event.message))
                return
            else:
                failed = self.engine.status().state == eng.FAILED
                yield self._frame(status=not_loaded_status(self.engine.status()) if failed else
                                  status_html("error", "Something went wrong", event.message))
                return

    def _waiting_frame(self, job: eng.Job, queued: eng.Event) -> tuple:
        return self._frame(status=waiting_status(queued, self.engine.wait_seconds(job), self.engine.status()))

    def _progress_frame(self, event: eng.Event, frames: tuple[int, float], ask: Question, calls: dict) -> tuple:
        status = progress_status(event, frames[0], bounded(ask.config), frames[1])
        return self._frame(status=status, assistant=event.update.text, function=event.update.function_text,
                           tool_calls=tool_calls_text(list(calls.values()), *frames))

    def _finished(self, answer: Answer, ask: Question, job_id: int) -> tuple:
        r = answer.result
        run_dir = self.outputs / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{job_id}-{secrets.token_hex(3)}"
        wav, js = save_outputs(answer, run_dir, ask, self.engine.name, self.demo_mode)
        return self._frame(status=done_status(answer), answer_audio=str(wav), transcript=r.user_transcript,
                           assistant=r.text, function=r.function_text,
                           tool_calls=tool_calls_text(r.tool_calls, r.prompt_frames, r.frame_seconds),
                           timeline=timeline.timeline_html(answer, ask.samples, ask.rate),
                           timings=timings_markdown(answer, self.engine.status().load_seconds),
                           downloads=[str(wav), str(js)])

    def cancel(self, request: gr.Request = None) -> str:
        """Stop this browser session's job (a running one stops after its current frame)."""
        owner = getattr(request, "session_hash", None)
        if owner is not None and self.engine.cancel_owner(owner):
            return status_html("cancelled", "Cancelling…", "A running answer stops after its current frame.")
        return gr.skip()

    def buttons_busy(self) -> tuple[gr.Button, gr.Button]:
        """(Run, Cancel) while a conversation runs."""
        return gr.Button(interactive=False), gr.Button(interactive=True)

    def buttons_idle(self) -> tuple[gr.Button, gr.Button]:
        return gr.Button(interactive=self.engine.status().state == eng.READY), gr.Button(interactive=False)


# the answer's outputs before any answer: a run starts from them, and a refused recording leaves them so
CLEARED = dict(answer_audio=None, transcript="", assistant="", function="", timeline=timeline.EMPTY,
               timings="No timings yet.", downloads=None, tool_calls="")


def constant(values: tuple):
    """An event handler that sets its outputs to ``values``."""
    return lambda: values
