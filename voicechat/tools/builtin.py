"""Tools that do real work on this computer, for the app and the CLI (``--tools builtin``): the date and time in any
time zone, a calculator, and unit conversion. Their results are short JSON objects, made to be read aloud."""

from __future__ import annotations

import ast
import datetime as dt
import math
import operator
import zoneinfo
from typing import Callable, Union

from .declare import Tool, tool

Number = Union[int, float]


# ----------------------------------------------------------------------------------------------------------------
# date and time
# ----------------------------------------------------------------------------------------------------------------
def zone_of(name: str) -> dt.tzinfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder or an over-long name
        raise ValueError(f"unknown time zone {name!r}: use an IANA name such as Europe/Paris") from None


def describe_time(instant: dt.datetime, timezone: str = "") -> dict:
    """``instant`` (timezone-aware) as seen in the IANA zone ``timezone``, or in this computer's zone when empty."""
    local = instant.astimezone(zone_of(timezone)) if timezone else instant.astimezone()
    offset = local.strftime("%z")
    return {"timezone": timezone or f"this computer's ({local.tzname()})", "date": local.date().isoformat(),
            "weekday": local.strftime("%A"), "time": local.strftime("%H:%M"),
            "utc_offset": f"{offset[:3]}:{offset[3:]}", "iso": local.isoformat(timespec="seconds")}


@tool
def get_current_time(timezone: str = "") -> dict:
    """The current date, weekday and time, in a time zone or in this computer's own.

    Args:
        timezone: IANA time zone name, for example Europe/Paris or America/New_York; leave empty for the user's own
    """
    return describe_time(dt.datetime.now(dt.timezone.utc), timezone)


# ----------------------------------------------------------------------------------------------------------------
# calculator: arithmetic on Python's own semantics, evaluated from the syntax tree over a whitelist
# ----------------------------------------------------------------------------------------------------------------
MAX_EXPRESSION = 500  # characters
MAX_DEPTH = 60  # nested operations
MAX_BITS = 10_000  # integers up to ~3000 digits
MAX_FACTORIAL = 1000


class CalculatorError(ValueError):
    """An expression the calculator refuses or cannot evaluate (the message says why, in one line)."""


def checked_number(x) -> Number:
    if isinstance(x, complex):
        raise CalculatorError("the result is not a real number")
    if isinstance(x, int) and x.bit_length() > MAX_BITS:
        raise CalculatorError("the number would be too large")
    if isinstance(x, float) and math.isnan(x):
        raise CalculatorError("the result is not a number")
    return x


def power(base: Number, exponent: Number) -> Number:
    """``base ** exponent``, refused before it is computed when an integer result would exceed MAX_BITS."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if (abs(base).bit_length() - 1) * exponent > MAX_BITS:
            raise CalculatorError("the number would be too large")
    return base ** exponent


def factorial(n: Number) -> int:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or n < 0:
        raise CalculatorError("factorial needs a whole number of at least 0")
    if n > MAX_FACTORIAL:
        raise CalculatorError(f"factorial is limited to {MAX_FACTORIAL}")
    return math.factorial(n)


BINARY: dict[type, Callable] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: power,
}
UNARY: dict[type, Callable] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
FUNCTIONS: dict[str, Callable] = {
    "sqrt": math.sqrt, "cbrt": math.cbrt, "exp": math.exp, "log": math.log, "log10": math.log10,
    "log2": math.log2, "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos,
    "atan": math.atan, "atan2": math.atan2, "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh,
    "degrees": math.degrees, "radians": math.radians, "hypot": math.hypot, "abs": abs, "round": round,
    "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc, "factorial": factorial, "min": min, "max": max,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression, as Python computes it: numbers, + - * / // % ** (and ^ for **),
    parentheses, the functions in FUNCTIONS and the constants pi, e, tau. Anything else (names, attributes,
    strings, comparisons ...) is refused, and so are results beyond MAX_BITS."""
    if len(expression) > MAX_EXPRESSION:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION} characters")
    try:
        # "^" is a power, as on calculators (with the precedence of **, hence a textual replacement)
        tree = ast.parse(expression.replace("^", "**").strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    try:
        return checked_number(node_value(tree.body, 0))
    except CalculatorError:
        raise
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the number would be too large") from None
    except (ValueError, TypeError) as e:
        raise CalculatorError(f"cannot compute {expression!r}: {e}") from None


def node_value(node: ast.AST, depth: int) -> Number:
    if depth > MAX_DEPTH:
        raise CalculatorError("the expression is nested too deeply")
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = node_value(node.left, depth + 1), node_value(node.right, depth + 1)
        return checked_number(BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](node_value(node.operand, depth + 1))
    if isinstance(node, ast.Name) and node.id in CONSTANTS:
        return CONSTANTS[node.id]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
            and not node.keywords and node.args and not any(isinstance(a, ast.Starred) for a in node.args)):
        return checked_number(FUNCTIONS[node.func.id](*(node_value(a, depth + 1) for a in node.args)))
    raise CalculatorError(f"not allowed in a calculation: {ast.unparse(node)[:60]!r}")


