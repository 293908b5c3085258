"""voicechat.tools: the system prompt against NVIDIA's template, call parsing, the schema check, the runner, the
ToolChannel's timeline layout on scripted function-channel ids (docs/tools.md), the built-in tools, and tool calls in
sessions, ``generate``, live conversations and the CLI on the real tiny model (its function head scripted through the
session's test seam)."""

import datetime as dt
import json
import math
import random
import threading
from pathlib import Path
from typing import Literal, Optional

import mlx.core as mx
import numpy as np
import pytest
import soundfile as sf

import voicechat
import voicechat.engine as eng
from voicechat.answer import make_answer
from voicechat.__main__ import main
from voicechat.errors import ConfigError, ToolError
from voicechat.result import conversation_json
from voicechat.timeline.conversation import Session
from voicechat.llm import lm
from voicechat.random_checkpoint import write_tiny_checkpoint, write_tokenizer
from voicechat.tokenizer import TextTokenizer
from voicechat.tools import (BUILTIN_TOOLS, Tool, ToolChannel, calculate, convert_units, get_current_time,
                             load_tools_module, system_prompt, tool)
from voicechat.tools.builtin import (NAMES, TEMPERATURES, UNITS, CalculatorError, describe_time, evaluate, spelling)
from voicechat.tools.channel import MAX_RESULT_CHARS
from voicechat.tools.calls import TIMEOUT_RESULT, bounded_response, parse_calls, resolve, response_text
from voicechat.tools.runner import ToolRunner
from voicechat.tools.schema import check_schema, coerce, validate

FIXTURES = Path(__file__).parent / "fixtures" / "nemo"
PAD, SOTC, EOTC, EOTR = 12, 20, 21, 22
TEXT = 300  # a word id the scripted model "says" on the text channel
NOISE = 301  # a function id the scripted model predicts where the channel forces another


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tok")
    write_tokenizer(directory, 512)
    return TextTokenizer(directory / "tokenizer.json")


# ----------------------------------------------------------------------------------------------------------------
# the system prompt: NVIDIA's examples/speechlm2/function_calling/template.jinja, written out by hand
# ----------------------------------------------------------------------------------------------------------------
WEATHER = Tool("get_weather", "Weather & <temps> in °C, it's live",
               {"type": "object", "properties": {"city": {"type": "string", "description": "a city"}},
                "required": ["city"]})
TIMER = Tool.from_dict({"type": "function", "function": {
    "name": "set_timer", "description": "Start a timer.",
    "parameters": {"type": "object", "properties": {"seconds": {"type": "integer"}}}}})

# Jinja's tojson: sorted keys, ", " and ": ", \uXXXX for non-ASCII, and < > & ' escaped; tools joined by ", "
TEMPLATE_TOOLS = (
    '<AVAILABLE_TOOLS>[{"description": "Weather \\u0026 \\u003ctemps\\u003e in \\u00b0C, it\\u0027s live", '
    '"name": "get_weather", "parameters": {"properties": {"city": {"description": "a city", "type": "string"}}, '
    '"required": ["city"], "type": "object"}}, {"description": "Start a timer.", "name": "set_timer", '
    '"parameters": {"properties": {"seconds": {"type": "integer"}}, "type": "object"}}]</AVAILABLE_TOOLS>')
TEMPLATE_BLOCK = (
    "You can use the following tools to assist the user if required:\n" + TEMPLATE_TOOLS + "\n\n"
    "If you decide to call any tool(s), use the following format:\n"
    '<TOOLCALL>[{"name": "tool_name1", "arguments": "tool_args1"}, {"name": "tool_name2", "arguments": '
    '"tool_args2"}]</TOOLCALL>\n\n'
    "The user will execute tool-calls and return responses from tool(s) in this format:\n"
    '<TOOL_RESPONSE>[{"tool_response1"}, {"tool_response2"}]</TOOL_RESPONSE>\n\n'
    "Based on the tool responses, you can call additional tools if needed, correct tool calls if any errors are "
    "found, or just respond to the user.")


def test_system_prompt_is_nvidias_template_byte_for_byte():
    assert system_prompt("Be brief.", [WEATHER, TIMER]) == "Be brief.\n\n" + TEMPLATE_BLOCK
    assert system_prompt("", [WEATHER, TIMER]) == TEMPLATE_BLOCK  # no separator after empty instructions
    assert system_prompt("Be brief.", []) == "Be brief."


def test_system_prompt_limits():
    many = [Tool(f"t{i}", "x") for i in range(6)]
    with pytest.raises(ToolError, match="at most 5 tools"):
        system_prompt("", many)
    with pytest.raises(ToolError, match="two tools are named"):
        system_prompt("", [WEATHER, WEATHER])


def test_tool_decorator_builds_the_schema_from_signature_and_docstring():
    @tool
    def book(city: str, nights: int, kind: Literal["hotel", "hostel"] = "hotel", budget: Optional[float] = None,
             guests: list[str] = ()) -> dict:
        """Book a room.

        Args:
            city: where to stay,
                a city name
            nights: how many nights
        Returns:
            the booking
        """
        return {"city": city, "nights": nights}

    assert book.name == "book" and book.description == "Book a room."
    assert book.parameters == {"type": "object", "required": ["city", "nights"], "properties": {
        "city": {"type": "string", "description": "where to stay, a city name"},
        "nights": {"type": "integer", "description": "how many nights"},
        "kind": {"type": "string", "enum": ["hotel", "hostel"]},
        "budget": {"type": "number"},
        "guests": {"type": "array", "items": {"type": "string"}}}}
    assert book(city="Oslo", nights=2) == {"city": "Oslo", "nights": 2}  # still callable
    with pytest.raises(ToolError, match="needs a type annotation"):
        tool(lambda x: x)
    with pytest.raises(ToolError, match="has no JSON schema"):
        @tool
        def bad(x: set) -> None:
            """"""


def test_tool_declarations_are_checked():
    with pytest.raises(ToolError, match="tool name"):
        Tool("bad name!", "x")
    with pytest.raises(ToolError, match="unknown type 'text'"):
        Tool("t", "x", {"type": "object", "properties": {"a": {"type": "text"}}})
    with pytest.raises(ToolError, match="object schema"):
        Tool("t", "x", {"type": "string"})
    with pytest.raises(ToolError, match="'required'"):
        Tool("t", "x", {"type": "object", "required": "a"})


