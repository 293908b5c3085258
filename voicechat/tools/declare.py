"""Declaring tools: ``Tool``, the ``@tool`` decorator, the system-prompt block the model reads, and loading the tools
of a user's Python file (docs/tools.md §1)."""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from ..errors import ToolError
from .schema import check_schema

MAX_TOOLS = 5  # vllm-omni and speech-swift allow 5 tools per session (docs/live.md §2)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, what it does, its parameters as a JSON schema (an object schema),
    and the Python function that runs it, called with the arguments as keyword arguments. A tool without ``fn`` is
    run by the caller, who hands its output to the session (``provide_result``). ``timeout``: seconds before a call
    is answered with a timeout error (None: the session's, 15 s)."""

    name: str
    description: str
    parameters: dict = field(default_factory=lambda: dict(EMPTY_PARAMETERS))
    fn: Optional[Callable[..., Any]] = field(default=None, compare=False)
    timeout: Optional[float] = field(default=None, compare=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise ToolError(f"tool name {self.name!r} is not usable: use 1-64 letters, digits, '_', '.' or '-', "
                            "starting with a letter or '_'")
        if not isinstance(self.description, str):
            raise ToolError(f"tool {self.name}: the description must be a string")
        check_schema(self.parameters, f"tool {self.name} parameters")
        if self.parameters.get("type", "object") not in ("object", "dict"):
            raise ToolError(f"tool {self.name}: parameters must be an object schema (\"type\": \"object\")")
        if self.fn is not None and not callable(self.fn):
            raise ToolError(f"tool {self.name}: fn must be callable")
        if self.timeout is not None and not self.timeout > 0:
            raise ToolError(f"tool {self.name}: the timeout must be a positive number of seconds")

    def __call__(self, *args, **kwargs):
        if self.fn is None:
            raise ToolError(f"tool {self.name} has no Python function: its caller runs it")
        return self.fn(*args, **kwargs)

    @classmethod
    def from_dict(cls, spec: dict, fn: Optional[Callable[..., Any]] = None) -> "Tool":
        """A tool from an OpenAI-style declaration: ``{"type": "function", "function": {name, description,
        parameters}}`` (Chat Completions) or ``{"type": "function", name, description, parameters}`` (Realtime)."""
        function = spec.get("function", spec) if isinstance(spec, dict) else None
        if not isinstance(function, dict) or "name" not in function:
            raise ToolError("a tool declaration needs a 'name' (and 'description', 'parameters')")
        return cls(function["name"], function.get("description", ""),
                   function.get("parameters") or dict(EMPTY_PARAMETERS), fn)

    def declaration(self) -> dict:
        """What the system prompt lists for this tool: the function object without its ``type`` (NV-TPL)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def checked_tools(tools: Iterable[Tool]) -> tuple[Tool, ...]:
    """The session's tools, at most MAX_TOOLS with distinct names, else ToolError."""
    tools = tuple(tools)
    for t in tools:
        if not isinstance(t, Tool):
            raise ToolError(f"tools must be voicechat.tools.Tool objects (or @tool functions), not {type(t).__name__}")
    if len(tools) > MAX_TOOLS:
        raise ToolError(f"at most {MAX_TOOLS} tools per conversation (got {len(tools)}): pass fewer")
    names = [t.name for t in tools]
    for name in names:
        if names.count(name) > 1:
            raise ToolError(f"two tools are named {name!r}: give each tool its own name")
    return tools


# ----------------------------------------------------------------------------------------------------------------
# the system prompt (NV-TPL: examples/speechlm2/function_calling/template.jinja)
# ----------------------------------------------------------------------------------------------------------------
CALL_FORMAT = ('<TOOLCALL>[{"name": "tool_name1", "arguments": "tool_args1"}, '
               '{"name": "tool_name2", "arguments": "tool_args2"}]</TOOLCALL>')
RESPONSE_FORMAT = '<TOOL_RESPONSE>[{"tool_response1"}, {"tool_response2"}]</TOOL_RESPONSE>'
HTML_SAFE = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027"))


def tojson(value: Any) -> str:
    """Jinja's ``tojson`` filter, which NV-TPL applies to each tool: sorted keys, json's default separators and
    ASCII escapes, then the four HTML-sensitive characters escaped."""
    text = json.dumps(value, sort_keys=True)
    for char, escape in HTML_SAFE:
        text = text.replace(char, escape)
    return text


def system_prompt(instructions: str, tools: Sequence[Tool]) -> str:
    """The system prompt the model reads: ``instructions`` and, when there are tools, NVIDIA's tool block (the
    ``<AVAILABLE_TOOLS>`` list and the ``<TOOLCALL>`` / ``<TOOL_RESPONSE>`` format lines), byte for byte as NVIDIA's
    template renders it."""
    tools = checked_tools(tools)
    if not tools:
        return instructions
    listed = ", ".join(tojson(t.declaration()) for t in tools)
    return (instructions + ("\n\n" if instructions != "" else "")
            + "You can use the following tools to assist the user if required:"
            + f"\n<AVAILABLE_TOOLS>[{listed}]</AVAILABLE_TOOLS>\n\n"
            + f"If you decide to call any tool(s), use the following format:\n{CALL_FORMAT}\n\n"
            + "The user will execute tool-calls and return responses from tool(s) in this format:\n"
            + f"{RESPONSE_FORMAT}\n\n"
            + "Based on the tool responses, you can call additional tools if needed, correct tool calls if any errors "
              "are found, or just respond to the user.")


# ----------------------------------------------------------------------------------------------------------------
# @tool: a schema from a function's signature and docstring
# ----------------------------------------------------------------------------------------------------------------
SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def annotation_schema(annotation: Any, where: str) -> dict:
    """JSON schema of a parameter annotation: str, int, float, bool, list[...], dict, Literal[...], Optional[...]."""
    if annotation in SCALARS:
        return {"type": SCALARS[annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is list or origin is list:
        return {"type": "array", **({"items": annotation_schema(args[0], where)} if args else {})}
    if annotation is dict or origin is dict:
        return {"type": "object"}
    if origin is typing.Literal:
        kinds = {SCALARS.get(type(a)) for a in args}
        if len(kinds) != 1 or None in kinds:
            raise ToolError(f"{where}: Literal values must all be str, int, float or bool of one kind")
        return {"type": kinds.pop(), "enum": list(args)}
    if origin is typing.Union and type(None) in args and len(args) == 2:
        return annotation_schema(next(a for a in args if a is not type(None)), where)
    raise ToolError(f"{where}: annotation {annotation!r} has no JSON schema here (use str, int, float, bool, "
                    "list[...], dict, Literal[...] or Optional[...], or declare Tool(...) with an explicit schema)")


def docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) from a docstring whose ``Args:`` section lists ``name: text``."""
    doc = inspect.cleandoc(doc or "")
    head, _, args = doc.partition("\nArgs:")
    described: dict[str, str] = {}
    name, indent = None, 0
    for line in args.splitlines():
        if line.strip() and not line[0].isspace():
            break  # the next section (Returns:, Raises: ...)
        m = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$", line)
        if m and (name is None or len(line) - len(line.lstrip()) <= indent):
            name, indent = m.group(1), len(line) - len(line.lstrip())
            described[name] = m.group(2).strip()
        elif name and line.strip():
            described[name] = f"{described[name]} {line.strip()}".strip()
    return " ".join(head.split()), described


def tool(fn: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None,
         description: Optional[str] = None, timeout: Optional[float] = None):
    """Make a Python function a Tool. Its parameters' annotations give the schema (no default = required), its
    docstring the description (first part) and the parameters' descriptions (an ``Args:`` section)::

        @tool
        def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> dict:
            '''The weather in a city now.

            Args:
                city: the city's name, for example Paris
                unit: the temperature unit
            '''
    """
    def make(f: Callable[..., Any]) -> Tool:
        where = f"tool {name or f.__name__}"
        hints = typing.get_type_hints(f)
        text, described = docstring_parts(f.__doc__)
        properties, required = {}, []
        for p in inspect.signature(f).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
                raise ToolError(f"{where}: parameter {p.name!r} must be an ordinary named parameter")
            if p.name not in hints:
                raise ToolError(f"{where}: parameter {p.name!r} needs a type annotation")
            schema = annotation_schema(hints[p.name], f"{where}, parameter {p.name!r}")
            if p.name in described:
                schema["description"] = described[p.name]
            properties[p.name] = schema
            if p.default is p.empty:
                required.append(p.name)
        parameters = {"type": "object", "properties": properties, **({"required": required} if required else {})}
        return Tool(name or f.__name__, text if description is None else description, parameters, f, timeout)

    return make if fn is None else make(fn)


def load_tools_module(path) -> list[Tool]:
    """The tools a user's Python file defines at module level (``Tool`` objects and ``@tool`` functions), in
    definition order."""
    path = Path(path)
    if not path.is_file():
        raise ToolError(f"{path} is not a file: pass the path of a Python file that defines tools")
    if path.suffix != ".py":
        raise ToolError(f"{path} is not a Python file (.py): pass the path of a Python file that defines tools")
    spec = importlib.util.spec_from_file_location(f"voicechat_user_tools_{abs(hash(str(path.resolve())))}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SyntaxError) as e:
        raise ToolError(f"{path} could not be imported: {type(e).__name__}: {e}") from None
    tools = [v for v in vars(module).values() if isinstance(v, Tool)]
    if not tools:
        raise ToolError(f"{path} defines no tools: decorate functions with @voicechat.tools.tool "
                        "or create voicechat.tools.Tool objects at module level")
    return tools
