"""The record-and-run tab's Tools panel: a built-in tool ticked in the app is declared to the model, a call the model
writes runs the real tool, and the call, its arguments, its result and its positions show in the Tool calls box, on
the timeline and in conversation.json; with no tool ticked the request carries none and the prompt is the user's.

The app runs on the real tiny model in the engine, launched locally and driven through gradio_client. The tiny
model's function head writes random ids, so its function channel is scripted through the session's test-only seam
(``open_recording(script=...)``, as ``_generate`` in tests/test_tools.py): one call to ``calculate`` a few
positions after the system prompt, EOTR where the response ends.
"""

from __future__ import annotations

import dataclasses
import html as html_module
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import app  # noqa: E402
from gradio_client import Client, handle_file  # noqa: E402
from test_app import ADVANCED_DEFAULTS, OUT, free_port, text_of  # noqa: E402
from voicechat import engine as eng  # noqa: E402
from voicechat.result import FrameUpdate  # noqa: E402
from voicechat.timeline.conversation import Frame  # noqa: E402
from voicechat.timeline.recording import open_recording  # noqa: E402
from voicechat.tools import BUILTIN_TOOLS, ToolEvent, calculate, system_prompt  # noqa: E402
from voicechat.tools.calls import response_text  # noqa: E402
from voicechat.webui import record as record_tab  # noqa: E402

CALL = '<TOOLCALL>[{"name": "calculate", "arguments": {"expression": "6*7"}}]</TOOLCALL>'
RESULT = {"expression": "6*7", "result": 42}  # what calculate("6*7") returns
AFTER = 3  # the call starts this many positions after the system prompt
PROMPT = "Be brief."


class ScriptedCall:
    """The real tiny model; its function head writes ``CALL`` (SOTC, the call's tokens, EOTC) ``AFTER`` positions
    after the system prompt, EOTR where the response to it ends, and PAD everywhere else. It keeps what each
    ``recording`` was asked and the Result each gave."""

    def __init__(self, model):
        self.model, self.asked, self.recordings = model, [], []
        tok = model.tokenizer
        self.sotc, self.eotc, self.eotr = (tok.token_to_id(f"<SPECIAL_2{i}>") for i in range(3))
        self.call_ids = [self.sotc, *tok.encode(CALL), self.eotc]
        self.response_positions = len(tok.encode(response_text([RESULT])))

    def __getattr__(self, name):
        return getattr(self.model, name)

    def layout(self, prompt: str, tools) -> tuple[int, int, int]:
        """(SOTC's position, EOTC's, one past the response's) for a conversation with this prompt and these tools."""
        start = self.model.prompt_length(system_prompt(prompt, tools)) + AFTER
        end = start + len(self.call_ids) - 1
        return start, end, end + 1 + self.response_positions

    def recording(self, audio, sample_rate=None, system_prompt="", seed=0, speaker=None, config=None, progress=None,
                  tools=(), group=None):
        self.asked.append(dict(system_prompt=system_prompt, tools=tuple(tools)))
        start, _, response_end = self.layout(system_prompt, tools)
        ids = {start + i: f for i, f in enumerate(self.call_ids)} | {response_end: self.eotr}
        pad = self.model.config.pad_id
        recording = open_recording(self.model, audio, sample_rate, system_prompt, seed, speaker, config, progress,
                                   tools, script=lambda t: (None, ids.get(t, pad)), group=group)
        self.recordings.append(recording)
        return recording

    @property
    def results(self) -> list:
        return [recording.result() for recording in self.recordings]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import voicechat
    from voicechat.random_checkpoint import write_tiny_checkpoint

    tiny = voicechat.load(write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=0), offline=True)
    model = ScriptedCall(tiny)
    engine = eng.Engine(lambda progress_bar: model, name="tiny model, scripted function head").start()
    outputs = tmp_path_factory.mktemp("app-tools")
    demo = app.build_app(engine, outputs=outputs, demo_mode=True)
    app.launch(demo, outputs, server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
               quiet=True)
    recording = outputs / "question.wav"
    sf.write(recording, (np.random.default_rng(3).standard_normal(16000) * 0.1).astype(np.float32), 16000)
    yield Client(demo.local_url, verbose=False), model, recording
    demo.close()
    engine.close()


