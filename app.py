"""VoiceChat desktop app: talk to NVIDIA's NemotronLabs-VoiceChat-11B from the browser.

    python app.py                       # downloads the 4-bit checkpoint on first use, then http://127.0.0.1:7860
    python app.py --model DIR           # a checkpoint directory (e.g. from `hf download ... --local-dir DIR`)
    python app.py --demo                # a tiny random-weight model built locally: the UI works, the answers are noise
    python app.py --share --port 8000   # also serve a public Gradio link (only outputs/ and assets/ are served)

This file is the UI only (widgets, events, formatting). All model work happens on the engine thread
(voicechat/engine.py); the handlers here submit jobs and render the engine's events.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import secrets
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
import numpy as np  # noqa: E402

from voicechat import engine as eng  # noqa: E402
from voicechat.audio import read_audio, write_wav  # noqa: E402
from voicechat.config import NVIDIA_SAMPLING, GenerationConfig  # noqa: E402
from voicechat.errors import AudioInputError  # noqa: E402

APP_DIR = Path(__file__).resolve().parent
ASSETS = APP_DIR / "assets"
DEFAULT_OUTPUTS = APP_DIR / "outputs"
FRAME_SECONDS = 0.08  # one timeline step (ModelConfig.frame_length) until a result says otherwise
MAX_WAITING = 8  # jobs that may wait for the engine; more are turned away with a message

NVIDIA_PROMPT = (  # NVIDIA's deployment default (SPEC §6 point 7)
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

HOW_TO = """
1. **Record** your question with the microphone, or **drop an audio file** on the input (WAV, FLAC, OGG or MP3; any
   sample rate, mono or stereo). Or pick one of the examples below the Run button.
2. Optionally choose **who the assistant is** (system prompt) and a **seed**: the same recording, prompt and seed give
   the same answer; another seed gives another take of the voice.
3. Press **Run**. The assistant's words appear while it thinks and the answer plays when it is ready.
   **Cancel** stops within one 80 ms frame.

The model is full-duplex: it listens and speaks on one 80 ms timeline. Here it hears your recording followed by
silence and answers in that silence; the **Timeline** shows both sides with each word where it was spoken.
"""

LIMITS = """
- **English only, one voice** (the built-in "Aria"), spoken input only.
- Trained on conversations of up to about **2 minutes**: keep recordings short (under 30 s works best).
- **Speed depends on the machine.** The 4-bit model has been reported to run near real time on recent Apple Silicon;
  on a Linux or Intel CPU it is around 100x slower than real time. The status line shows the real-time factor
  (RTF: seconds of computing per second of conversation; below 1 is faster than real time).
