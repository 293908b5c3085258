"""voicechat/webui/timeline.py: the conversation timeline's drawing (envelopes, lanes, the axis, the overview and the
detail) on hand-made answers. tests/test_browser.py draws it in a real browser (collisions, scrolling)."""

from __future__ import annotations

import html as html_module
import re

import numpy as np
import pytest

from voicechat.answer import Answer, Piece
from voicechat.result import Result
from voicechat.webui import timeline as tl


def test_envelope_is_the_peak_of_each_bin():
    x = np.array([0.1, -0.5, 0.2, 0.3, -0.9, 0.0, 0.4], np.float32)  # rate 25, 80 ms frame = 2 samples per bin
    assert tl.envelope(x, 25, 0.08, 1).tolist() == pytest.approx([0.5, 0.3, 0.9, 0.4])
    assert tl.envelope(np.zeros(0, np.float32), 16000, 0.08, 4).size == 0


def test_envelope_of_a_fractional_hop_stays_on_the_frame_grid():
    rate = 11025  # 882 samples per 80 ms frame, 220.5 per quarter frame
    x = np.zeros(rate * 8, np.float32)
    x[round(73 * 0.08 * rate)] = 1.0  # an impulse at frame 73
    env = tl.envelope(x, rate, 0.08, 4)
    assert np.flatnonzero(env).tolist() == [73 * 4] and env.size == 8 / 0.08 * 4


def test_lanes_never_overlap_and_are_as_few_as_possible():
    # intervals [x, x + w + gap): 0-14, 5-19, 10-24 overlap pairwise (3 lanes); 15 fits after the first, 20 after
    # the second
    starts, widths = [0, 5, 10, 15, 20], [10] * 5
    assert tl.pack_lanes(starts, widths) == [0, 1, 2, 0, 1]
    assert tl.pack_lanes([0, 100, 200], [50, 50, 50]) == [0, 0, 0]
    assert tl.pack_lanes([], []) == []


def test_label_widths_grow_with_wide_letters():
    assert tl.label_width("ill") < tl.label_width("abc") < tl.label_width("MWM")
    assert tl.label_width("") == 1


@pytest.mark.parametrize("seconds, most, step", [(3, 10, 1), (25, 10, 5), (60, 10, 10), (600, 10, 60),
                                                 (7200, 10, 1200)])
def test_tick_steps(seconds, most, step):
    assert tl.nice_step(seconds, most) == step


def test_tick_times_are_the_multiples_in_range():
    assert tl.tick_times(-0.4, 2.1, 1.0) == [0.0, 1.0, 2.0]
    assert tl.tick_times(-5.0, 5.0, 5.0) == [-5.0, 0.0, 5.0]
    assert "-0" not in str(tl.tick_times(-0.9, 0.5, 1.0))


def scripted_answer(first_frame=5, prompt_frames=5, input_frames=10, frames=30, words=None) -> Answer:
    """A hand-made answer: two words at frames 20 and 23, a function token at 22, a turn from 19 to 25."""
    text = np.full(frames, 12)
    result = Result(text="Hi you", function_text="f", user_transcript="hello", audio=np.zeros(frames * 1764,
                    np.float32), sample_rate=22050, text_tokens=text, function_tokens=text, audio_codes=np.zeros(
                    (frames, 31)), first_frame=first_frame, prompt_frames=prompt_frames, input_frames=input_frames,
                    frame_seconds=0.08, timings={"frames": 1.5, "codec": 0.5, "total": 2.0})
    words = words or (Piece(20, 101, "Hi", "Hi"), Piece(23, 102, " you", "Ġyou"))
    return Answer(result, text_pieces=tuple(words), function_pieces=(Piece(22, 7, "", "<tool & call>"),),
                      turn_starts=(19,), turn_ends=(25,), wall_seconds=2.4)


def words_of(html: str) -> list[tuple[float, float, float, str]]:
    """(x, y, drawn width, label) of every word and function-token label of the detail."""
    return [(float(x), float(y), float(w), label) for x, y, w, label in re.findall(
        r'<text class="vc-tl-word" x="([\d.]+)" y="([\d.]+)" [^>]*textLength="([\d.]+)"[^>]*>([^<]*)<title>', html)]


def test_words_and_function_tokens_sit_at_their_frames():
    html = tl.timeline_html(scripted_answer(), np.zeros(16000, np.float32), 16000)
    ppf = float(re.search(r'data-px-per-frame="([\d.]+)"', html).group(1))
    assert ppf == 24.0  # 30 frames fill 720 px (24 px a frame at most)
    placed = {label: x for x, _, _, label in words_of(html)}
    assert placed == {"Hi": 15 * ppf, "you": 18 * ppf, "&lt;tool &amp; call&gt;": 17 * ppf}  # frame - first (5)
    assert "1.20 s · frame 20 · id 101" in html  # (20 - 5) * 80 ms after the recording starts
    assert "turn starts at 1.12 s (frame 19)" in html and "turn ends at 1.60 s (frame 25)" in html
    assert "silence after your recording" in html and "system prompt" not in html