def spoken_number(x: Number) -> Number:
    """A result fit to be read aloud: at most 12 significant digits, and whole floats as integers."""
    if isinstance(x, float) and math.isfinite(x):
        x = float(f"{x:.12g}")
        if x.is_integer() and abs(x) < 1e15:
            return int(x)
    return x


@tool
def calculate(expression: str) -> dict:
    """Evaluate an arithmetic expression exactly, for any calculation: + - * / // % ** (or ^), parentheses,
    sqrt, cbrt, exp, log (natural; log(x, base)), log10, log2, sin, cos, tan (radians), asin, acos, atan, atan2,
    sinh, cosh, tanh, degrees, radians, hypot, abs, round, floor, ceil, trunc, factorial, min, max, pi, e, tau.

    Args:
        expression: the expression, for example (17.5 * 3) / 4 or sqrt(2) * 10 ** 3
    """
    return {"expression": expression, "result": spoken_number(evaluate(expression))}


# ----------------------------------------------------------------------------------------------------------------
# unit conversion: exact definitions (SI, international yard and pound, US customary and imperial volumes)
# ----------------------------------------------------------------------------------------------------------------
INCH, POUND, US_GALLON = 0.0254, 0.45359237, 3.785411784e-3  # m, kg, m³ (exact by definition)
UNITS: dict[str, tuple[str, float, tuple[str, ...]]] = {
    # symbol: (quantity, size in the SI unit, other names)
    "m": ("length", 1.0, ("meter", "metre")),
    "km": ("length", 1e3, ("kilometer", "kilometre")),
    "cm": ("length", 1e-2, ("centimeter", "centimetre")),
    "mm": ("length", 1e-3, ("millimeter", "millimetre")),
    "um": ("length", 1e-6, ("µm", "micrometer", "micrometre", "micron")),
    "in": ("length", INCH, ("inch", "inches", '"')),
    "ft": ("length", 12 * INCH, ("foot", "feet", "'")),
    "yd": ("length", 36 * INCH, ("yard",)),
    "mi": ("length", 63360 * INCH, ("mile",)),
    "nmi": ("length", 1852.0, ("nautical mile",)),
    "kg": ("mass", 1.0, ("kilogram", "kilo")),
    "g": ("mass", 1e-3, ("gram", "gramme")),
    "mg": ("mass", 1e-6, ("milligram",)),
    "t": ("mass", 1e3, ("tonne", "metric ton")),
    "lb": ("mass", POUND, ("pound", "lbs")),
    "oz": ("mass", POUND / 16, ("ounce",)),
    "st": ("mass", 14 * POUND, ("stone",)),
    "l": ("volume", 1e-3, ("liter", "litre")),
    "ml": ("volume", 1e-6, ("milliliter", "millilitre")),
    "m3": ("volume", 1.0, ("m³", "cubic meter", "cubic metre")),
    "gal": ("volume", US_GALLON, ("gallon", "us gallon")),
    "imp gal": ("volume", 4.54609e-3, ("imperial gallon", "uk gallon")),
    "qt": ("volume", US_GALLON / 4, ("quart",)),
    "pt": ("volume", US_GALLON / 8, ("pint",)),
    "cup": ("volume", US_GALLON / 16, ()),
    "fl oz": ("volume", US_GALLON / 128, ("fluid ounce",)),
    "tbsp": ("volume", US_GALLON / 256, ("tablespoon",)),
    "tsp": ("volume", US_GALLON / 768, ("teaspoon",)),
    "m/s": ("speed", 1.0, ("meters per second", "metres per second", "mps")),
    "km/h": ("speed", 1 / 3.6, ("kph", "kmh", "kilometers per hour", "kilometres per hour")),
    "mph": ("speed", 63360 * INCH / 3600, ("miles per hour",)),
    "kn": ("speed", 1852 / 3600, ("knot", "kt")),
    "ft/s": ("speed", 12 * INCH, ("feet per second", "fps")),
    "s": ("time", 1.0, ("sec", "second")),
    "ms": ("time", 1e-3, ("millisecond",)),
    "min": ("time", 60.0, ("minute",)),
    "h": ("time", 3600.0, ("hr", "hour")),
    "day": ("time", 86400.0, ("d",)),
    "week": ("time", 604800.0, ("wk",)),
    "year": ("time", 365.25 * 86400, ("yr", "julian year")),  # the Julian year, 365.25 days
}
# temperature scales: kelvin = (value + offset) * scale
TEMPERATURES: dict[str, tuple[float, float, tuple[str, ...]]] = {
    "°C": (273.15, 1.0, ("c", "celsius", "degc", "degree celsius", "centigrade")),
    "°F": (459.67, 5 / 9, ("f", "fahrenheit", "degf", "degree fahrenheit")),
    "K": (0.0, 1.0, ("k", "kelvin")),
}


