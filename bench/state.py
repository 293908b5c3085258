"""The state one conversation holds at its length, from the shapes alone (no weights):
``python -m bench.state --dims full --minutes 1,2,5,10 [--free-gb 136.9]``.

Per length: the bytes ``voicechat.timeline.admission.state_bytes`` gives (what admission weighs, docs/batching.md
§4) for one conversation of that many minutes of timeline (750 positions a minute, the prompt's included; a row of a
group whose longest conversation is that long holds as much), and of it the fixed part of a row (Mamba states, seen
ids); with ``--free-gb``, how many conversations capped at that length (``--max-minutes``) the admission takes in
that much free memory (MEMORY_SHARE of it), in a group of that many rows at most (``max_sessions``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from voicechat.config import FRAME_SECONDS
from voicechat.timeline.admission import MEMORY_SHARE, state_bytes
from voicechat.random_checkpoint import DIMS, write_configs

ITEMSIZE = {"tiny": 4, "medium": 4, "full": 2}  # the speech dtype each is benchmarked in (docs/batching.md §4)


def parts(cfg, positions: int, itemsize: int) -> dict:
    """One conversation's state at ``positions``: the whole, and the fixed part of its row (no positions)."""
    fixed = state_bytes(cfg, [], itemsize, rows=1)
    return {"positions": positions, "bytes": state_bytes(cfg, [positions], itemsize), "fixed_bytes": fixed}


def admitted(cfg, positions: int, itemsize: int, free_bytes: float) -> int:
    """Conversations capped at ``positions`` the admission takes in ``free_bytes`` (an empty group)."""
    n = 0
    while state_bytes(cfg, [positions] * (n + 1), itemsize) <= MEMORY_SHARE * free_bytes:
        n += 1
    return n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dims", choices=sorted(DIMS), default="full")
    p.add_argument("--minutes", default="1,2,5,10")
    p.add_argument("--free-gb", type=float, default=None)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        cfg = write_configs(Path(scratch), DIMS[a.dims])[3]
    itemsize = ITEMSIZE[a.dims]
    print(f"dims {a.dims}, {itemsize}-byte speech dtype; MB per conversation")
    for minutes in (float(m) for m in a.minutes.split(",")):
        positions = round(minutes * 60 / FRAME_SECONDS)
        r = parts(cfg, positions, itemsize)
        line = (f"{minutes:g} min ({positions} positions): {r['bytes'] / 1e6:.1f} MB "
                f"(of which {r['fixed_bytes'] / 1e6:.1f} MB a row holds whatever its length)")
        if a.free_gb is not None:
            line += f"; admitted in {a.free_gb:g} GB free: {admitted(cfg, positions, itemsize, a.free_gb * 1e9)}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
