"""The conversation timeline: the recording and the answer on one axis of model positions (80 ms each), each of the
assistant's words and function-channel tokens at the position where the model emitted it, turn starts and ends, and
each tool call on the function row: the positions of the call and of the response the model read, named.

HTML and inline SVG, no plotting library:
- an overview of the whole conversation that fits the page width, with a window marking the part shown below it;
- the detail, wide enough for every label, that scrolls sideways (a click or a drag in the overview moves it there);
- row labels in a column of their own, so they stay in view while the detail scrolls;
- labels packed into as many lanes as they need, each drawn at exactly the width it was packed with (SVG
  ``textLength``), so no two overlap whatever the font.

``SCRIPT`` ties the overview to the detail in the browser (Gradio's ``gr.HTML(js_on_load=...)``); ``CSS`` lays it out.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


USER_COLOR, ASSISTANT_COLOR, FUNCTION_COLOR, TURN_COLOR = "#3b82f6", "#f97316", "#a855f7", "#16a34a"
LABEL_W = 92  # the row-label column (px)
AXIS_H, WAVE_H, LANE_H, GAP = 26, 56, 17, 6  # detail rows (px)
OVERVIEW_WAVE_H, OVERVIEW_MARKS_H = 22, 8  # overview rows (px)
FONT_PX = 11
LABEL_GAP = 4  # px between two labels of one lane
MIN_PX_PER_FRAME, MAX_PX_PER_FRAME = 6.0, 40.0
FILL_PX = 1000.0  # a short conversation's detail fills about this width
PREFERRED_LANES = 3  # frames are widened (up to MAX_PX_PER_FRAME) until the words fit in this many lanes
# character widths at the label font, in ems of a sans-serif (generous, so that textLength rarely squeezes a label)
NARROW, SEMI, WIDE, CAPITAL, OTHER = 0.3, 0.4, 0.9, 0.72, 0.6
CHAR_EM = {**dict.fromkeys("iljI.,:;'|!`", NARROW), **dict.fromkeys("ftr()[]{} \"-", SEMI),
           **dict.fromkeys("mwMW@%", WIDE)}


# ---------------------------------------------------------------------------------------------------------------
# pure helpers
# ---------------------------------------------------------------------------------------------------------------
def envelope(x: np.ndarray, rate: int, frame_seconds: float, bins_per_frame: int) -> np.ndarray:
    """Peak |x| per 1/bins_per_frame of a timeline frame. [N] -> [ceil(N / hop)]"""
    hop = rate * frame_seconds / bins_per_frame
    if x.size == 0:
        return np.zeros(0, np.float32)
    starts = np.unique(np.floor(np.arange(0, x.size, hop)).astype(np.int64))
    return np.maximum.reduceat(np.abs(x), starts).astype(np.float32)


def bar_path(env: np.ndarray, x0: float, bin_w: float, mid: float, half_h: float) -> str:
    """Vertical bars, one per envelope bin, as one SVG path, scaled to the waveform's own peak."""
    if env.size == 0:
        return ""
    heights = np.maximum(env / max(float(env.max()), 0.1) * half_h, 0.5)
    return "".join(f"M{x0 + i * bin_w:.1f} {mid - h:.1f}V{mid + h:.1f}" for i, h in enumerate(heights))


def area_path(env: np.ndarray, x0: float, mid: float, half_h: float) -> str:
    """The envelope as one closed shape around ``mid`` (one unit of x per bin): it stays a shape when the overview
    is stretched to the page width, where bars would blur."""
    if env.size == 0:
        return ""
    h = np.maximum(env / max(float(env.max()), 0.1) * half_h, 0.3)
    top = " ".join(f"{x0 + i:.0f} {mid - v:.2f} {x0 + i + 1:.0f} {mid - v:.2f}" for i, v in enumerate(h))
    bottom = " ".join(f"{x0 + i + 1:.0f} {mid + v:.2f} {x0 + i:.0f} {mid + v:.2f}" for i, v in reversed(list(
        enumerate(h))))
    return f"M{top} {bottom}Z"


def heard_recording(audio: np.ndarray, rate: int, frame_seconds: float, start: int, held: set[int]) -> np.ndarray:
    """The recording as the positions from ``start`` heard it: a frame of silence at each held position (a tool
    exchange's: the user's frames waited, docs/tools.md §5), the rest of the recording after it."""
    hop = rate * frame_seconds
    pieces, taken = [], 0
    for k, p in enumerate(sorted(h - start for h in held if h >= start)):
        cut = round((p - k) * hop)  # the recording's sample that the position after the held ones heard
        if cut >= audio.size:
            break
        pieces += [audio[taken:cut], np.zeros(round((p + 1) * hop) - round(p * hop), np.float32)]
        taken = cut
    return np.concatenate([*pieces, audio[taken:]])