def spelling(name: str) -> str:
    """A unit name as looked up: lower case, no degree sign, single spaces."""
    return " ".join(name.lower().replace("°", "").split())


def unit_names() -> dict[str, str]:
    """Every accepted spelling (and the plural of every word-like one) -> its unit's symbol."""
    names = {}
    for table in (UNITS, TEMPERATURES):
        for symbol, row in table.items():
            for s in map(spelling, (symbol, *row[2])):
                names[s] = names[s.replace("degree ", "degrees ")] = symbol
                if len(s) >= 3 and s[-1].isalpha() and s[-1] != "s":
                    names[s + "s"] = symbol
    return names


NAMES = unit_names()


def unit_symbol(name: str) -> str:
    symbol = NAMES.get(spelling(name))
    if symbol is None:
        raise ValueError(f"unknown unit {name!r}: use one of {', '.join([*UNITS, *TEMPERATURES])}")
    return symbol


def quantity(symbol: str) -> str:
    return "temperature" if symbol in TEMPERATURES else UNITS[symbol][0]


def convert(value: float, from_unit: str, to_unit: str) -> tuple[float, str, str]:
    """``value`` in ``from_unit`` expressed in ``to_unit`` -> (number, from symbol, to symbol)."""
    a, b = unit_symbol(from_unit), unit_symbol(to_unit)
    if quantity(a) != quantity(b):
        raise ValueError(f"cannot convert {quantity(a)} ({a}) to {quantity(b)} ({b})")
    if a in TEMPERATURES:
        (offset_a, scale_a, _), (offset_b, scale_b, _) = TEMPERATURES[a], TEMPERATURES[b]
        return (value + offset_a) * scale_a / scale_b - offset_b, a, b
    return value * UNITS[a][1] / UNITS[b][1], a, b


@tool
def convert_units(value: float, from_unit: str, to_unit: str) -> dict:
    """Convert a quantity between units of length, mass, volume (US and imperial), speed, time or temperature.

    Args:
        value: the number to convert
        from_unit: its unit, for example km, mile, lb, °F, US gallon, mph, hour
        to_unit: the unit wanted, of the same kind
    """
    result, a, b = convert(value, from_unit, to_unit)
    return {"value": value, "from_unit": a, "to_unit": b, "result": float(f"{result:.6g}")}


BUILTIN_TOOLS: tuple[Tool, ...] = (get_current_time, calculate, convert_units)
