"""Reading the model's calls from the function channel's text, checking them against the declared tools, and
writing the response text the model reads back (docs/tools.md §2 and §4)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional, Sequence

from .declare import Tool
from .schema import coerce, validate

OPEN_TAG, CLOSE_TAG = "<TOOLCALL>", "</TOOLCALL>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<TOOL_RESPONSE>", "</TOOL_RESPONSE>"
# NVIDIA's streaming pipeline answers a tool that outlives its timeout with this (NV-PIPE L1730-1736)
TIMEOUT_RESULT = {"error": "timeout", "message": "I'm sorry, that's taking longer than expected."}


@dataclass(frozen=True)
class ParsedCall:
    """One call read from the channel: a name and arguments, or the error that makes it unusable."""

    name: str
    arguments: Optional[dict]
    error: Optional[str] = None


def call_json(text: str) -> str:
    """The JSON inside ``<TOOLCALL>...</TOOLCALL>`` (the text itself when the tags are absent; NV-OFF L216-221)."""
    text = text.strip()
    if OPEN_TAG in text:
        text = text.split(OPEN_TAG, 1)[1]
    return text.split(CLOSE_TAG, 1)[0].strip()


def parse_calls(text: str) -> list[ParsedCall]:
    """The calls in a decoded SOTC..EOTC span: a JSON list of ``{"name", "arguments"}`` objects or one such object.
    Never raises: what cannot be read comes back as a ParsedCall with an error."""
    body = call_json(text)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return [ParsedCall("", None, f"the tool call is not valid JSON ({e.msg} at character {e.pos}): {body[:120]}")]
    entries = data if isinstance(data, list) else [data]
    if not entries:
        return [ParsedCall("", None, "the tool call lists no calls")]
    return [parse_entry(entry) for entry in entries]


def parse_entry(entry: Any) -> ParsedCall:
    if not isinstance(entry, dict):
        return ParsedCall("", None, f"a tool call must be an object with a name, not {json.dumps(entry)[:80]}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParsedCall("", None, "a tool call has no name")
    # NVIDIA's pipeline falls back to "parameters" (NV-PIPE L755); a JSON string of an object is accepted (VO-D)
    arguments = entry.get("arguments", entry.get("parameters", {}))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return ParsedCall(name, None, f"the arguments of {name} are not valid JSON")
    if not isinstance(arguments, dict):
        return ParsedCall(name, None, f"the arguments of {name} must be an object")
    return ParsedCall(name, arguments)


def resolve(call: ParsedCall, tools: Mapping[str, Tool]) -> tuple[Optional[Tool], ParsedCall]:
    """The declared tool a call names and the call with its arguments converted and checked, or (None, the call
    with an error)."""
    if call.error:
        return None, call
    found = tools.get(call.name) or tools.get(call.name.replace("-", "_"))  # "get-weather" (NV-PIPE L763)
    if found is None:
        known = ", ".join(tools) or "none"
        return None, replace(call, error=f"unknown tool {call.name!r} (available: {known})")
    arguments = coerce(call.arguments, found.parameters)
    problem = validate(arguments, found.parameters)
    if problem:
        return None, replace(call, name=found.name, arguments=arguments,
                             error=f"bad arguments for {found.name}: {problem}")
    return found, replace(call, name=found.name, arguments=arguments)


def json_value(output: Any) -> Any:
    """What a tool's output becomes in the response: a string that holds JSON is that JSON (VO-A
    ``_render_tool_response``), anything else is used as it is."""
    if isinstance(output, str):
        try:
            return json.loads(output)
        except json.JSONDecodeError:
            return output
    return output


def response_text(values: Sequence[Any]) -> str:
    """``<TOOL_RESPONSE>[r1, r2, ...]</TOOL_RESPONSE>`` with json's default separators and ASCII escapes, the bytes
    NVIDIA's pipeline and offline example inject (NV-PIPE L1751, NV-OFF L236-237)."""
    return RESPONSE_OPEN + json.dumps(list(values)) + RESPONSE_CLOSE


def bounded_response(values: Sequence[Any], encode: Callable[[str], list[int]],
                     limit: int) -> tuple[list[int], dict[int, str]]:
    """The response's token ids, at most ``limit`` of them, and {index: error} for the results replaced to get
    there: the longest result becomes an error object until the response fits; if even all-error results do not
    fit, the response is one error object."""
    values = list(values)
    replaced: dict[int, str] = {}
    ids = encode(response_text(values))
    while len(ids) > limit:
        sizes = [(len(encode(json.dumps(v))), i) for i, v in enumerate(values) if i not in replaced]
        if not sizes:
            every = "the results are too long for the model"
            return encode(response_text([{"error": every}])), {i: every for i in range(len(values))}
        size, i = max(sizes)
        replaced[i] = f"the result is too long for the model ({size} tokens; the response may have {limit})"
        values[i] = {"error": replaced[i]}
        ids = encode(response_text(values))
    return ids, replaced