def piece_label(piece) -> str:
    """What a token shows: its text, "␣" for a space alone, or the tokenizer's name for a token without text (a
    special token)."""
    return piece.text.strip() or ("␣" if piece.text else piece.token)


def label_width(label: str) -> float:
    """A label's width in px at the label font (it is drawn at exactly this width)."""
    return FONT_PX * sum(CHAR_EM.get(c, CAPITAL if c.isupper() else OTHER) for c in label) + 1


def pack_lanes(starts: Sequence[float], widths: Sequence[float]) -> list[int]:
    """A lane per label (labels in order of their start): the first lane that is free at its start, else a new one.
    Greedy first-fit on intervals sorted by start uses the fewest lanes; no two labels of a lane overlap."""
    ends: list[float] = []
    lanes = []
    for x, w in zip(starts, widths):
        lane = next((i for i, end in enumerate(ends) if end <= x), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = x + w + LABEL_GAP
        lanes.append(lane)
    return lanes


def px_per_frame_for_lanes(pieces: Sequence, lanes: int) -> float:
    """The frame width at which each label ends before the label ``lanes`` places later starts: then ``lanes``
    lanes hold them all."""
    need = [(label_width(piece_label(a)) + LABEL_GAP) / max(b.frame - a.frame, 1)
            for a, b in zip(pieces, pieces[lanes:])]
    return max(need, default=0.0)


def nice_step(seconds: float, most: int) -> float:
    """The smallest of 1, 2, 5, 10, 15, 30 s, 1, 2, 5, 10 min ... that puts at most ``most`` ticks on ``seconds``."""
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 3600):
        if seconds / step <= most:
            return float(step)
    return 3600.0 * math.ceil(seconds / 3600 / most)


def tick_times(first_s: float, last_s: float, step: float) -> list[float]:
    """Multiples of ``step`` in [first_s, last_s] (+ 0.0: never "-0 s")."""
    return [k * step + 0.0 for k in range(math.ceil(first_s / step - 1e-9), math.floor(last_s / step + 1e-9) + 1)]


# ---------------------------------------------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Span:
    """Positions [start, end) on the axis; the recording starts at ``recording_start`` (its time 0)."""

    start: int
    end: int
    recording_start: int
    frame_seconds: float
    px_per_frame: float

    @classmethod
    def fitting(cls, start: int, end: int, recording_start: int, frame_seconds: float, label_px: float) -> "Span":
        """Frames wide enough for the labels (up to MAX_PX_PER_FRAME); a short conversation fills FILL_PX."""
        fill = min(24.0, FILL_PX / max(end - start, 1))
        ppf = min(max(MIN_PX_PER_FRAME, fill, label_px), MAX_PX_PER_FRAME)
        return cls(start, end, recording_start, frame_seconds, ppf)

    @property
    def frames(self) -> int:
        return self.end - self.start

    def x(self, position: float) -> float:
        """Detail x of a position's left edge."""
        return (position - self.start) * self.px_per_frame

    def seconds(self, position: float) -> float:
        """Time of a position, from the start of the recording."""
        return (position - self.recording_start) * self.frame_seconds

    def position(self, seconds: float) -> float:
        return self.recording_start + seconds / self.frame_seconds

    @property
    def width(self) -> float:
        return self.x(self.end) + 12


@dataclass(frozen=True)
class Channel:
    """One row of labels: the pieces, the lane of each, where the row starts; on the function row also the tool
    calls (voicechat.tools.ToolCall), each in a lane of its own above the tokens' lanes."""

    name: str
    color: str
    pieces: tuple
    lanes: tuple
    y: float
    calls: tuple = ()
    call_lanes: tuple = ()

    @property
    def call_rows(self) -> int:
        return max(self.call_lanes, default=-1) + 1

    @property
    def height(self) -> float:
        return (self.call_rows + max(max(self.lanes, default=0) + 1, 1)) * LANE_H

    def lane_y(self, lane: int) -> float:
        """The top of a token lane (below the calls' lanes)."""
        return self.y + (self.call_rows + lane) * LANE_H


def call_label(call) -> str:
    return call.name or "unreadable call"