def run(client: Client, recording: Path, *tools) -> tuple:
    """One Run with half a second of silence after the recording; ``tools``: the ticked names (left out when none,
    as an API caller from before the Tools panel sends it)."""
    values = {**ADVANCED_DEFAULTS, "extra_seconds": 0.5}.values()
    out = client.submit(handle_file(str(recording)), PROMPT, 0, *values, *([list(tools)] if tools else []),
                        api_name="/run").result(timeout=300)
    assert "Answer ready" in text_of(out[OUT["status"]]), text_of(out[OUT["status"]])
    return out


def conversation(out) -> dict:
    _, js = out[OUT["downloads"]]
    return json.loads(Path(js).read_text(encoding="utf-8"))


def drawn_calls(timeline_html: str) -> list[dict]:
    """Each tool call the timeline draws: its data attributes, its bars (class -> (x, width)), label and tooltip."""
    calls = []
    for group in re.findall(r'<g class="vc-tl-tool"(.*?)</g>', timeline_html, re.S):
        attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', group.split(">", 1)[0]))
        bars = {kind: (float(x), float(w), float(y)) for kind, x, y, w in
                re.findall(r'<rect class="(vc-tl-call|vc-tl-response)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"',
                           group)}
        label = re.search(r'lengthAdjust="spacingAndGlyphs">([^<]*)</text>', group).group(1)
        title = html_module.unescape(re.search(r"<title>(.*?)</title>", group, re.S).group(1))
        calls.append(dict(attrs=attrs, bars=bars, label=label, title=title))
    return calls


def test_the_panel_offers_the_built_in_tools_and_shows_what_the_model_reads():
    assert [value for _, value in record_tab.tool_choices()] == ["get_current_time", "calculate", "convert_units"]
    label = "calculate: Evaluate an arithmetic expression exactly, for any calculation"
    assert record_tab.tool_choices()[1][0] == label
    for prompt in record_tab.PROMPT_PRESETS.values():  # nothing ticked: the prompt as written (NVIDIA's default too)
        assert record_tab.model_prompt(prompt, []) == prompt
    assert record_tab.model_prompt(PROMPT, ["convert_units", "calculate"]) == system_prompt(PROMPT, BUILTIN_TOOLS[1:])


@pytest.fixture(scope="module")
def ticked(served):
    """One Run with ``calculate`` ticked: (the app's outputs, what the model was asked, the Result it returned)."""
    client, model, recording = served
    out = run(client, recording, "calculate")
    return out, model.asked[-1], model.results[-1]