- **Use headphones** when you talk to it live: there is no echo cancellation, so through speakers it hears itself.
- The **function channel** shows the model's tool-call tokens; this app does not run any tools.
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
.vc-wait .vc-dot {background: #eab308;}
.vc-run .vc-dot {background: var(--color-accent); animation: vc-pulse 1s ease-in-out infinite alternate;}
.vc-done .vc-dot {background: #16a34a;}
.vc-error .vc-dot {background: #dc2626;}
.vc-error {border-color: #dc2626; background: rgba(220, 38, 38, .08);}
.vc-done {border-color: #16a34a;}
@keyframes vc-pulse {from {opacity: 1;} to {opacity: .3;}}
.vc-model[data-state="failed"] {color: #dc2626; opacity: 1;}
.vc-banner {border-radius: 10px; padding: 8px 14px; background: rgba(234, 179, 8, .15); border: 1px solid #ca8a04;}
.vc-model {font-size: .92em; opacity: .85;}
.vc-timeline {overflow-x: auto; padding: 4px 0;}
#vc-downloads .empty {min-height: 48px !important; height: 48px;}
#vc-downloads .empty .icon {display: none;}
.vc-timeline svg text {font-family: ui-sans-serif, system-ui, sans-serif;}
"""


# ---------------------------------------------------------------------------------------------------------------
# status lines
# ---------------------------------------------------------------------------------------------------------------
STAGE_TITLES = {
    "perception": "Listening to your recording",
    "prompt": "Reading the system prompt",
    "frames": "Thinking and speaking",
    "codec": "Making the voice",
    "transcript": "Transcribing your words",
}


def status_html(kind: str, title: str, detail: str = "", fraction: Optional[float] = None) -> str:
    """The status card: a coloured dot and a title, an optional progress bar, a detail line."""
    bar = (f'<div class="vc-bar"><div style="width:{100 * min(max(fraction, 0.0), 1.0):.1f}%"></div></div>'
           if fraction is not None else "")
    detail = f'<div class="vc-detail">{html.escape(detail)}</div>' if detail else ""
    return (f'<div class="vc-status vc-{kind}" data-kind="{kind}"><div class="vc-title"><span class="vc-dot"></span>'
            f'{html.escape(title)}</div>{bar}{detail}</div>')


def idle_status() -> str:
    return status_html("idle", "Ready when you are", "Record or drop a question, then press Run.")


def model_status_html(status: eng.EngineStatus, name: str) -> str:
    if status.state == eng.READY:
        text = f"{name} is ready" + (f" (loaded in {status.load_seconds:.1f} s)" if status.load_seconds else "")
    elif status.state == eng.FAILED:
        text = f"not loaded. {status.message} (To try the interface without it: python app.py --demo.)"
    else:
        text = status.message + (f" ({100 * status.fraction:.0f}%)" if status.fraction else "")
    return f'<div class="vc-model" data-state="{status.state}">Model: {html.escape(text)}</div>'


def waiting_status(position: int, engine_status: eng.EngineStatus) -> str:
    if engine_status.state in (eng.STARTING, eng.LOADING, eng.DOWNLOADING):
        return status_html("wait", "Waiting for the model", engine_status.message, engine_status.fraction)
    if position == 0:
        return status_html("wait", "Starting", "Your request is next.")
    ahead = "1 request" if position == 1 else f"{position} requests"
    return status_html("wait", f"Waiting in line: {ahead} ahead of you",
                       "One conversation runs at a time; yours starts automatically.")


def rtf_text(frames_per_second: float, frame_seconds: float) -> str:
    """Real-time factor: seconds of computing per second of timeline (1.0 = real time)."""
    if frames_per_second <= 0:
        return ""
    rtf = 1.0 / (frames_per_second * frame_seconds)
    return f"RTF {rtf:.2f} ({'faster' if rtf < 1 else 'slower'} than real time)"


def duration_text(seconds: float) -> str:
    if seconds < 1:
        return "less than a second"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 90 * 60:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


def progress_status(event: eng.Event) -> str:
    u = event.update
    title = STAGE_TITLES.get(u.stage, u.stage.capitalize())
    parts = [f"frame {event.done} of {event.total}", f"{u.elapsed_s:.1f} s"]
    if u.frames_per_second > 0:
        parts.append(rtf_text(u.frames_per_second, FRAME_SECONDS))
        parts.append(f"{duration_text((event.total - event.done) / u.frames_per_second)} left")
    return status_html("run", f"{title}…", " · ".join(parts), event.done / max(event.total, 1))


def done_status(answer: eng.Answer) -> str:
    r = answer.result
    frames = len(r.text_tokens)
    detail = (f"{r.seconds:.1f} s of answer audio · {frames} frames in {answer.wall_seconds:.1f} s · "
              + rtf_text(frames / max(answer.wall_seconds, 1e-9), r.frame_seconds))
    return status_html("done", "Answer ready", detail, 1.0)


# ---------------------------------------------------------------------------------------------------------------
# the timeline (inline SVG)
# ---------------------------------------------------------------------------------------------------------------
USER_COLOR, ASSISTANT_COLOR, FUNCTION_COLOR, TURN_COLOR = "#3b82f6", "#f97316", "#a855f7", "#16a34a"
LABEL_W, AXIS_H, WAVE_H, LANE_H = 92, 26, 56, 17
WORD_LANES, FUNCTION_LANES = 3, 2
CHAR_W = 6.3  # px per character at the 11 px label font (for lane packing)
MAX_PX_PER_FRAME = 40.0


def envelope(x: np.ndarray, rate: int, frame_seconds: float, bins_per_frame: int) -> np.ndarray:
    """Peak |x| per 1/bins_per_frame of a timeline frame. [N] -> [ceil(N / hop)]"""
    hop = rate * frame_seconds / bins_per_frame
    if x.size == 0:
        return np.zeros(0, np.float32)
    starts = np.unique(np.floor(np.arange(0, x.size, hop)).astype(np.int64))
    return np.maximum.reduceat(np.abs(x), starts).astype(np.float32)


def wave_path(env: np.ndarray, x0: float, bin_w: float, mid: float, half_h: float) -> str:
    """Vertical bars, one per envelope bin, as one SVG path, scaled to the waveform's own peak."""
    if env.size == 0:
        return ""
    heights = np.maximum(env / max(float(env.max()), 0.1) * half_h, 0.5)
    return "".join(f"M{x0 + i * bin_w:.1f} {mid - h:.1f}V{mid + h:.1f}" for i, h in enumerate(heights))


def pack_lanes(pieces: Sequence[eng.Piece], x_of, lanes: int) -> list[int]:
    """A lane per piece: the first lane that is free at its x, else the one that frees up first."""
    ends = [-1e9] * lanes
    out = []
    for p in pieces:
        x = x_of(p.frame)
        free = [i for i in range(lanes) if ends[i] <= x]
        lane = free[0] if free else min(range(lanes), key=ends.__getitem__)
        ends[lane] = x + CHAR_W * max(len(piece_label(p)), 1) + 3
        out.append(lane)
    return out


def piece_label(p: eng.Piece) -> str:
    return p.text.strip() or p.token


def label_px_per_frame(pieces: Sequence[eng.Piece], lanes: int) -> float:
    """The frame width at which each label ends before the label `lanes` places later starts (so lane packing
    never has to overlap two labels)."""
    need = [(CHAR_W * max(len(piece_label(a)), 1) + 4) / max(b.frame - a.frame, 1)
            for a, b in zip(pieces, pieces[lanes:])]
    return max(need, default=0.0)


@dataclass
class TimelineSpan:
    """Where things sit on the 80 ms axis: positions [start, end), the recording starts at `recording_start`.
    Frames are at least wide enough for the labels (up to MAX_PX_PER_FRAME; the view scrolls sideways)."""

    start: int
    end: int
    recording_start: int
    frame_seconds: float
    label_px: float = 0.0
    px_per_frame: float = field(init=False)

    def __post_init__(self):
        fill = 1000.0 / max(self.end - self.start, 1)  # short conversations fill about 1000 px
        self.px_per_frame = min(max(6.0, min(24.0, fill), self.label_px), MAX_PX_PER_FRAME)

    def x(self, position: float) -> float:
        return LABEL_W + (position - self.start) * self.px_per_frame

    @property
    def width(self) -> float:
        return self.x(self.end) + 12


def timeline_html(answer: eng.Answer, user_audio: np.ndarray, user_rate: int) -> str:
    """Input and answer waveforms on one 80 ms time axis, the assistant's words and the function-channel tokens at
    the frames where they were emitted, turn starts/ends, the system-prompt frames and the silence after the input."""
    r = answer.result
    fs = r.frame_seconds
    label_px = max(label_px_per_frame(answer.text_pieces, WORD_LANES),
                   label_px_per_frame(answer.function_pieces, FUNCTION_LANES))
    span = TimelineSpan(start=min(r.first_frame, r.prompt_frames), end=r.first_frame + len(r.text_tokens),
                        recording_start=r.prompt_frames, frame_seconds=fs, label_px=label_px)
    bins = 4 if span.end - span.start <= 1500 else 1
    bin_w = span.px_per_frame / bins
    rows_y = {"user": AXIS_H, "assistant": AXIS_H + WAVE_H + 6}
    words_y = rows_y["assistant"] + WAVE_H + 8
    func_y = words_y + WORD_LANES * LANE_H + 6
    height = func_y + FUNCTION_LANES * LANE_H + 8
    top, bottom = AXIS_H - 4, height - 4
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{span.width:.0f}" height="{height}" '
           f'viewBox="0 0 {span.width:.0f} {height}" role="img" aria-label="Conversation timeline" '
           f'style="color:var(--body-text-color)" font-size="11">']

    # shaded regions: system prompt frames, and the silence appended after the recording
    rec_end = span.recording_start + r.input_frames
    if span.start < span.recording_start:
        out.append(_region(span.x(span.start), span.x(span.recording_start), top, bottom, "system prompt"))
    if rec_end < span.end:
        out.append(_region(span.x(rec_end), span.x(span.end), rows_y["user"], rows_y["user"] + WAVE_H,
                           "silence after your recording"))

    # frame grid and the time axis (seconds from the start of the recording)
    if span.px_per_frame >= 6:
        grid = "".join(f"M{span.x(p):.1f} {top}V{bottom}" for p in range(span.start, span.end + 1))
        out.append(f'<path d="{grid}" stroke="currentColor" stroke-opacity=".07" stroke-width="1"/>')
    step = 1 if (span.end - span.start) * fs <= 30 else 5
    t = float(np.ceil((span.start - span.recording_start) * fs / step) * step) + 0.0  # + 0.0: no "-0 s"
    while span.recording_start + t / fs <= span.end + 1e-6:
        x = span.x(span.recording_start + t / fs)
        out.append(f'<path d="M{x:.1f} {top}V{bottom}" stroke="currentColor" stroke-opacity=".25"/>'
                   f'<text x="{x + 2:.1f}" y="{AXIS_H - 10}" fill="currentColor" opacity=".7">{t:g} s</text>')
        t += step
    out.append(f'<text x="4" y="{AXIS_H - 10}" fill="currentColor" opacity=".7">time</text>')

    # waveforms
    for key, label, color, audio, rate, first in (
        ("user", "You", USER_COLOR, user_audio, user_rate, span.recording_start),
        ("assistant", "Assistant", ASSISTANT_COLOR, r.audio, r.sample_rate, r.first_frame),
    ):
        mid = rows_y[key] + WAVE_H / 2
        env = envelope(np.asarray(audio, np.float32), rate, fs, bins)
        out.append(f'<text x="4" y="{mid + 4:.0f}" fill="{color}" font-weight="600">{label}</text>'
                   f'<path d="{wave_path(env, span.x(first) + bin_w / 2, bin_w, mid, WAVE_H / 2 - 3)}" '
                   f'stroke="{color}" stroke-width="{max(bin_w * 0.75, 1):.2f}"/>')

    # turn markers of the assistant's text channel
    for frames, name, dash in ((answer.turn_starts, "turn starts", ""), (answer.turn_ends, "turn ends", "3 3")):
        for p in frames:
            x = span.x(p)
            out.append(f'<path d="M{x:.1f} {rows_y["assistant"]}V{func_y - 4}" stroke="{TURN_COLOR}" '
                       f'stroke-width="1.5" stroke-dasharray="{dash}"><title>{name} at '
                       f'{(p - span.recording_start) * fs:.2f} s (frame {p})</title></path>')

    # assistant words and function-channel tokens
    for pieces, y0, lanes, color, label in ((answer.text_pieces, words_y, WORD_LANES, "currentColor", "Words"),
                                            (answer.function_pieces, func_y, FUNCTION_LANES, FUNCTION_COLOR,
                                             "Function")):
        out.append(f'<text x="4" y="{y0 + 12}" fill="{color}" font-weight="600">{label}</text>')
        if not pieces:
            out.append(f'<text x="{LABEL_W}" y="{y0 + 12}" fill="currentColor" opacity=".45">(none)</text>')
        for p, lane in zip(pieces, pack_lanes(pieces, span.x, lanes)):
            seconds = (p.frame - span.recording_start) * fs
            out.append(f'<text x="{span.x(p.frame):.1f}" y="{y0 + 12 + lane * LANE_H}" fill="{color}">'
                       f'{html.escape(piece_label(p))}<title>{seconds:.2f} s · frame {p.frame} · id {p.token_id} '
                       f'{html.escape(p.token)}</title></text>')
    out.append("</svg>")
    legend = (f'<div style="font-size:.85em;opacity:.75;margin-top:4px">One column = one 80 ms frame. '
              f'<span style="color:{USER_COLOR}">■</span> your recording, '
              f'<span style="color:{ASSISTANT_COLOR}">■</span> the answer, '
              f'<span style="color:{TURN_COLOR}">│</span> assistant turn start / end (dashed), '
              f'<span style="color:{FUNCTION_COLOR}">■</span> function channel. Hover a word for its time and id.'
              f'</div>')
    return f'<div class="vc-timeline">{"".join(out)}</div>{legend}'


def _region(x0: float, x1: float, y0: float, y1: float, label: str) -> str:
    return (f'<rect x="{x0:.1f}" y="{y0}" width="{max(x1 - x0, 0):.1f}" height="{y1 - y0}" fill="currentColor" '
            f'fill-opacity=".05"/><text x="{x0 + 4:.1f}" y="{y1 - 4}" fill="currentColor" opacity=".45">'
            f'{label}</text>')


EMPTY_TIMELINE = ('<div class="vc-timeline" style="opacity:.6;padding:12px">The timeline appears here when an answer '
                  'is ready: your recording and the answer on one 80 ms axis, with every word where it was '
                  'spoken.</div>')


# ---------------------------------------------------------------------------------------------------------------
# timings and downloads
# ---------------------------------------------------------------------------------------------------------------
def timings_markdown(answer: eng.Answer, load_seconds: Optional[float]) -> str:
    r = answer.result
    stages = {k: v for k, v in r.timings.items() if k != "total"}  # the engine may report its own total
    total = r.timings.get("total") or sum(stages.values()) or answer.wall_seconds
    rows = [f"| {stage} | {seconds:.2f} | {100 * seconds / total:.0f}% |" for stage, seconds in stages.items()]
    lines = ["| Stage | Seconds | Share |", "|---|---:|---:|", *rows,
             f"| **total (wall)** | **{answer.wall_seconds:.2f}** | |", "",
             f"{len(r.text_tokens)} timeline frames of {1000 * r.frame_seconds:.0f} ms "
             f"({len(r.text_tokens) * r.frame_seconds:.2f} s): "
             + rtf_text(len(r.text_tokens) / max(answer.wall_seconds, 1e-9), r.frame_seconds) + "."]
    if load_seconds and load_seconds >= 0.1:
        lines.append(f"Model load (once per start): {load_seconds:.1f} s.")
    return "\n".join(lines)


def save_outputs(answer: eng.Answer, run_dir: Path, request: dict) -> tuple[Path, Path]:
    """answer.wav (16-bit PCM at the model's rate) and conversation.json (texts, per-frame ids, settings)."""
    r = answer.result
    run_dir.mkdir(parents=True, exist_ok=True)
    wav = write_wav(run_dir / "answer.wav", r.audio, r.sample_rate)
    record = {
        **request,
        "user_transcript": r.user_transcript,
        "assistant_text": r.text,
        "function_text": r.function_text,
        "frame_seconds": r.frame_seconds,
        "first_frame": r.first_frame,
        "prompt_frames": r.prompt_frames,
        "input_frames": r.input_frames,
        "text_tokens": np.asarray(r.text_tokens).tolist(),
        "function_tokens": np.asarray(r.function_tokens).tolist(),
        "audio_codes": np.asarray(r.audio_codes).tolist(),
        "text_pieces": [[p.frame, p.token_id, p.text] for p in answer.text_pieces],  # [frame, id, text]
        "function_pieces": [[p.frame, p.token_id, p.text] for p in answer.function_pieces],
        "answer_seconds": round(r.seconds, 3),
        "answer_sample_rate": r.sample_rate,
        "timings_s": r.timings,
        "wall_seconds": round(answer.wall_seconds, 3),
        "settings": r.settings,
    }
    js = run_dir / "conversation.json"
    js.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return wav, js


# ---------------------------------------------------------------------------------------------------------------
# the app
# ---------------------------------------------------------------------------------------------------------------
# (temperature, top-p, repetition penalty) of the text channel: NeMo's greedy search, NVIDIA's wrapper
GREEDY_TEXT = (0.0, 1.0, 1.0)
NVIDIA_TEXT = tuple(NVIDIA_SAMPLING[k] for k in ("text_temperature", "text_top_p", "text_repetition_penalty"))
# SPEC §7 point 13: the checkpoint's own EAR-TTS sampling (used unless the user overrides it)
CHECKPOINT_TTS = dict(tts_guidance_scale=0.2, tts_top_p=0.95, tts_noise_scale=0.001)


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


def load_examples() -> list[dict]:
    listing = ASSETS / "examples.json"
    return [e for e in json.loads(listing.read_text()) if (ASSETS / e["file"]).is_file()] if listing.is_file() else []


@dataclass(frozen=True)
class Question:
    """One Run: the recording (mono float32 at its own rate) and the settings it was asked with."""

    samples: np.ndarray
    rate: int
    system_prompt: str
    seed: int
    config: GenerationConfig
    input_name: str


class App:
    """The Gradio handlers around one engine."""

    OUTPUTS = ("status", "answer_audio", "transcript", "assistant", "function", "timeline", "timings", "downloads")

    def __init__(self, engine: eng.Engine, outputs: Path, demo_mode: bool = False):
        self.engine = engine
        self.outputs = outputs
        self.demo_mode = demo_mode

    def _frame(self, **values) -> tuple:
        """One yield: the named outputs changed, the others left as they are."""
        return tuple(values.get(k, gr.skip()) for k in self.OUTPUTS)

    def run(self, audio_path, system_prompt, seed, extra_seconds, max_extra_seconds, temperature, top_p,
            repetition_penalty, tts_override, tts_guidance, tts_top_p, tts_noise, turn_markers, reference,
            request: gr.Request = None) -> Iterator[tuple]:
        """Submit one conversation to the engine and stream its progress; the last yield has every output."""
        cleared = dict(answer_audio=None, transcript="", assistant="", function="", timeline=EMPTY_TIMELINE,
                       timings="No timings yet.", downloads=None)
        if not audio_path:
            yield self._frame(status=status_html("error", "No recording yet",
                                                 "Record with the microphone or drop an audio file first."))
            return
        try:
            samples, rate = read_audio(audio_path)
            config = generation_config(extra_seconds, max_extra_seconds, temperature, top_p, repetition_penalty,
                                       tts_override, tts_guidance, tts_top_p, tts_noise, turn_markers, reference)
            ask = Question(samples, rate, system_prompt or "", int(seed or 0), config, Path(audio_path).name)
        except (AudioInputError, ValueError, TypeError) as e:
            yield self._frame(status=status_html("error", "This recording cannot be used", str(e)), **cleared)
            return
        try:
            job = self.engine.submit(eng.Request(ask.samples, ask.rate, ask.system_prompt, ask.seed, ask.config),
                                     owner=getattr(request, "session_hash", None))
        except eng.EngineFull as e:
            yield self._frame(status=status_html("error", "The app is busy", str(e)))
            return
        try:
            yield self._frame(status=status_html("wait", "Queued"), **cleared)
            yield from self._follow(job, ask)
        finally:
            job.cancel()  # the browser went away or the event was cancelled: free the engine (no-op when finished)

    def _follow(self, job: eng.Job, ask: Question) -> Iterator[tuple]:
        """Render the job's events until it ends; progress at most 5 times a second."""
        position, running, last_shown, unshown = 0, False, 0.0, None
        while True:
            event = job.next_event(timeout=0.25)
            if event is None:  # nothing new; yield anyway: Gradio can only close (cancel) a generator at a yield
                if unshown is not None:
                    yield self._progress_frame(unshown)
                    unshown = None
                else:
                    yield self._frame() if running else self._frame(
                        status=waiting_status(position, self.engine.status()))
            elif event.kind == eng.QUEUED:
                position = event.position
                yield self._frame(status=waiting_status(position, self.engine.status()))
            elif event.kind == eng.STARTED:
                running = True
                yield self._frame(status=status_html("run", "Starting…", "", 0.0))
            elif event.kind == eng.PROGRESS:
                unshown = event
                if time.monotonic() - last_shown >= 0.2:
                    last_shown = time.monotonic()
                    yield self._progress_frame(event)
                    unshown = None
            elif event.kind == eng.DONE:
                yield self._finished(event.answer, ask, job.id)
                return
            elif event.kind == eng.CANCELLED:
                yield self._frame(status=status_html("cancelled", "Cancelled", event.message))
                return
            else:
                yield self._frame(status=status_html("error", "Something went wrong", event.message))
                return

    def _progress_frame(self, event: eng.Event) -> tuple:
        return self._frame(status=progress_status(event), assistant=event.update.text,
                           function=event.update.function_text)

    def _finished(self, answer: eng.Answer, ask: Question, job_id: int) -> tuple:
        r = answer.result
        request = {"app": "voicechat", "model": self.engine.name, "demo_model": self.demo_mode,
                   "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "input_file": ask.input_name,
                   "input_sample_rate": ask.rate, "input_seconds": round(len(ask.samples) / ask.rate, 3),
                   "system_prompt": ask.system_prompt, "seed": ask.seed, "generation_config": asdict(ask.config)}
        run_dir = self.outputs / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{job_id}-{secrets.token_hex(3)}"
        wav, js = save_outputs(answer, run_dir, request)
        return self._frame(status=done_status(answer), answer_audio=str(wav), transcript=r.user_transcript,
                           assistant=r.text, function=r.function_text,
                           timeline=timeline_html(answer, ask.samples, ask.rate),
                           timings=timings_markdown(answer, self.engine.status().load_seconds),
                           downloads=[str(wav), str(js)])

    def cancel(self, request: gr.Request = None) -> str:
        """Stop this browser session's job (a running one stops after its current frame)."""
        owner = getattr(request, "session_hash", None)
        if owner is not None and self.engine.cancel_owner(owner):
            return status_html("cancelled", "Cancelling…", "A running answer stops after its current 80 ms frame.")
        return gr.skip()

    def model_status(self) -> tuple[str, gr.Timer]:
        status = self.engine.status()
        settled = status.state in (eng.READY, eng.FAILED, eng.CLOSED)
        return model_status_html(status, self.engine.name), gr.Timer(active=not settled)


def constant(values: tuple):
    """An event handler that sets its outputs to ``values``."""
    return lambda: values


def buttons_busy() -> tuple[gr.Button, gr.Button]:
    """(Run, Cancel) while a conversation runs."""
    return gr.Button(interactive=False), gr.Button(interactive=True)


def buttons_idle() -> tuple[gr.Button, gr.Button]:
    return gr.Button(interactive=True), gr.Button(interactive=False)


def build_app(engine: eng.Engine, *, outputs: Path = DEFAULT_OUTPUTS, demo_mode: bool = False) -> gr.Blocks:
    """The Blocks UI. Gradio's upload and cache folders are put under ``outputs`` (before any component exists), so
    that, with ``allowed_paths=serve_paths(outputs)``, the app serves nothing but its outputs and the examples."""
    outputs = Path(outputs).resolve()
    outputs.mkdir(parents=True, exist_ok=True)
    os.environ["GRADIO_TEMP_DIR"] = str(outputs / "gradio")
    os.environ["GRADIO_EXAMPLES_CACHE"] = str(outputs / "gradio" / "examples")
    app = App(engine, outputs, demo_mode)

    with gr.Blocks(title="VoiceChat", analytics_enabled=False) as demo:
        gr.Markdown("# VoiceChat\nAsk a question out loud; NVIDIA's NemotronLabs-VoiceChat-11B answers in speech.")
        if demo_mode:
            gr.HTML('<div class="vc-banner"><b>Demo mode.</b> This is a tiny model with random weights, built '
                    'locally so you can try the interface without the download. <b>Its answers are noise</b>: '
                    'random words and a buzzing voice. Start the app without <code>--demo</code> for the real '
                    'model.</div>')
        model_line = gr.HTML(model_status_html(engine.status(), engine.name))
        with gr.Row(equal_height=False):
            with gr.Column(scale=5):
                audio_in = gr.Audio(sources=["upload", "microphone"], type="filepath", label="Your question",
                                    elem_id="vc-input")
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary", scale=3, elem_id="vc-run")
                    cancel_btn = gr.Button("Cancel", variant="stop", scale=1, interactive=False, elem_id="vc-cancel")
                preset = gr.Dropdown(list(PROMPT_PRESETS), value="NVIDIA default", label="Assistant persona",
                                     info="Fills in the system prompt; edit it freely.")
                prompt = gr.Textbox(NVIDIA_PROMPT, lines=3, max_lines=8, label="System prompt",
                                    info="Read by the model before your recording (one 80 ms step per token).")
                dice = gr.Button("New seed", size="sm", render=False)
                seed = gr.Number(0, precision=0, label="Seed", minimum=0, buttons=[dice],
                                 info="Same input + same seed = same answer. Another seed: another take of the voice.")
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
                                               info="Off: the checkpoint's own values.")
                    with gr.Row():
                        tts_guidance = gr.Slider(0, 2, value=CHECKPOINT_TTS["tts_guidance_scale"], step=0.05,
                                                 label="Guidance scale", interactive=False)
                        tts_top_p = gr.Slider(0.05, 1, value=CHECKPOINT_TTS["tts_top_p"], step=0.01,
                                              label="Top-p", interactive=False)
                        tts_noise = gr.Slider(0, 1, value=CHECKPOINT_TTS["tts_noise_scale"], step=0.001,
                                              label="Noise scale", interactive=False)
                    turn_markers = gr.Checkbox(False, label="Show turn markers (<|t|> / <$t$>) in the assistant text")
                    reference = gr.Checkbox(False, label="Reference mode: NVIDIA's offline semantics (fixed "
                                                         "length, system-prompt frames kept in the audio)")
                examples = load_examples()
                if examples:
                    gr.Examples([[str(ASSETS / e["file"])] for e in examples], inputs=[audio_in],
                                label="Example questions (a synthetic voice, espeak-ng)",
                                example_labels=[f'“{e["text"]}”  ({e["sample_rate"] / 1000:g} kHz, '
                                                f'{"stereo" if e["channels"] > 1 else "mono"})' for e in examples])
            with gr.Column(scale=6):
                status = gr.HTML(idle_status(), label="Status", elem_id="vc-status")
                answer_audio = gr.Audio(label="Answer", type="filepath", interactive=False, autoplay=True,
                                        elem_id="vc-answer")
                assistant = gr.Textbox(label="Assistant text", lines=3, max_lines=10, interactive=False,
                                       buttons=["copy"], elem_id="vc-assistant")
                transcript = gr.Textbox(label="Your words (transcript)", lines=2, max_lines=6, interactive=False,
                                        buttons=["copy"], elem_id="vc-transcript")
                function = gr.Textbox(label="Function channel", lines=1, max_lines=6, interactive=False,
                                      buttons=["copy"], placeholder="(tool-call tokens appear here)",
                                      elem_id="vc-function")
        with gr.Accordion("Timeline", open=True):
            timeline = gr.HTML(EMPTY_TIMELINE, label="Timeline", elem_id="vc-timeline")
        with gr.Row():
            with gr.Column():
                with gr.Accordion("Timings", open=False):
                    timings = gr.Markdown("No timings yet.", label="Timings")
            with gr.Column():
                downloads = gr.File(label="Downloads (answer WAV, conversation JSON)", file_count="multiple",
                                    interactive=False, elem_id="vc-downloads")
        with gr.Accordion("How to use", open=False):
            gr.Markdown(HOW_TO)
        with gr.Accordion("What this model can and cannot do", open=False):
            gr.Markdown(LIMITS)

        outputs_list = [status, answer_audio, transcript, assistant, function, timeline, timings, downloads]
        inputs_list = [audio_in, prompt, seed, extra, max_extra, temperature, top_p, repetition, tts_override,
                       tts_guidance, tts_top_p, tts_noise, turn_markers, reference]
        (run_btn.click(buttons_busy, None, [run_btn, cancel_btn], api_visibility="private", queue=False)
         .then(app.run, inputs_list, outputs_list, api_name="run", show_progress="hidden",
               concurrency_limit=MAX_WAITING + 1)
         .then(buttons_idle, None, [run_btn, cancel_btn], api_visibility="private", queue=False))
        cancel_btn.click(app.cancel, None, status, api_name="cancel", queue=False)
        preset.change(lambda name: PROMPT_PRESETS[name], preset, prompt, api_visibility="private", queue=False)
        dice.click(lambda: secrets.randbelow(2**31), None, seed, api_visibility="private", queue=False)
        for button, values in ((greedy_btn, GREEDY_TEXT), (nvidia_btn, NVIDIA_TEXT)):
            button.click(constant(values), None, [temperature, top_p, repetition], api_visibility="private",
                         queue=False)
        tts_override.change(lambda on: [gr.Slider(interactive=on)] * 3, tts_override,
                            [tts_guidance, tts_top_p, tts_noise], api_visibility="private", queue=False)
        timer = gr.Timer(1.0)
        timer.tick(app.model_status, None, [model_line, timer], api_visibility="private", queue=False)
        demo.load(app.model_status, None, [model_line, timer], api_visibility="private", queue=False)
    demo.queue(max_size=2 * MAX_WAITING, default_concurrency_limit=4)
    return demo


def serve_paths(outputs: Path) -> list[str]:
    """All the app serves: its outputs folder (Gradio's uploads and cache live there) and the example WAVs."""
    return [str(Path(outputs).resolve()), *(str(ASSETS / e["file"]) for e in load_examples())]


def launch(demo: gr.Blocks, outputs: Path, **kwargs):
    return demo.launch(allowed_paths=serve_paths(outputs), run_history=False, max_file_size="200mb", css=CSS,
                       theme=gr.themes.Soft(primary_hue="orange", secondary_hue="blue"), **kwargs)


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
    p.add_argument("--outputs", type=Path, default=DEFAULT_OUTPUTS,
                   help="folder for answers, downloads and uploads (default: ./outputs next to app.py)")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if args.demo:
        loader = eng.demo_model(tempfile.mkdtemp(prefix="voicechat-demo-"))
        name = "tiny random-weight demo model"
        print("Demo mode: a tiny model with random weights. Its answers are noise; it shows how the app works.")
    else:
        loader = eng.hub_model(args.model, offline=args.offline)
        name = args.model
        print(f"Model: {name} (downloaded on first use into the Hugging Face cache; progress is shown below "
              "and in the app).")
    engine = eng.Engine(loader, name=name, max_waiting=MAX_WAITING).start()
    demo = build_app(engine, outputs=args.outputs, demo_mode=args.demo)
    launch(demo, args.outputs, server_name=args.host, server_port=args.port, share=args.share)


if __name__ == "__main__":
    sys.exit(main())