def channels(answer, span: Span, top: float) -> list[Channel]:
    calls = tuple(answer.result.tool_calls)
    call_lanes = pack_lanes([span.x(c.call_start) for c in calls], [label_width(call_label(c)) for c in calls])
    out, y = [], top
    for name, color, pieces, tools in (("Words", "currentColor", answer.text_pieces, ()),
                                       ("Function", FUNCTION_COLOR, answer.function_pieces, calls)):
        lanes = pack_lanes([span.x(p.frame) for p in pieces], [label_width(piece_label(p)) for p in pieces])
        out.append(Channel(name, color, tuple(pieces), tuple(lanes), y, tools,
                           tuple(call_lanes) if tools else ()))
        y += out[-1].height + GAP
    return out


# ---------------------------------------------------------------------------------------------------------------
# drawing
# ---------------------------------------------------------------------------------------------------------------
def timeline_html(answer, user_audio: np.ndarray, user_rate: int) -> str:
    """The overview, the row labels and the scrolling detail of one answer (``voicechat.answer.Answer``), with
    the user's recording (mono samples at ``user_rate``), and a legend."""
    r = answer.result
    label_px = max(px_per_frame_for_lanes(answer.text_pieces, PREFERRED_LANES),
                   px_per_frame_for_lanes(answer.function_pieces, PREFERRED_LANES))
    span = Span.fitting(min(r.first_frame, r.prompt_frames), r.first_frame + len(r.text_tokens), r.prompt_frames,
                        r.frame_seconds, label_px)
    rows = {"user": AXIS_H, "assistant": AXIS_H + WAVE_H + GAP}
    rows_end = rows["assistant"] + WAVE_H + GAP + 2
    chans = channels(answer, span, rows_end)
    height = chans[-1].y + chans[-1].height + 4
    heard = heard_recording(np.asarray(user_audio, np.float32), user_rate, r.frame_seconds, span.recording_start,
                            set(r.held_positions))
    waves = (("user", "You", USER_COLOR, heard, user_rate, span.recording_start),
             ("assistant", "Assistant", ASSISTANT_COLOR, np.asarray(r.audio, np.float32), r.sample_rate,
              r.first_frame))
    labels = [(AXIS_H - 10, "time", "currentColor", ".7")]
    labels += [(rows[key] + WAVE_H / 2 + 4, name, color, "1") for key, name, color, *_ in waves]
    labels += [(c.y + 12, c.name, c.color, "1") for c in chans]
    label_svg = (f'<svg class="vc-tl-labels" width="{LABEL_W}" height="{height:.0f}" font-size="{FONT_PX}" '
                 f'style="color:var(--body-text-color)">'
                 + "".join(f'<text x="4" y="{y:.0f}" fill="{color}" font-weight="600" opacity="{opacity}">{name}'
                           f'</text>' for y, name, color, opacity in labels) + "</svg>")
    return (f'<div class="vc-tl" data-frames="{span.frames}" data-px-per-frame="{span.px_per_frame:.4f}" '
            f'data-start="{span.start}">'
            f'<div class="vc-tl-head">Overview</div>{overview(answer, span, waves)}{label_svg}'
            f'<div class="vc-tl-scroll">{detail(answer, span, waves, rows, chans, height)}</div></div>'
            + legend(span.frame_seconds, bool(r.tool_calls)))