def test_load_tools_module(tmp_path):
    path = tmp_path / "mytools.py"
    path.write_text("from voicechat.tools import Tool, tool\n\n"
                    "@tool\ndef shout(text: str) -> str:\n    '''Upper case.'''\n    return text.upper()\n\n"
                    "echo = Tool('echo', 'Echo.', {'type': 'object', 'properties': {}}, lambda: 'echo')\n")
    tools = load_tools_module(path)
    assert [t.name for t in tools] == ["shout", "echo"] and tools[0](text="hi") == "HI"
    (tmp_path / "none.py").write_text("x = 1\n")
    with pytest.raises(ToolError, match="defines no tools"):
        load_tools_module(tmp_path / "none.py")
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(ToolError, match="could not be imported: ModuleNotFoundError"):
        load_tools_module(tmp_path / "broken.py")
    with pytest.raises(ToolError, match="is not a file"):
        load_tools_module(tmp_path / "missing.py")


# ----------------------------------------------------------------------------------------------------------------
# parsing calls and checking arguments
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ('<TOOLCALL>[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]</TOOLCALL>',
     [("a", {"x": 1}), ("b", {})]),
    ('<TOOLCALL>{"name": "a", "arguments": {"x": 1}}</TOOLCALL>', [("a", {"x": 1})]),  # one object
    ('[{"name": "a", "arguments": {"x": 1}}]', [("a", {"x": 1})]),  # without the tags
    ('<TOOLCALL>[{"name": "a", "arguments": "{\\"x\\": 1}"}]</TOOLCALL>', [("a", {"x": 1})]),  # JSON string
    ('<TOOLCALL>[{"name": "a", "parameters": {"x": 2}}]</TOOLCALL>', [("a", {"x": 2})]),  # NVIDIA's fallback
    ('<TOOLCALL>[{"name": "a"}]</TOOLCALL>', [("a", {})]),
])
def test_parse_calls(text, expected):
    calls = parse_calls(text)
    assert [(c.name, c.arguments, c.error) for c in calls] == [(n, a, None) for n, a in expected]


@pytest.mark.parametrize("text, error", [
    ('<TOOLCALL>[{"name": "a", "arguments": {"x": 1}</TOOLCALL>', "not valid JSON"),
    ("<TOOLCALL>[]</TOOLCALL>", "lists no calls"),
    ('<TOOLCALL>[{"arguments": {}}]</TOOLCALL>', "has no name"),
    ('<TOOLCALL>["a"]</TOOLCALL>', "must be an object"),
    ('<TOOLCALL>[{"name": "a", "arguments": [1]}]</TOOLCALL>', "must be an object"),
    ('<TOOLCALL>[{"name": "a", "arguments": "{x"}]</TOOLCALL>', "not valid JSON"),
])
def test_parse_calls_errors(text, error):
    (call,) = parse_calls(text)
    assert error in call.error and call.arguments is None


def test_resolve_names_and_arguments():
    tools = {"set_timer": TIMER, "get_weather": WEATHER}
    found, call = resolve(parse_calls('[{"name": "set-timer", "arguments": {"seconds": "90"}}]')[0], tools)
    assert found is TIMER and (call.name, call.arguments, call.error) == ("set_timer", {"seconds": 90}, None)
    found, call = resolve(parse_calls('[{"name": "get_news"}]')[0], tools)
    assert found is None and call.error == "unknown tool 'get_news' (available: set_timer, get_weather)"
    found, call = resolve(parse_calls('[{"name": "get_weather", "arguments": {}}]')[0], tools)
    assert found is None and call.error == "bad arguments for get_weather: arguments.city: required"
    found, call = resolve(parse_calls('[{"name": "set_timer", "arguments": {"seconds": "soon"}}]')[0], tools)
    assert call.error == "bad arguments for set_timer: arguments.seconds: expected integer, got string"