def test_the_system_prompt_frames_are_shaded_in_reference_mode():
    html = tl.timeline_html(scripted_answer(first_frame=0), np.zeros(1600, np.float32), 16000)
    assert "system prompt" in html
    assert ">0 s<" in html and ">-0 s<" not in html  # seconds count from the start of the recording
    assert ">-0.4 s<" not in html and ">-1 s<" not in html  # the prompt's 5 frames (0.4 s) hold no whole second


def test_the_recording_waits_through_the_held_positions():
    audio = np.arange(1, 11, dtype=np.float32)  # 5 frames of 2 samples (rate 25, 80 ms frames)
    heard = tl.heard_recording(audio, 25, 0.08, 5, {3, 7, 8, 40})  # 3: the prompt's; 40: after the recording
    assert heard.tolist() == [1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 7, 8, 9, 10]
    assert tl.heard_recording(audio, 25, 0.08, 5, set()).tolist() == audio.tolist()


def test_the_row_labels_are_a_column_of_their_own():
    html = tl.timeline_html(scripted_answer(), np.zeros(16000, np.float32), 16000)
    labels = re.search(r'<svg class="vc-tl-labels".*?</svg>', html).group(0)
    assert [t for t in re.findall(r">([^<>]+)</text>", labels)] == ["time", "You", "Assistant", "Words", "Function"]
    scroller = re.search(r'<div class="vc-tl-scroll">(.*?)</div>', html).group(1)
    assert ">You<" not in scroller and ">Words<" not in scroller  # not in the part that scrolls


def long_answer(seconds: float = 60.0) -> Answer:
    """A word at every frame of a minute, of every length: the lanes must hold them all apart."""
    frames = round(seconds / 0.08)
    vocabulary = ["I", "Mmm", "wonderful", "a", "WWW", "extraordinarily", "of", "it's"]
    words = [Piece(5 + f, 100 + f % len(vocabulary), " " + vocabulary[f % len(vocabulary)], "w")
             for f in range(frames - 5)]
    return scripted_answer(frames=frames, words=words)


def test_labels_of_a_long_answer_never_overlap():
    answer = long_answer()
    html = tl.timeline_html(answer, np.zeros(16000 * 5, np.float32), 16000)
    placed = words_of(html)
    assert len(placed) == len(answer.text_pieces) + len(answer.function_pieces)
    for _, _, width, label in placed:  # drawn at the width it was packed with
        assert width == pytest.approx(tl.label_width(html_module.unescape(label)), abs=0.06)
    by_lane: dict[float, list] = {}
    for x, y, w, _ in placed:
        by_lane.setdefault(y, []).append((x, x + w))
    for spans in by_lane.values():
        spans.sort()
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    ppf = float(re.search(r'data-px-per-frame="([\d.]+)"', html).group(1))
    assert tl.MIN_PX_PER_FRAME < ppf <= tl.MAX_PX_PER_FRAME  # widened for the labels, up to the limit


def test_labels_wider_than_the_widest_frames_take_more_lanes():
    long = "x" * 40  # 264 px: four of them on consecutive frames cannot share 3 lanes even at 40 px a frame
    words = [Piece(20 + i, 100 + i, " " + long, "w") for i in range(4)]
    html = tl.timeline_html(scripted_answer(words=words), np.zeros(16000, np.float32), 16000)
    assert float(re.search(r'data-px-per-frame="([\d.]+)"', html).group(1)) == tl.MAX_PX_PER_FRAME
    assert len({y for _, y, _, label in words_of(html) if label == long}) == 4


def test_the_overview_spans_the_whole_answer_in_the_page_width():
    answer = long_answer()
    html = tl.timeline_html(answer, np.zeros(16000 * 5, np.float32), 16000)
    overview = re.search(r'<svg class="vc-tl-mini" viewBox="0 0 (\d+) (\d+)" preserveAspectRatio="none" '
                         r'width="100%"', html)
    assert int(overview.group(1)) == 750  # one unit per frame: 5 prompt ... the answer's 750 frames
    ticks = re.findall(r'<span style="left:([\d.]+)%">([-\d.]+) s</span>', html)
    assert [t for _, t in ticks] == [str(s) for s in range(0, 61, 10)]  # 60 s in steps of 10 s
    for left, t in ticks:  # time 0 is the recording's start, frame 5 of the answer's span starting at 5
        assert float(left) == pytest.approx(100 * (int(t) / 0.08) / 750, abs=1e-3)
    window = re.search(r'<rect class="vc-tl-window" x="0" y="0" width="([\d.]+)"', html)  # until measured
    ppf = float(re.search(r'data-px-per-frame="([\d.]+)"', html).group(1))
    assert float(window.group(1)) == pytest.approx(tl.FILL_PX / ppf, abs=0.05)


def test_what_a_token_shows():
    assert tl.piece_label(Piece(1, 5, " Paris", "ĠParis")) == "Paris"
    assert tl.piece_label(Piece(1, 6, " ", "Ġ")) == "␣"  # a space alone
    assert tl.piece_label(Piece(1, 7, "", "<tool_call>")) == "<tool_call>"  # no text: the token's name