def overview(answer, span: Span, waves) -> str:
    """The whole conversation in the page width: one SVG unit per frame, stretched (preserveAspectRatio="none");
    the time labels are HTML under it, placed in percent."""
    r, n = answer.result, span.frames
    mids = {"user": OVERVIEW_WAVE_H / 2, "assistant": OVERVIEW_WAVE_H * 1.5 + 2}
    marks_y = 2 * OVERVIEW_WAVE_H + 4
    h = marks_y + OVERVIEW_MARKS_H
    out = [f'<svg class="vc-tl-mini" viewBox="0 0 {n} {h}" preserveAspectRatio="none" width="100%" height="{h}" '
           f'role="img" aria-label="Overview of the whole conversation">']
    out += shading(span, r, lambda p: p - span.start, 0, h, (0, OVERVIEW_WAVE_H), labels=False)
    for key, _, color, audio, rate, first in waves:
        env = envelope(audio, rate, span.frame_seconds, 1)
        out.append(f'<path d="{area_path(env, first - span.start, mids[key], OVERVIEW_WAVE_H / 2 - 1)}" '
                   f'fill="{color}"/>')
    for pieces, color in ((answer.text_pieces, "currentColor"), (answer.function_pieces, FUNCTION_COLOR)):
        if pieces:
            marks = "".join(f"M{p.frame - span.start + 0.5:.1f} {marks_y}V{h}" for p in pieces)
            out.append(f'<path d="{marks}" stroke="{color}" stroke-opacity=".6" vector-effect="non-scaling-stroke"/>')
    for call in r.tool_calls:  # the whole exchange, call and response, on the marks row
        out.append(f'<rect x="{call.call_start - span.start}" y="{marks_y}" '
                   f'width="{exchange_end(call) - call.call_start}" height="{OVERVIEW_MARKS_H}" '
                   f'fill="{FUNCTION_COLOR}" fill-opacity=".45"/>')
    for frames, dash in ((answer.turn_starts, ""), (answer.turn_ends, "3 3")):
        for p in frames:
            out.append(f'<path d="M{p - span.start} 0V{h}" stroke="{TURN_COLOR}" stroke-width="1.5" '
                       f'stroke-dasharray="{dash}" vector-effect="non-scaling-stroke"/>')
    shown = min(n, FILL_PX / span.px_per_frame)  # until the browser measures the detail's width
    out.append(f'<rect class="vc-tl-window" x="0" y="0" width="{shown:.1f}" height="{h}" fill="currentColor" '
               f'fill-opacity=".08" stroke="currentColor" stroke-opacity=".5" vector-effect="non-scaling-stroke"/>')
    out.append("</svg>")
    total_s = n * span.frame_seconds
    ticks = "".join(f'<span style="left:{100 * (span.position(t) - span.start) / n:.3f}%">{t:g} s</span>'
                    for t in tick_times(span.seconds(span.start), span.seconds(span.end), nice_step(total_s, 10)))
    return f'<div class="vc-tl-overview">{"".join(out)}<div class="vc-tl-ticks">{ticks}</div></div>'


def shading(span: Span, r, x, top: float, bottom: float, user_row: tuple, labels: bool) -> list[str]:
    """The system prompt's positions (reference mode keeps them) and the silence appended after the recording;
    ``x`` maps a position to the drawing's x."""
    out = []
    rec_end = span.recording_start + r.input_frames
    for p in sorted(set(r.held_positions)):  # the recording's frames that waited came later
        rec_end += p < rec_end
    if span.start < span.recording_start:
        out.append(region(x(span.start), x(span.recording_start), top, bottom, "system prompt" if labels else ""))
    if rec_end < span.end:
        out.append(region(x(rec_end), x(span.end), *user_row, "silence after your recording" if labels else ""))
    return out


def region(x0: float, x1: float, y0: float, y1: float, label: str) -> str:
    text = f'<text x="{x0 + 4:.1f}" y="{y1 - 4}" fill="currentColor" opacity=".45">{label}</text>' if label else ""
    return (f'<rect x="{x0:.1f}" y="{y0}" width="{max(x1 - x0, 0):.1f}" height="{y1 - y0}" fill="currentColor" '
            f'fill-opacity=".05"/>{text}')


