"""The import graph of ``voicechat/`` (docs/architecture.md): no circles, and no import that runs up a floor.

The graph is read from the source with ``ast`` (every ``import``, at module level or inside a function or an
``if TYPE_CHECKING`` block: a reader meets them all), nothing is imported. A module's floor is its room's place in
FLOORS; a module imports only modules on its own floor or below, and the modules of one floor import each other
without a circle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "voicechat"

# The rooms from the top floor down: a top-level module or package of voicechat/ by its name ("" is the package's
# face, voicechat/__init__.py). docs/architecture.md says what each floor is for.
FLOORS = (
    ("front ends", {"__main__", "batch", "deploy", "terminal", "devices", "webui", "realtime", "benchmarks"}),
    ("the engine thread", {"engine", "metrics"}),
    ("the public names", {""}),
    ("the loaded model", {"model", "voices"}),
    ("the timeline", {"timeline"}),
    ("the network", {"network", "random_checkpoint", "checkpoint", "config_formats", "layouts", "stt", "llm", "tts",
                     "codec", "layers", "rows_kernel", "cache", "compute"}),
    ("the facts", {"config", "limits", "frame", "errors", "result", "audio", "files", "tokenizer", "answer", "tools"}),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported(name: str, path: Path, node: ast.AST, known: dict) -> set[str]:
    """The modules of ``known`` that one import statement names (``from . import x`` names the module x)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & set(known)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""] if node.level else [node.module or ""])
    base = base.rstrip(".")
    return {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names} & set(known)


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {}
    for name, path in known.items():
        nodes = ast.walk(ast.parse(path.read_text(), str(path)))
        graph[name] = {m for node in nodes if isinstance(node, (ast.Import, ast.ImportFrom))
                       for m in imported(name, path, node, known)} - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def floor(module: str) -> int:
    """0 for the top floor, len(FLOORS) for a room on none; the room is the module's first name under voicechat."""
    room = module.split(".")[1] if "." in module else ""
    return next((i for i, (_, rooms) in enumerate(FLOORS) if room in rooms), len(FLOORS))


def test_the_graph_is_read_whole():
    """The reading itself: relative imports at every depth, ``from . import x`` as the module x, lazy imports."""
    graph = import_graph()
    assert {"voicechat.compute", "voicechat.model", "voicechat.timeline.conversation"} <= graph["voicechat"]
    assert "voicechat.timeline.admission" in graph["voicechat.engine.thread"]  # imported inside a method
    assert "voicechat.compute" in graph["voicechat.timeline.loop"]  # from .. import compute
    assert "voicechat.stt.mel" in graph["voicechat.codec.rvqvae"]


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_every_room_has_a_floor():
    unplaced = sorted(m for m in import_graph() if floor(m) == len(FLOORS))
    assert unplaced == [], "place these in FLOORS (and docs/architecture.md)"


def test_no_import_runs_up_a_floor():
    graph = import_graph()
    placed = {m for m in graph if floor(m) < len(FLOORS)}
    up = sorted(f"{m} ({FLOORS[floor(m)][0]}) imports {d} ({FLOORS[floor(d)][0]})"
                for m in placed for d in graph[m] & placed if floor(d) < floor(m))
    assert up == []