SCHEMA = {"type": "object", "required": ["n"], "additionalProperties": False, "properties": {
    "n": {"type": "integer", "minimum": 1, "maximum": 10},
    "x": {"type": "number"},
    "flag": {"type": "boolean"},
    "mode": {"type": "string", "enum": ["a", "b"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "opt": {"type": ["string", "null"]},
    "inner": {"type": "dict", "properties": {"k": {"type": "float"}}, "required": ["k"]}}}


@pytest.mark.parametrize("value, problem", [
    ({"n": 3}, None),
    ({"n": 3.0, "x": 2, "flag": False, "mode": "b", "tags": ["p"], "opt": None, "inner": {"k": 1.5}}, None),
    ({}, "arguments.n: required"),
    ({"n": True}, "arguments.n: expected integer, got boolean"),
    ({"n": 2.5}, "arguments.n: expected integer, got number"),
    ({"n": 0}, "arguments.n: must be at least 1"),
    ({"n": 11}, "arguments.n: must be at most 10"),
    ({"n": 1, "x": "1"}, "arguments.x: expected number, got string"),
    ({"n": 1, "flag": 1}, "arguments.flag: expected boolean, got integer"),
    ({"n": 1, "mode": "c"}, "arguments.mode: must be one of 'a', 'b'"),
    ({"n": 1, "tags": ["p", 2]}, "arguments.tags[1]: expected string, got integer"),
    ({"n": 1, "opt": 3}, "arguments.opt: expected string or null, got integer"),
    ({"n": 1, "inner": {}}, "arguments.inner.k: required"),
    ({"n": 1, "inner": {"k": "x"}}, "arguments.inner.k: expected number, got string"),
    ({"n": 1, "extra": 1}, "arguments.extra: unexpected (allowed: n, x, flag, mode, tags, opt, inner)"),
    ([1], "arguments: expected object, got array"),
])
def test_validate(value, problem):
    check_schema(SCHEMA, "test")
    assert validate(value, SCHEMA) == problem


def test_coerce_converts_only_lossless_scalars():
    assert coerce({"n": "7", "x": "2.5", "flag": "true", "mode": "a", "tags": ["1"], "opt": "4"}, SCHEMA) == \
        {"n": 7, "x": 2.5, "flag": True, "mode": "a", "tags": ["1"], "opt": "4"}
    assert coerce({"n": "7.5", "x": "nan", "flag": "yes"}, SCHEMA) == {"n": "7.5", "x": "nan", "flag": "yes"}
    assert coerce({"n": 4.0}, SCHEMA) == {"n": 4} and isinstance(coerce({"n": 4.0}, SCHEMA)["n"], int)


def test_response_text_and_bound(tok):
    assert response_text([{"result": 20}]) == '<TOOL_RESPONSE>[{"result": 20}]</TOOL_RESPONSE>'  # NV-OFF's bytes
    assert response_text([{"t": "21°"}, "x"]) == '<TOOL_RESPONSE>[{"t": "21\\u00b0"}, "x"]</TOOL_RESPONSE>'
    small, big = {"ok": 1}, {"text": "word " * 400}
    ids, replaced = bounded_response([small, big], tok.encode, 512)
    assert len(ids) <= 512 and list(replaced) == [1]
    assert json.loads(tok.decode(ids)[len("<TOOL_RESPONSE>"):-len("</TOOL_RESPONSE>")]) == \
        [small, {"error": replaced[1]}]
    ids, replaced = bounded_response([small, big], tok.encode, 20)  # a limit that not even error objects meet
    assert len(replaced) == 2
    assert tok.decode(ids) == response_text([{"error": "the results are too long for the model"}])


# ----------------------------------------------------------------------------------------------------------------
# the runner
# ----------------------------------------------------------------------------------------------------------------
def test_runner_outcomes():
    runner = ToolRunner(timeout=5.0)
    gate = threading.Event()
    runner.start("ok", lambda a: {"a": a}, {"a": 1})
    runner.start("raises", lambda: 1 / 0, {})
    runner.start("json_text", lambda: '{"b": [1, 2]}', {})
    runner.start("not_json", lambda: object(), {})
    runner.start("gated", gate.wait, {})
    assert runner.poll("gated") is None
    gate.set()
    runner.wait(["ok", "raises", "json_text", "not_json", "gated"])
    assert runner.poll("ok").result == {"a": 1} and runner.poll("ok").error is None
    assert runner.poll("raises").error == "division by zero"
    assert runner.poll("json_text").result == {"b": [1, 2]}
    assert runner.poll("not_json").error.startswith("the tool returned something that is not JSON")
    assert runner.poll("gated").result is True and runner.poll("gated").seconds >= 0


def test_runner_timeout_abandons_the_call():
    runner = ToolRunner(timeout=0.05)
    gate = threading.Event()
    try:
        runner.start("slow", gate.wait, {})
        runner.expect("client")
        runner.wait(["slow", "client"])
        for call_id in ("slow", "client"):
            outcome = runner.poll(call_id)
            assert outcome.timed_out and outcome.error == "the tool did not answer within 0.05 s"
        assert runner.provide("client", "late") is False  # a late answer is ignored
    finally:
        gate.set()


# ----------------------------------------------------------------------------------------------------------------
# ToolChannel on scripted function-channel ids
# ----------------------------------------------------------------------------------------------------------------
def call_ids(tok, calls) -> list[int]:
    """The function-channel ids of a call as the model writes it: SOTC, <TOOLCALL>json</TOOLCALL>, EOTC."""
    body = calls if isinstance(calls, str) else "<TOOLCALL>" + json.dumps(calls) + "</TOOLCALL>"
    return [SOTC] + tok.encode(body) + [EOTC]


def step(channel: ToolChannel, t: int, text: int, function: int) -> tuple[bool, int, int, tuple]:
    """One position as a session runs it: the plan applied to the model's ids, then observed -> (held, text id
    kept, function id kept, events)."""
    plan = channel.plan(t)
    function = function if plan.function_id is None else plan.function_id
    text = plan.text_id if plan.text_id is not None else PAD if function == plan.pad_text_if else text
    return plan.hold, text, function, channel.observe(t, text, function)


class Script:
    """Drives a ToolChannel the way a session does, with a scripted model (``function_ids[t]`` is the function
    head's argmax at position t). Records what the channel kept at every position."""

    def __init__(self, channel: ToolChannel, function_ids: list[int], after_response: int = EOTR):
        self.channel, self.function_ids, self.after_response = channel, function_ids, after_response
        self.rows = []  # (position, held, text id kept, function id kept, event kinds)
        self.events = []

    def run(self, positions: int, release: Optional[threading.Event] = None):
        for t in range(positions):
            if self.channel.paused():
                assert self.channel.paused()  # polling again never advances anything
                if release is not None:
                    release.set()
                self.channel.wait()
                assert not self.channel.paused()
            assert self.channel.holds_user_audio() == self.channel.plan(t).hold
            f = self.function_ids[t] if t < len(self.function_ids) else PAD
            if self.channel._state == "eotr":  # the model's prediction after the response
                f = self.after_response
            elif self.channel._state == "inject":
                f = NOISE  # whatever the head predicts is replaced by the response
            held, text, function, events = step(self.channel, t, TEXT, f)
            self.rows.append((t, held, text, function, tuple(e.kind for e in events)))
            self.events.extend(events)
        return self

    def kept(self, start, stop, column=3):
        return [r[column] for r in self.rows[start:stop]]


def response_of(tok, script, call) -> list:
    ids = script.kept(call.injection_start, call.injection_end)
    text = tok.decode(ids)
    assert text.startswith("<TOOL_RESPONSE>") and text.endswith("</TOOL_RESPONSE>")
    return json.loads(text[len("<TOOL_RESPONSE>"):-len("</TOOL_RESPONSE>")])


def test_channel_layout_of_one_exchange(tok):
    runs = []

    @tool
    def add(a: int, b: int) -> dict:
        """Add two integers."""
        runs.append((a, b))
        return {"sum": a + b}

    channel = ToolChannel([add], tok, PAD)
    p = 3
    ids = [PAD, TEXT, PAD] + call_ids(tok, [{"name": "add", "arguments": {"a": 2, "b": "40"}}])
    e = p + len(ids) - 4  # EOTC's position
    script = Script(channel, ids).run(e + 120)
    (call,) = channel.records()
    expected = tok.encode(response_text([{"sum": 42}]))
    m = len(expected)

    assert runs == [(2, 40)]  # caught once, run once, "40" converted for the integer parameter
    assert (call.name, call.arguments, call.result, call.error) == ("add", {"a": 2, "b": 40}, {"sum": 42}, None)
    assert (call.call_start, call.call_end, call.injection_start, call.injection_end, call.end, call.eotr) == \
        (p, e, e + 1, e + 1 + m, e + 1 + m, True)
    # the response ids are the function channel's kept ids at e+1 .. e+m, whatever the head predicted there
    assert script.kept(e + 1, e + 1 + m) == expected
    assert response_of(tok, script, call) == [{"sum": 42}]
    # the user's audio waits from p+1 through the EOTR position; text is PAD from SOTC through the EOTR position
    assert [r[1] for r in script.rows] == [False] * (p + 1) + [True] * (e + m + 1 - p) + \
        [False] * (len(script.rows) - e - m - 2)
    assert script.kept(0, p, 2) == [TEXT] * p
    assert script.kept(p, e + m + 2, 2) == [PAD] * (e + m + 2 - p)
    assert script.kept(e + m + 2, len(script.rows), 2) == [TEXT] * (len(script.rows) - e - m - 2)
    # the call's own ids pass through unchanged
    assert script.kept(0, e + 1) == ids
    assert [(ev.kind, ev.position) for ev in script.events] == \
        [("call_start", p), ("call", e), ("result", e + 1), ("end", e + 1 + m)]
    assert script.events[1].calls[0].result is None and script.events[2].calls[0].result == {"sum": 42}
    assert not channel.pending()


def test_channel_pauses_while_the_tool_runs(tok):
    gate = threading.Event()
    slow = Tool("slow", "Waits.", fn=lambda: gate.wait(5) and "done")
    channel = ToolChannel([slow], tok, PAD)
    ids = call_ids(tok, [{"name": "slow"}])
    for t, f in enumerate(ids):
        step(channel, t, TEXT, f)
    assert channel.paused() and channel.paused() and channel.pending()
    with pytest.raises(RuntimeError, match="paused"):
        channel.plan(len(ids))
    gate.set()
    channel.wait()
    assert not channel.paused() and channel.holds_user_audio()
    events = step(channel, len(ids), TEXT, NOISE)[3]
    assert events[0].kind == "result" and events[0].calls[0].result == "done"
    with pytest.raises(RuntimeError, match="not the planned"):  # a session that did not apply the plan
        channel.observe(len(ids) + 1, TEXT, NOISE)


def failing_exchange(tok, tools, ids, timeout=15.0):
    channel = ToolChannel(tools, tok, PAD, timeout=timeout)
    script = Script(channel, ids).run(len(ids) + 600)
    calls = channel.records()
    assert [ev.kind for ev in script.events] == ["call_start", "call", "result", "end"]
    return calls, [response_of(tok, script, calls[0])], script


@pytest.mark.parametrize("calls, error", [
    ('<TOOLCALL>[{"name": "add", "arguments": {"a": 1</TOOLCALL>', "the tool call is not valid JSON"),
    ([{"name": "multiply", "arguments": {}}], "unknown tool 'multiply' (available: add)"),
    ([{"name": "add", "arguments": {"a": "one"}}], "bad arguments for add: arguments.a: expected integer"),
])
def test_channel_feeds_back_unusable_calls(tok, calls, error):
    runs = []
    add = Tool("add", "Add.", {"type": "object", "properties": {"a": {"type": "integer"}}},
               fn=lambda a: runs.append(a))
    (call,), (response,), _ = failing_exchange(tok, [add], call_ids(tok, calls))
    assert call.error.startswith(error) and response == [{"error": call.error}] and runs == []


def test_channel_feeds_back_exceptions_and_timeouts(tok):
    gate = threading.Event()
    try:
        boom = Tool("boom", "Fails.", fn=lambda: {}["missing"])
        (call,), (response,), _ = failing_exchange(tok, [boom], call_ids(tok, [{"name": "boom"}]))
        assert call.error == "'missing'" and response == [{"error": "'missing'"}] and call.seconds >= 0
        hang = Tool("hang", "Hangs.", fn=gate.wait)
        (call,), (response,), _ = failing_exchange(tok, [hang], call_ids(tok, [{"name": "hang"}]), timeout=0.05)
        assert call.error == "the tool did not answer within 0.05 s" and response == [TIMEOUT_RESULT]
    finally:
        gate.set()


def test_channel_cuts_off_an_endless_call(tok):
    endless = [SOTC] + tok.encode('<TOOLCALL>[{"name": "add", "arguments": {"a": "' + "x" * 400)  # no EOTC
    add = Tool("add", "Add.", fn=lambda **kw: 0)
    (call,), (response,), script = failing_exchange(tok, [add], endless)
    assert call.call_end == 255 and script.rows[255][3] == EOTC  # EOTC forced on the 256th position
    assert call.error == "the tool call was cut off after 256 positions" and response == [{"error": call.error}]


def test_channel_bounds_an_overlong_response(tok):
    big = Tool("big", "Big.", fn=lambda: {"text": "word " * 600})
    small = Tool("small", "Small.", fn=lambda: {"ok": True})
    (b, s), (response,), _ = failing_exchange(tok, [big, small], call_ids(tok, [{"name": "big"}, {"name": "small"}]))
    assert b.result == {"text": "word " * 600} and b.error.startswith("the result is too long for the model")
    assert s.error is None and response == [{"error": b.error}, {"ok": True}]
    assert b.injection_end - b.injection_start <= 512


def test_channel_runs_every_call_of_a_list_in_order(tok):
    square = Tool("square", "Square.", {"type": "object", "properties": {"x": {"type": "number"}}},
                  fn=lambda x: x * x)
    (c1, c2, c3), (response,), _ = failing_exchange(tok, [square], call_ids(tok, [
        {"name": "square", "arguments": {"x": 3}}, {"name": "nope"}, {"name": "square", "arguments": {"x": 1.5}}]))
    assert response == [9, {"error": c2.error}, 2.25] and len({c1.call_id, c2.call_id, c3.call_id}) == 3
    assert c1.injection_start == c2.injection_start == c3.injection_start


def test_channel_chained_call_and_missing_eotr(tok):
    now = Tool("now", "Now.", fn=lambda: "noon")
    ids = call_ids(tok, [{"name": "now"}])
    channel = ToolChannel([now], tok, PAD)
    script = Script(channel, ids, after_response=SOTC)  # the model opens another call instead of EOTR
    script.run(len(ids) + 60)
    first = channel.records()[0]
    assert first.eotr is False and channel.pending() and channel.holds_user_audio()
    assert [(ev.kind, ev.position) for ev in script.events][-2:] == [("end", first.end), ("call_start", first.end)]
    channel = ToolChannel([now], tok, PAD)
    Script(channel, ids, after_response=PAD).run(len(ids) + 60)  # the model never says EOTR: the exchange ends
    assert channel.records()[0].eotr is False and not channel.pending() and not channel.holds_user_audio()


def test_channel_ignores_pad_inside_a_call_and_restarts_on_sotc(tok):
    body = tok.encode('<TOOLCALL>[{"name": "now"}]</TOOLCALL>')
    ids = [SOTC] + tok.encode("garbage") + [SOTC] + body[:3] + [PAD, PAD] + body[3:] + [EOTC]
    channel = ToolChannel([Tool("now", "Now.", fn=lambda: 1)], tok, PAD)
    Script(channel, ids).run(len(ids) + 40)
    call = channel.records()[0]
    assert call.raw == '<TOOLCALL>[{"name": "now"}]</TOOLCALL>' and call.result == 1 and call.call_start == 0


def test_channel_client_run_tools(tok):
    remote = Tool("lookup", "Looked up by the client.", {"type": "object", "properties": {"q": {"type": "string"}}})
    channel = ToolChannel([remote], tok, PAD)
    ids = call_ids(tok, [{"name": "lookup", "arguments": {"q": "tides"}}])
    events = []
    for t, f in enumerate(ids):
        events += step(channel, t, TEXT, f)[3]
    (call,) = events[-1].calls
    assert events[-1].kind == "call" and call.arguments == {"q": "tides"} and channel.paused()
    with pytest.raises(ToolError, match="must be a string"):
        channel.provide_result(call.call_id, {"high": "6am"})
    with pytest.raises(ToolError, match="no tool call 'call_x'"):
        channel.provide_result("call_x", "{}")
    # refused by its length before it is parsed or tokenized (the engine thread tokenized it whole); the call waits
    with pytest.raises(ToolError, match=f"has {MAX_RESULT_CHARS + 1} characters"):
        channel.provide_result(call.call_id, "x" * (MAX_RESULT_CHARS + 1))
    channel.provide_result(call.call_id, '{"high": "6am"}')
    with pytest.raises(ToolError, match="is waiting"):
        channel.provide_result(call.call_id, "again")
    assert not channel.paused()
    assert step(channel, len(ids), TEXT, NOISE)[3][0].calls[0].result == {"high": "6am"}


def test_channel_needs_nvidias_tool_tokens():
    # NVIDIA's tiny NeMo fixture tokenizer stops at <SPECIAL_15>
    tok = TextTokenizer(FIXTURES / "tiny_model" / "tokenizer.json")
    with pytest.raises(ConfigError, match="no <SPECIAL_20> .start of tool call."):
        ToolChannel([WEATHER], tok, PAD)


def test_channel_passes_everything_through_without_calls(tok):
    channel = ToolChannel([WEATHER], tok, PAD)
    rng = random.Random(0)
    for t in range(200):
        f = rng.choice([PAD, EOTC, EOTR, 50, 77])  # EOTC and EOTR outside an exchange mean nothing
        assert step(channel, t, t, f) == (False, t, f, ()) and not channel.holds_user_audio()


# ----------------------------------------------------------------------------------------------------------------
# built-in tools
# ----------------------------------------------------------------------------------------------------------------
def random_expression(rng: random.Random, depth: int = 0) -> str:
    if depth > 3 or rng.random() < 0.3:
        return rng.choice([str(rng.randint(0, 99)), f"{rng.randint(0, 99)}.{rng.randint(0, 9)}"])
    kind = rng.random()
    if kind < 0.1:
        return f"-{random_expression(rng, depth + 1)}"
    if kind < 0.2:
        return f"({random_expression(rng, depth + 1)})"
    if kind < 0.3:
        return f"({random_expression(rng, depth + 1)}) ** {rng.randint(0, 3)}"
    op = rng.choice(["+", "-", "*", "/", "//", "%"])
    return f"{random_expression(rng, depth + 1)} {op} {random_expression(rng, depth + 1)}"


def python_value(expression: str):
    try:
        return eval(expression, {"__builtins__": {}})  # the reference: Python's arithmetic on generated numbers
    except ZeroDivisionError:
        return ZeroDivisionError


def test_calculator_agrees_with_python_arithmetic():
    rng = random.Random(1234)
    checked = 0
    for _ in range(3000):
        expression = random_expression(rng)
        expected = python_value(expression)
        if expected is ZeroDivisionError:
            with pytest.raises(CalculatorError, match="division by zero"):
                evaluate(expression)
            continue
        got = evaluate(expression)
        assert type(got) is type(expected) and (got == expected or (math.isnan(got) and math.isnan(expected))), \
            expression
        checked += 1
    assert checked > 2000


@pytest.mark.parametrize("expression, expected", [
    ("sqrt(2) * 10 ** 3", math.sqrt(2) * 10 ** 3), ("log(8, 2)", math.log(8, 2)), ("log(e)", 1.0),
    ("sin(pi / 6)", math.sin(math.pi / 6)), ("atan2(1, 1)", math.atan2(1, 1)), ("factorial(20)", math.factorial(20)),
    ("round(2.567, 2)", round(2.567, 2)), ("max(3, 9, 4) - min(2, 8)", 7), ("hypot(3, 4)", 5.0),
    ("2^10 + 1", 1025), ("-2^2", -4), ("2 ** -1", 0.5), ("7 // 2 + 7 % 2", 4), ("tau / 2", math.pi),
])
def test_calculator_functions(expression, expected):
    assert evaluate(expression) == expected


@pytest.mark.parametrize("expression, reason", [
    ("(1).__class__", "not allowed"), ("__import__('os')", "not allowed"), ("open('x')", "not allowed"),
    ("x + 1", "not allowed"), ("'a' * 3", "not allowed"), ("lambda: 1", "not allowed"),
    ("[i for i in range(9)]", "not allowed"), ("1 < 2", "not allowed"), ("True + 1", "not allowed"),
    ("sqrt(x=4)", "not allowed"), ("max(*[1])", "not allowed"), ("1j * 2", "not allowed"),
    ("9 ** 9 ** 9", "too large"), ("10 ** 100000", "too large"), ("2.0 ** 10000", "too large"),
    ("factorial(10 ** 6)", "limited to 1000"), ("(-8) ** 0.5", "not a real number"), ("1 / 0", "division by zero"),
    ("sqrt(-1)", "cannot compute"), ("(" * 300 + "1" + ")" * 300, "longer than 500"),
    ("-" * 200 + "1", "nested too deeply"), ("2 +", "not an arithmetic expression"),
])
def test_calculator_refuses(expression, reason):
    with pytest.raises(CalculatorError, match=reason):
        evaluate(expression)


def test_calculate_tool_result_reads_aloud():
    assert calculate(expression="0.1 + 0.2") == {"expression": "0.1 + 0.2", "result": 0.3}
    assert calculate(expression="10 / 4") == {"expression": "10 / 4", "result": 2.5}
    assert calculate(expression="10 / 2")["result"] == 5 and isinstance(calculate(expression="10 / 2")["result"], int)


INCH, POUND, GALLON_L = 0.0254, 0.45359237, 3.785411784  # exact definitions (international inch and pound, US gallon)


@pytest.mark.parametrize("value, a, b, expected", [
    (1, "mile", "km", 5280 * 12 * INCH / 1000), (100, "km", "miles", 100_000 / (5280 * 12 * INCH)),
    (1, "foot", "cm", 30.48), (1, "nautical miles", "m", 1852), (3, "yd", "in", 108), (5, "µm", "mm", 0.005),
    (1, "lb", "g", 453.59237), (1, "stone", "kg", 14 * POUND), (16, "ounces", "pound", 1), (2.5, "t", "kg", 2500),
    (1, "US gallon", "L", GALLON_L), (1, "imperial gallon", "litres", 4.54609), (1, "cup", "ml", GALLON_L * 1000 / 16),
    (1, "tablespoon", "tsp", 3), (2, "pints", "quart", 1), (1, "fl oz", "ml", GALLON_L * 1000 / 128),
    (1, "m3", "l", 1000), (1, "knot", "km/h", 1.852), (60, "mph", "m/s", 60 * 5280 * 12 * INCH / 3600),
    (10, "m/s", "km/h", 36), (1, "ft/s", "m/s", 0.3048),
    (1, "day", "s", 86400), (1, "year", "days", 365.25), (90, "minutes", "hours", 1.5), (1, "week", "h", 168),
    (212, "°F", "°C", 100), (98.6, "degrees Fahrenheit", "celsius", 37), (0, "C", "K", 273.15),
    (-40, "F", "C", -40), (0, "kelvin", "°F", -459.67), (300, "K", "celsius", 26.85),
])
def test_unit_conversions_against_definitions(value, a, b, expected):
    result = convert_units(value=value, from_unit=a, to_unit=b)["result"]
    assert result == float(f"{expected:.6g}"), (a, b)


def test_unit_errors_and_spellings():
    with pytest.raises(ValueError, match="unknown unit 'furlong'"):
        convert_units(value=1, from_unit="furlong", to_unit="m")
    with pytest.raises(ValueError, match=r"cannot convert length \(km\) to mass \(kg\)"):
        convert_units(value=1, from_unit="km", to_unit="kg")
    for table in (UNITS, TEMPERATURES):  # no spelling of one unit is taken by another
        for symbol, row in table.items():
            for name in (symbol, *row[2]):
                assert NAMES[spelling(name)] == symbol, name


@pytest.mark.parametrize("utc, zone, date, weekday, time, offset", [
    (dt.datetime(2024, 7, 1, 12, 0), "Europe/Paris", "2024-07-01", "Monday", "14:00", "+02:00"),  # summer time
    (dt.datetime(2024, 1, 15, 12, 0), "Europe/Paris", "2024-01-15", "Monday", "13:00", "+01:00"),
    (dt.datetime(2024, 7, 1, 12, 0), "America/New_York", "2024-07-01", "Monday", "08:00", "-04:00"),
    (dt.datetime(2024, 7, 1, 12, 0), "Asia/Kolkata", "2024-07-01", "Monday", "17:30", "+05:30"),
    (dt.datetime(2024, 7, 1, 12, 0), "Pacific/Kiritimati", "2024-07-02", "Tuesday", "02:00", "+14:00"),
    (dt.datetime(2024, 3, 31, 0, 59), "Europe/London", "2024-03-31", "Sunday", "00:59", "+00:00"),
    (dt.datetime(2024, 3, 31, 1, 0), "Europe/London", "2024-03-31", "Sunday", "02:00", "+01:00"),  # clocks go on
])
def test_time_in_time_zones(utc, zone, date, weekday, time, offset):
    described = describe_time(utc.replace(tzinfo=dt.timezone.utc), zone)
    assert (described["date"], described["weekday"], described["time"], described["utc_offset"]) == \
        (date, weekday, time, offset)
    assert dt.datetime.fromisoformat(described["iso"]) == utc.replace(tzinfo=dt.timezone.utc)


def test_current_time_tool():
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    now = get_current_time(timezone="Asia/Tokyo")
    after = dt.datetime.now(dt.timezone.utc)
    assert before <= dt.datetime.fromisoformat(now["iso"]) <= after and now["utc_offset"] == "+09:00"
    assert get_current_time()["timezone"].startswith("this computer's")
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        get_current_time(timezone="Mars/Olympus")


def test_builtin_tools_declare_cleanly():
    assert [t.name for t in BUILTIN_TOOLS] == ["get_current_time", "calculate", "convert_units"]
    assert "<AVAILABLE_TOOLS>" in system_prompt("", BUILTIN_TOOLS)


# ----------------------------------------------------------------------------------------------------------------
# in a session, on the real tiny model, with the function head scripted through the test seam
# ----------------------------------------------------------------------------------------------------------------
CHUNK = 2560  # samples fed per call (two 80 ms frames)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tools") / "model", seed=0)


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return voicechat.load(tiny_dir, offline=True)


def noise(seconds: float, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(16000 * seconds)) * 0.1).astype(np.float32)


class ScriptedHead:
    """The function head of the tests: it writes each call (SOTC, the call's tokens, EOTC) after ``gap`` quiet
    positions, predicts EOTR after a response, and PAD otherwise. The ToolChannel overrides it while it injects."""

    def __init__(self, tok, calls: list[str], first: int = 5, gap: int = 3):
        self.tok, self.calls, self.gap = tok, list(calls), gap
        self.queue, self.wait, self.session = [], first, None

    def __call__(self, t: int) -> tuple:
        """The session's script seam: (text id or None, function id or None) for position t."""
        if self.session is None or t < self.session.prompt_frames:
            return None, None  # the session's prompt
        return None, self.function_id()

    def function_id(self) -> int:
        if self.queue:
            return self.queue.pop(0)
        if self.session.tool_channel.pending():
            return EOTR
        self.wait -= 1
        if self.wait <= 0 and self.calls:
            self.queue, self.wait = [SOTC] + self.tok.encode(self.calls.pop(0)) + [EOTC], self.gap
            return self.queue.pop(0)
        return PAD


class LLMInputs:
    """A spy on the LLM step (the real step runs): each position's user-audio input and previous text and function
    ids, i.e. what enters the fused input (docs/model.md §1.2 F)."""

    def __init__(self):
        self.rows = []

    def __enter__(self):
        self.real = lm.step

        def step(stt, cfg, state, audio, prev_text, prev_func, active=None):
            self.rows.append((np.array(audio[0]), int(prev_text.item()), int(prev_func.item())))
            return self.real(stt, cfg, state, audio, prev_text, prev_func, active)

        lm.step = step
        return self

    def __exit__(self, *exc):
        lm.step = self.real


STORY_CALLS = [
    '<TOOLCALL>[{"name": "add", "arguments": {"a": 40, "b": "2"}}]</TOOLCALL>',
    '<TOOLCALL>[{"name": "wait"}]</TOOLCALL>',
    '<TOOLCALL>[{"name": "lookup", "arguments": {"q": "tides"}}]</TOOLCALL>',
    '<TOOLCALL>[{"name": "add", "arguments": {"a": 1</TOOLCALL>',
    '<TOOLCALL>[{"name": "multiply"}]</TOOLCALL>',
    '<TOOLCALL>[{"name": "add", "arguments": {"a": "x", "b": 1}}]</TOOLCALL>',
    '<TOOLCALL>[{"name": "boom"}]</TOOLCALL>',
]
# what the model must read back for each call (None: the record's own error, checked separately)
STORY_RESPONSES = [
    [{"sum": 42}],
    [{"error": "timeout", "message": "I'm sorry, that's taking longer than expected."}],  # NVIDIA's canned answer
    [{"high": "6am"}],
    None,
    [{"error": "unknown tool 'multiply' (available: add, wait, lookup, boom)"}],
    [{"error": "bad arguments for add: arguments.a: expected integer, got string"}],
    [{"error": "'missing'"}],
]


@pytest.fixture(scope="module")
def story(tiny):
    """One live session with seven tool exchanges, fed 160 ms at a time: a success, a timeout, a client-run tool
    (the session paused until its result), a malformed call, an unknown tool, bad arguments and an exception (an
    over-long call or result: the ToolChannel tests above). Plus the same audio through a session without tools, for
    the user frames."""
    runs, gate = [], threading.Event()

    @tool
    def add(a: int, b: int) -> dict:
        """Add two integers."""
        runs.append((a, b))
        return {"sum": a + b}

    tools = [add, Tool("wait", "Waits.", fn=gate.wait, timeout=0.2), Tool("lookup", "Looked up by the client.",
             {"type": "object", "properties": {"q": {"type": "string"}}}),
             Tool("boom", "Fails.", fn=lambda: {}["missing"])]
    audio = noise(3.0)
    head = ScriptedHead(tiny.tokenizer, STORY_CALLS)
    paused_feeds = []
    with LLMInputs() as spy:
        s = Session(tiny, "", 0, None, None, tools, script=head)
        head.session = s
        frames = []
        for i in range(0, len(audio), CHUNK):
            frames += s.feed(audio[i:i + CHUNK], 16000)
            if not s.tool_channel.paused():
                continue
            last = s.tool_calls[-1]
            if last.name == "lookup" and not paused_feeds:  # answered by the client, later: the session waits
                paused_feeds.append(len(s.heard))
                continue
            if last.name == "lookup" and len(paused_feeds) < 3:
                paused_feeds.append(len(s.heard))
                if len(paused_feeds) < 3:
                    continue
                s.provide_tool_result(last.call_id, '{"high": "6am"}')
                frames += s.poll()
            else:
                frames += s.settle()
        frames += s.flush()
        told = s.result()
    with LLMInputs() as plain_spy:
        plain = Session(tiny, "Hi.", 0)
        for i in range(0, len(audio), CHUNK):
            plain.feed(audio[i:i + CHUNK], 16000)
        plain.flush()
    gate.set()
    return dict(session=s, frames=frames, result=told, spy=spy.rows, plain=plain_spy.rows, runs=runs,
                plain_result=plain.result(),
                paused_feeds=paused_feeds, tok=tiny.tokenizer, tiny=tiny)


def test_session_catches_each_call_and_runs_it_once(story):
    calls = story["session"].tool_calls
    assert [c.name for c in calls] == ["add", "wait", "lookup", "", "multiply", "add", "boom"]
    assert story["runs"] == [(40, 2)]  # add ran once ("2" converted); the bad-arguments call never ran it
    assert calls[0].result == {"sum": 42} and calls[0].error is None
    assert calls[3].error.startswith("the tool call is not valid JSON")
    assert all(c.end is not None and c.eotr for c in calls)
    assert story["result"].tool_calls == tuple(calls)


def test_session_injects_each_response_where_the_layout_says(story):
    s, tok, spy = story["session"], story["tok"], story["spy"]
    first = s.prompt_frames  # spy rows hold the positions after the prompt
    fed_func = {first + i: row[2] for i, row in enumerate(spy)}  # position -> function id in its fused input
    fed_text = {first + i: row[1] for i, row in enumerate(spy)}
    frames = {f.position: f for f in story["frames"]}
    for call, expected in zip(s.tool_calls, STORY_RESPONSES):
        p, e = call.call_start, call.call_end
        response = tok.encode(response_text(expected if expected is not None else [{"error": call.error}]))
        m = len(response)
        assert (call.injection_start, call.injection_end, call.end) == (e + 1, e + 1 + m, e + 1 + m)
        assert [frames[t].function_id for t in range(e + 1, e + 1 + m)] == response  # kept at e+1 .. e+m
        assert [fed_func[t] for t in range(e + 2, e + 2 + m)] == response  # read by the next positions
        assert fed_func[e + 1] == EOTC and fed_func[e + m + 2] == EOTR
        assert frames[p].function_id == SOTC and frames[e].function_id == EOTC
        # the text channel is PAD from SOTC through the EOTR position, for the TTS and the next inputs
        assert all(frames[t].text_id == PAD for t in range(p, e + m + 2))
        assert all(fed_text[t] == PAD for t in range(p + 1, e + m + 3))
        kinds = [(ev.kind, pos) for pos in (p, e, e + 1, e + m + 1) for ev in frames[pos].events]
        assert kinds == [("call_start", p), ("call", e), ("result", e + 1), ("end", e + m + 1)]


def test_session_holds_the_users_audio_and_drops_none(story, tiny):
    s, spy = story["session"], story["spy"]
    silence = np.array(tiny.net.stt_model.perception(mx.zeros((1, 16000)), mx.array([16000]))[0][0, 0])
    held = {t for c in s.tool_calls for t in range(c.call_start + 1, c.end + 1)}
    first = s.prompt_frames
    assert len(held) == s.held and story["result"].held_positions == tuple(sorted(held))  # the timeline reads them
    for t in held:
        assert np.array_equal(spy[t - first][0], silence)
    heard = [row[0] for i, row in enumerate(spy) if first + i not in held]
    plain = [row[0] for row in story["plain"]]
    assert len(heard) == len(plain) and all(np.array_equal(a, b) for a, b in zip(heard, plain))
    assert story["result"].input_frames == story["plain_result"].input_frames  # held positions are not input


def test_session_feed_returns_while_a_tool_runs(story):
    # after the client tool's call, two more feeds returned at once and their frames waited, none run
    waiting = story["paused_feeds"]
    assert len(waiting) == 3 and waiting[0] < waiting[1] < waiting[2]
    assert waiting[2] - waiting[0] == 2 * CHUNK // 1280


def test_session_result_is_json(story):
    """The conversation record (the CLI's --json, the app's conversation.json) carries the calls."""
    record = conversation_json(make_answer(story["tiny"], story["result"], 1.0), source="cli", model="tiny",
                               input_file="x.wav", input_sample_rate=16000, input_seconds=3.0, system_prompt="",
                               seed=0, generation_config=voicechat.GenerationConfig())
    back = json.loads(json.dumps(record))
    assert [c["name"] for c in back["tool_calls"]] == ["add", "wait", "lookup", "", "multiply", "add", "boom"]
    assert back["tool_calls"][0]["injection_start"] == story["session"].tool_calls[0].injection_start
    assert [t["name"] for t in back["settings"]["tools"]] == ["add", "wait", "lookup", "boom"]


def test_generate_with_tools_waits_for_the_exchange(tiny):
    @tool
    def add(a: int, b: int) -> dict:
        """Add two integers."""
        return {"sum": a + b}

    tok = tiny.tokenizer
    p = tiny.prompt_length(system_prompt("", [add])) + 4
    ids = [SOTC] + tok.encode('<TOOLCALL>[{"name": "add", "arguments": {"a": 2, "b": 3}}]</TOOLCALL>') + [EOTC]
    e, m = p + len(ids) - 1, len(tok.encode(response_text([{"sum": 5}])))
    script = {p + i: f for i, f in enumerate(ids)} | {e + m + 1: EOTR}
    x = noise(1.0, seed=1)
    r = tiny._generate(x, 16000, "", 0, None, voicechat.GenerationConfig(max_extra_seconds=1.0), None, [add],
                       script=lambda t: (None, script.get(t, PAD)))
    (call,) = r.tool_calls
    assert (call.call_start, call.call_end, call.injection_start, call.end, call.result) == (p, e, e + 1, e + m + 1,
                                                                                              {"sum": 5})
    fn = r.function_tokens
    assert list(fn[e + 1 - r.first_frame:e + 1 + m - r.first_frame]) == tok.encode(response_text([{"sum": 5}]))
    assert (r.text_tokens[p - r.first_frame:e + m + 2 - r.first_frame] == PAD).all()
    assert r.input_frames == 13 and len(r.text_tokens) > e + m + 2 - r.first_frame  # 1 s: 12.5 frames of 80 ms


def test_session_with_tools_needs_a_function_head(tiny):
    with pytest.raises(ToolError, match="at most 5 tools"):
        tiny.session("", tools=[Tool(f"t{i}", "x") for i in range(6)])
    nemo = voicechat.load(FIXTURES / "tiny_model")  # NVIDIA's tiny NeMo 3.0.0 checkpoint has no function head
    with pytest.raises(ConfigError, match="no function head, so its model cannot call tools"):
        nemo.session("", tools=[WEATHER])


def test_live_conversation_with_a_client_tool(tiny_dir, tiny):
    engine = eng.Engine(eng.hub_model(str(tiny_dir), offline=True), name="tools").start()
    try:
        lookup = Tool("lookup", "Looked up by the client.")
        live = engine.open_live(eng.LiveRequest(tools=(lookup,)))
        ready = None
        while ready is None or ready.kind != eng.READY:
            ready = live.next_event(timeout=60)
        assert ready.prompt_frames == tiny.prompt_length(system_prompt("", [lookup]))
        live.send(np.zeros(1280 * 2, np.float32), 16000)
        live.provide_tool_result("call_nobody", "{}")  # no call waits for it (late or unknown): dropped
        live.send(np.zeros(1280 * 2, np.float32), 16000)
        live.flush()
        events = []
        while not events or events[-1].kind != eng.CLOSED:
            events.append(live.next_event(timeout=60))
        assert not [e for e in events if e.kind == eng.ERROR]  # the conversation went on to its end
        assert sum(len(e.frames) for e in events if e.kind == eng.FRAMES) >= 4
        assert live.result().tool_calls == ()
    finally:
        engine.close()


def test_cli_tools(tiny_dir, tiny, tmp_path, capsys):
    module = tmp_path / "mytools.py"
    module.write_text("from voicechat.tools import tool\n\n"
                      "@tool\ndef echo(text: str) -> str:\n    '''Echo.'''\n    return text\n")
    js = tmp_path / "out.json"
    wav = tmp_path / "q.wav"
    sf.write(wav, noise(0.5, seed=2), 16000)
    assert main(["generate", "--model", str(tiny_dir), "--audio", str(wav), "--tools-module", str(module), "--json",
                 str(js), "--output-audio", str(tmp_path / "a.wav"), "--extra-seconds", "0.2", "--quiet",
                 "--offline"]) == 0
    info = json.loads(js.read_text())
    assert [t["name"] for t in info["settings"]["tools"]] == ["echo"] and isinstance(info["tool_calls"], list)
    assert info["prompt_frames"] == tiny.prompt_length(system_prompt("", load_tools_module(module)))
    (tmp_path / "three.py").write_text("from voicechat.tools import Tool\n"
                                       "a, b, c = Tool('a', 'A.'), Tool('b', 'B.'), Tool('c', 'C.')\n")
    capsys.readouterr()
    assert main(["generate", "--model", str(tiny_dir), "--audio", str(wav), "--tools", "builtin", "--tools-module",
                 str(tmp_path / "three.py"), "--output-audio", str(tmp_path / "b.wav")]) == 2
    assert capsys.readouterr().err.strip() == "error: at most 5 tools per conversation (got 6): pass fewer"