def detail(answer, span: Span, waves, rows: dict, chans: list[Channel], height: float) -> str:
    r, fs = answer.result, span.frame_seconds
    top, bottom = AXIS_H - 4, height - 4
    out = [f'<svg class="vc-tl-detail" xmlns="http://www.w3.org/2000/svg" width="{span.width:.0f}" '
           f'height="{height:.0f}" role="img" aria-label="Conversation timeline" font-size="{FONT_PX}">']
    out += shading(span, r, span.x, top, bottom, (rows["user"], rows["user"] + WAVE_H), labels=True)
    grid = "".join(f"M{span.x(p):.1f} {top}V{bottom}" for p in range(span.start, span.end + 1))
    out.append(f'<path d="{grid}" stroke="currentColor" stroke-opacity=".07" stroke-width="1"/>')
    step = 1.0 if span.px_per_frame / fs >= 50 else 5.0  # a label every 50 px or more
    for t in tick_times(span.seconds(span.start), span.seconds(span.end), step):
        x = span.x(span.position(t))
        out.append(f'<path d="M{x:.1f} {top}V{bottom}" stroke="currentColor" stroke-opacity=".25"/>'
                   f'<text x="{x + 2:.1f}" y="{AXIS_H - 10}" fill="currentColor" opacity=".7">{t:g} s</text>')
    bins = 4 if span.frames <= 1500 else 1
    bin_w = span.px_per_frame / bins
    for key, _, color, audio, rate, first in waves:
        mid = rows[key] + WAVE_H / 2
        env = envelope(audio, rate, fs, bins)
        out.append(f'<path d="{bar_path(env, span.x(first) + bin_w / 2, bin_w, mid, WAVE_H / 2 - 3)}" '
                   f'stroke="{color}" stroke-width="{max(bin_w * 0.75, 1):.2f}"/>')
    for frames, name, dash in ((answer.turn_starts, "turn starts", ""), (answer.turn_ends, "turn ends", "3 3")):
        for p in frames:
            out.append(f'<path d="M{span.x(p):.1f} {rows["assistant"]}V{bottom}" stroke="{TURN_COLOR}" '
                       f'stroke-width="1.5" stroke-dasharray="{dash}"><title>{name} at {span.seconds(p):.2f} s '
                       f'(frame {p})</title></path>')
    for c in chans:
        out += [tool_call(call, lane, c, span) for call, lane in zip(c.calls, c.call_lanes)]
        if not c.pieces:
            out.append(f'<text x="4" y="{c.lane_y(0) + 12}" fill="currentColor" opacity=".45">(none)</text>')
        for p, lane in zip(c.pieces, c.lanes):
            label = piece_label(p)
            out.append(f'<text class="vc-tl-word" x="{span.x(p.frame):.1f}" y="{c.lane_y(lane) + 12}" '
                       f'fill="{c.color}" textLength="{label_width(label):.1f}" lengthAdjust="spacingAndGlyphs">'
                       f'{html.escape(label)}<title>{span.seconds(p.frame):.2f} s · frame {p.frame} · id '
                       f'{p.token_id} {html.escape(p.token)}</title></text>')
    out.append("</svg>")
    return "".join(out)


def exchange_end(call) -> int:
    """One past the last position of a call's exchange that exists: the response's, else the call's (a run that
    ended before the response)."""
    return call.injection_end if call.injection_end is not None else call.call_end + 1


def tool_call(call, lane: int, c: Channel, span: Span) -> str:
    """One tool call on the function row: the call's positions (SOTC..EOTC) solid and the response's (the positions
    that read it) light, shaded through the row, named in the call's lane; hover for the arguments and the result."""
    top, bottom = c.y, c.y + c.height
    bar_y = c.y + lane * LANE_H + 2
    parts = [(call.call_start, call.call_end + 1, ".45", "vc-tl-call")]
    if call.injection_start is not None:
        parts.append((call.injection_start, call.injection_end, ".18", "vc-tl-response"))
    out = [f'<g class="vc-tl-tool" data-name="{html.escape(call.name)}" data-call-start="{call.call_start}" '
           f'data-call-end="{call.call_end}" data-injection-start="{none_as_empty(call.injection_start)}" '
           f'data-injection-end="{none_as_empty(call.injection_end)}">']
    for start, end, opacity, kind in parts:
        x, width = span.x(start), span.x(end) - span.x(start)
        out.append(f'<rect x="{x:.1f}" y="{top}" width="{width:.1f}" height="{bottom - top}" fill="{FUNCTION_COLOR}" '
                   f'fill-opacity=".06"/><rect class="{kind}" x="{x:.1f}" y="{bar_y}" width="{width:.1f}" '
                   f'height="{LANE_H - 4}" rx="3" fill="{FUNCTION_COLOR}" fill-opacity="{opacity}"/>')
    label, lines = call_label(call), "\n".join(call_lines(call, span.recording_start, span.frame_seconds))
    out.append(f'<text x="{span.x(call.call_start) + 2:.1f}" y="{bar_y + LANE_H - 7}" fill="currentColor" '
               f'font-weight="600" textLength="{label_width(label):.1f}" lengthAdjust="spacingAndGlyphs">'
               f'{html.escape(label)}</text><title>{html.escape(lines)}</title></g>')
    return "".join(out)


def none_as_empty(value) -> str:
    return "" if value is None else str(value)


def call_lines(call, recording_start: int, frame_seconds: float) -> list[str]:
    """Two lines on one tool call (voicechat.tools.ToolCall), with the Talk live tab's arrows: the call at its time
    (from the start of the recording) and positions, then its result or error, how long the tool ran and where the
    model read the response."""
    name = call_label(call)
    arguments = json.dumps(call.arguments, ensure_ascii=False) if call.arguments is not None else "?"
    at = (call.call_start - recording_start) * frame_seconds
    lines = [f"→ {name}({arguments}) at {at:.2f} s (frames {call.call_start}–{call.call_end})"]
    ran = f"ran {call.seconds:.3f} s" if call.seconds is not None else "not run"
    read = (f"; read by the model at frames {call.injection_start}–{call.injection_end - 1}"
            if call.injection_start is not None else "")
    if call.error is not None:
        lines.append(f"✗ {name}: {call.error} ({ran}{read})")
    elif call.seconds is None:
        lines.append(f"… {name} is running")
    else:
        lines.append(f"← {name}: {json.dumps(call.result, ensure_ascii=False)} ({ran}{read})")
    return lines