def test_a_ticked_tool_runs_and_its_call_shows_everywhere(served, ticked):
    _, model, _ = served
    out, asked, result = ticked
    assert asked == dict(system_prompt=PROMPT, tools=(calculate,))
    start, end, response_end = model.layout(PROMPT, [calculate])
    (call,) = result.tool_calls
    assert (call.name, call.arguments, call.result, call.error) == ("calculate", {"expression": "6*7"}, RESULT, None)
    assert (call.call_start, call.call_end, call.injection_start, call.injection_end, call.end, call.eotr) == (
        start, end, end + 1, response_end, response_end, True)

    # the Tool calls box: the call at its time and frames, the result, where the model read it
    prompt_frames = result.prompt_frames
    assert prompt_frames == model.prompt_length(system_prompt(PROMPT, [calculate]))
    call_line, result_line = out[OUT["tool_calls"]].split("\n")
    assert call_line == (f'→ calculate({{"expression": "6*7"}}) at {AFTER * 0.08:.2f} s (frames {start}–{end})')
    assert re.fullmatch(r'← calculate: \{"expression": "6\*7", "result": 42\} \(ran \d+\.\d{3} s; read by the model '
                        rf'at frames {end + 1}–{response_end - 1}\)', result_line), result_line
    assert '[{"expression": "6*7", "result": 42}]' in out[OUT["function"]]  # the response on the function channel

    # the timeline: the call's and the response's positions on the function row, named
    timeline = out[OUT["timeline"]]
    root = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', timeline.split(">", 1)[0]))
    first, px = int(root["start"]), float(root["px-per-frame"])
    (drawn,) = drawn_calls(timeline)
    assert drawn["attrs"] == {"name": "calculate", "call-start": str(start), "call-end": str(end),
                              "injection-start": str(end + 1), "injection-end": str(response_end)}
    (call_x, call_w, call_y), (response_x, response_w, response_y) = (drawn["bars"][k] for k in ("vc-tl-call",
                                                                                                  "vc-tl-response"))
    assert (call_x, call_w) == pytest.approx(((start - first) * px, (end + 1 - start) * px), abs=0.06)
    assert (response_x, response_w) == pytest.approx(((end + 1 - first) * px, (response_end - end - 1) * px),
                                                     abs=0.06)
    function_row = float(re.search(r'<text x="4" y="([\d.]+)"[^>]*>Function</text>', timeline).group(1)) - 12
    assert call_y == response_y == function_row + 2  # the top lane of the function row
    assert drawn["label"] == "calculate"
    # the recording's frames after the call waited through the exchange: its silence starts that much later
    silence_x = float(re.search(r'<rect x="([\d.]+)"[^>]*/><text [^>]*>silence after your recording<', timeline)
                      .group(1))
    assert silence_x == pytest.approx((prompt_frames + result.input_frames + response_end - start - first) * px,
                                      abs=0.06)
    assert drawn["title"] == out[OUT["tool_calls"]]  # hovered, the call says what the Tool calls box says

    # conversation.json: the CLI's record, with the call as Result.tool_calls has it
    record = conversation(out)
    assert record["tool_calls"] == [json.loads(json.dumps(call.to_dict()))]
    assert record["system_prompt"] == PROMPT and record["prompt_frames"] == prompt_frames
    assert [t["name"] for t in record["settings"]["tools"]] == ["calculate"]


def test_calls_show_while_the_answer_is_computed(ticked):
    """The progress frames' tool events, as the engine reports them: a call in flight, then the same call answered
    (the Tool calls box keeps the newest record of each call)."""
    (done,) = ticked[2].tool_calls
    running = dataclasses.replace(done, result=None, seconds=None, injection_start=None, injection_end=None,
                                  end=None, eotr=None)
    calls: dict = {}
    for event in (ToolEvent("call", done.call_end, (running,)), ToolEvent("result", done.injection_start, (done,))):
        frame = Frame(event.position, 0, 0, np.zeros(31, np.int32), np.zeros(0, np.float32), "", "", "", None, {},
                      (event,))
        record_tab.note_calls(calls, eng.Event(eng.PROGRESS, update=FrameUpdate("frames", 1.0, 1.0, "", "", frame)))
        shown = record_tab.tool_calls_text(list(calls.values()), 10, 0.08)
        if event.kind == "call":
            assert shown.split("\n")[1] == "… calculate is running"
    assert list(calls.values()) == [done]
    assert shown == record_tab.tool_calls_text([done], 10, 0.08) and shown.split("\n")[1].startswith("← calculate: ")


def test_with_no_tool_ticked_the_request_carries_none(served):
    client, model, recording = served
    out = run(client, recording)  # the same call written on the function channel: no tool to run it
    assert model.asked[-1] == dict(system_prompt=PROMPT, tools=())
    result = model.results[-1]
    assert result.tool_calls == () and result.prompt_frames == model.prompt_length(PROMPT)
    assert out[OUT["function"]].startswith('<TOOLCALL>[{"name": "calculate"') and "TOOL_RESPONSE" not in out[
        OUT["function"]]  # the model wrote a call (cut off by the end of the run); nothing answered it
    assert out[OUT["tool_calls"]] == "" and "vc-tl-tool" not in out[OUT["timeline"]]
    record = conversation(out)
    assert record["tool_calls"] == [] and record["prompt_frames"] == model.prompt_length(PROMPT)
