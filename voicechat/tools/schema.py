"""The JSON-schema subset that tool parameters use: a check of the schema when a tool is declared, and a check of
the model's arguments against it when the tool is called (docs/tools.md §2).

Checked keywords: ``type`` (one name or a list), ``properties``, ``required``, ``enum``, ``items``,
``additionalProperties`` (false or a schema), ``minimum``, ``maximum``. Other keywords (``description``, ``format``,
``default`` ...) reach the model in the system prompt but are not checked.
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional

from ..errors import ToolError

# "dict" and "float" are the BFCL spellings found in NVIDIA's function-calling data (NV-DATA add_minimal_batch_fc_data)
ALIASES = {"dict": "object", "float": "number"}
TYPE_NAMES = ("object", "array", "string", "integer", "number", "boolean", "null")
INTEGER = re.compile(r"-?\d+")


def type_names(schema: dict) -> list[str]:
    """The schema's ``type`` as a list of canonical names ([] when the schema allows any type)."""
    t = schema.get("type")
    names = [] if t is None else [t] if isinstance(t, str) else list(t)
    return [ALIASES.get(n, n) for n in names]


def check_schema(schema: Any, where: str) -> None:
    """Raise ToolError (one line naming ``where``) unless ``schema`` is a schema this module can check."""
    if not isinstance(schema, dict):
        raise ToolError(f"{where}: a schema must be a JSON object (a dict), not {type(schema).__name__}")
    t = schema.get("type")
    if t is not None and not (isinstance(t, str) or (isinstance(t, list) and all(isinstance(n, str) for n in t))):
        raise ToolError(f"{where}: 'type' must be a type name or a list of them")
    for name in type_names(schema):
        if name not in TYPE_NAMES:
            raise ToolError(f"{where}: unknown type {name!r} (use one of {', '.join(TYPE_NAMES)})")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolError(f"{where}: 'properties' must map names to schemas")
    for key, sub in properties.items():
        check_schema(sub, f"{where}.{key}")
    required = schema.get("required", [])
    if not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        raise ToolError(f"{where}: 'required' must be a list of property names")
    if "enum" in schema and not (isinstance(schema["enum"], list) and schema["enum"]):
        raise ToolError(f"{where}: 'enum' must be a non-empty list")
    if "items" in schema:
        check_schema(schema["items"], f"{where}[]")
    extra = schema.get("additionalProperties", True)
    if not isinstance(extra, bool):
        check_schema(extra, f"{where}.*")
    for bound in ("minimum", "maximum"):
        if bound in schema and not is_number(schema[bound]):
            raise ToolError(f"{where}: {bound!r} must be a number")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_type(value: Any) -> str:
    """The JSON type name of a parsed JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def matches_type(value: Any, name: str) -> bool:
    if name == "integer":
        return json_type(value) == "integer" or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return is_number(value)
    return json_type(value) == name


def validate(value: Any, schema: dict, path: str = "arguments") -> Optional[str]:
    """The first way ``value`` breaks ``schema``, as one line naming its path; None when it conforms."""
    names = type_names(schema)
    if names and not any(matches_type(value, n) for n in names):
        return f"{path}: expected {' or '.join(names)}, got {json_type(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}: must be one of {', '.join(repr(v) for v in schema['enum'])}"
    if is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path}: must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path}: must be at most {schema['maximum']}"
    if isinstance(value, dict):
        return validate_object(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problem = validate(item, schema["items"], f"{path}[{i}]")
            if problem:
                return problem
    return None


def validate_object(value: dict, schema: dict, path: str) -> Optional[str]:
    properties = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in value:
            return f"{path}.{key}: required"
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            problem = validate(item, properties[key], f"{path}.{key}")
        elif extra is False:
            problem = f"{path}.{key}: unexpected (allowed: {', '.join(properties) or 'none'})"
        elif isinstance(extra, dict):
            problem = validate(item, extra, f"{path}.{key}")
        else:
            problem = None
        if problem:
            return problem
    return None


def coerce(value: Any, schema: dict) -> Any:
    """``value`` with the losslessly convertible scalars converted to the schema's type: "12" -> 12 for an integer,
    "2.5" -> 2.5 for a number, "true" -> True for a boolean, 3.0 -> 3 for an integer. NVIDIA's function head
    sometimes writes numbers as strings, and NVIDIA's own tools cast them (docs/tools.md §2). Anything else is
    returned unchanged for ``validate`` to judge."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        return {k: coerce(v, properties[k]) if k in properties else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [coerce(v, schema["items"]) for v in value]
    names = type_names(schema)
    if "integer" in names and isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, str) or not names or "string" in names:
        return value
    text = value.strip()
    if "integer" in names and INTEGER.fullmatch(text):
        return int(text)
    if "number" in names:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return number
    if "boolean" in names and text.lower() in ("true", "false"):
        return text.lower() == "true"
    return value