def legend(frame_seconds: float, tools: bool = False) -> str:
    calls = (f'<span style="color:{FUNCTION_COLOR}">▬</span> a tool call (solid) and the response the model read '
             f'(light), named; hover for the arguments and the result. ' if tools else "")
    return (f'<div class="vc-tl-legend">One column = one {1000 * frame_seconds:.0f} ms frame. '
            f'<span style="color:{USER_COLOR}">■</span> your recording, '
            f'<span style="color:{ASSISTANT_COLOR}">■</span> the answer, '
            f'<span style="color:{TURN_COLOR}">│</span> assistant turn start / end (dashed), '
            f'<span style="color:{FUNCTION_COLOR}">■</span> function channel. {calls}A long conversation scrolls '
            f'sideways: click or drag in the overview to move there. Hover a word for its time and id.</div>')


EMPTY = ('<div class="vc-tl-empty">The timeline appears here when an answer is ready: your recording and the answer '
         'on one 80 ms axis, with every word where it was spoken.</div>')

CSS = """
.vc-tl {display: grid; grid-template-columns: %dpx minmax(0, 1fr); align-items: start; color: var(--body-text-color);}
.vc-tl-head {font-weight: 600; font-size: 11px; padding: 4px; opacity: .7;}
.vc-tl-overview {position: relative; cursor: pointer; user-select: none; touch-action: none; padding-bottom: 16px;
                 margin-bottom: 6px; border-bottom: 1px solid var(--border-color-primary);}
.vc-tl-mini {display: block;}
.vc-tl-ticks span {position: absolute; bottom: 0; font-size: 10px; opacity: .6; transform: translateX(-50%%);}
.vc-tl-scroll {overflow-x: auto; overflow-y: hidden;}
.vc-tl svg text {font-family: ui-sans-serif, system-ui, sans-serif;}
.vc-tl-legend {font-size: .85em; opacity: .75; margin-top: 4px;}
.vc-tl-empty {opacity: .6; padding: 12px;}
.vc-tl-fits .vc-tl-head, .vc-tl-fits .vc-tl-overview {display: none;}
""" % LABEL_W

# gr.HTML(js_on_load=SCRIPT): `element` is the component (its content is replaced with each new value; listeners on
# it stay), `watch` runs a callback after a new value is drawn.
SCRIPT = """
const parts = () => {
  const root = element.querySelector('.vc-tl');
  if (!root) return null;
  return {scroll: root.querySelector('.vc-tl-scroll'), mini: root.querySelector('.vc-tl-mini'),
          win: root.querySelector('.vc-tl-window'), ppf: +root.dataset.pxPerFrame, frames: +root.dataset.frames};
};
const sync = () => {  // the overview's window = the part of the detail in view; no overview when all is in view
  const p = parts();
  if (!p) return;
  p.scroll.parentElement.classList.toggle('vc-tl-fits', p.scroll.scrollWidth <= p.scroll.clientWidth);
  p.win.setAttribute('x', p.scroll.scrollLeft / p.ppf);
  p.win.setAttribute('width', Math.min(p.frames, p.scroll.clientWidth / p.ppf));
};
const moveTo = (event) => {  // centre the detail on the overview's point under the pointer
  const p = parts();
  const box = p.mini.getBoundingClientRect();
  const frame = (event.clientX - box.left) / box.width * p.frames;
  p.scroll.scrollLeft = frame * p.ppf - p.scroll.clientWidth / 2;
  sync();
};
let dragging = false;
element.addEventListener('pointerdown', (event) => {
  if (!event.target.closest('.vc-tl-overview')) return;
  dragging = true;
  event.preventDefault();
  moveTo(event);
});
window.addEventListener('pointermove', (event) => { if (dragging) moveTo(event); });
window.addEventListener('pointerup', () => { dragging = false; });
element.addEventListener('scroll', sync, true);  // scroll does not bubble: listen in the capture phase
window.addEventListener('resize', sync);
watch('value', sync);
sync();
"""
