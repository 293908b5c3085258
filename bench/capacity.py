"""How the cache-carrying steps' time grows with a conversation:
``python -m bench.capacity MODEL [--steps N]``.

The TTS backbone step (both guidance rows) and the LLM decode step attend over key/value buffers whose capacity
doubles as the conversation grows (``voicechat.cache``); this times one step of each, built and evaluated, at every
capacity ``Model.warm_up`` prepares (the buffers hold zeros: the time does not depend on their values). The query
sees all but one slot, as just before a buffer grows.
"""

from __future__ import annotations

import argparse
import time
from voicechat import compute
import mlx.core as mx

from voicechat.cache import RowsKV, capacities
from voicechat.model import WARM_POSITIONS
from voicechat.benchmarks.workload import stats


def timed(step, caches, steps: int) -> dict:
    """``step()`` built and evaluated ``steps`` times on the same position (the caches' offsets put back each time),
    after one untimed call (tracing)."""
    offsets = [c.offsets for c in caches]  # a group's caches (voicechat.cache.RowsKV): per row
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        mx.eval(step())
        times.append(time.perf_counter() - t0)
        for c, offset in zip(caches, offsets):
            c.offsets = offset
    return stats(times[1:])


def run(model_spec: str, steps: int) -> list[dict]:
    from voicechat import load

    model = load(model_spec)
    llm, backbone = model.net.stt_model.llm, model.net.tts_model.tts_model.backbone
    dtype = compute.speech_dtype()
    rows = []
    for capacity in capacities(WARM_POSITIONS):
        tts_caches = backbone.caches_at(capacity, 2, dtype)
        x = mx.zeros((2, 1, backbone.cfg.hidden_size), dtype)
        tts = timed(lambda: [backbone.step(x, tts_caches), [c.arrays() for c in tts_caches]], tts_caches, steps)
        llm_cache = llm.cache_at(capacity)
        kv = [c for c in llm_cache.layers if isinstance(c, RowsKV)]
        h = mx.zeros((1, 1, llm.cfg.hidden_size), dtype)
        lm = timed(lambda: [llm.decode(h, llm_cache), llm_cache.state], kv, steps)
        rows.append({"capacity": capacity, "tts_backbone": tts, "llm_decode": lm})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per capacity (default 50)")
    args = parser.parse_args()
    rows = run(args.model, args.steps)
    print(f"device {mx.default_device()}  mlx {mx.__version__}  ms per step (p50 / p95), {args.steps} steps")
    print(f"{'capacity':>9s} {'TTS backbone (2 rows)':>24s} {'LLM decode':>16s}")
    for r in rows:
        t, m = r["tts_backbone"], r["llm_decode"]
        print(f"{r['capacity']:9d} {t['p50']:15.2f} / {t['p95']:6.2f} {m['p50']:8.2f} / {m['p95']:6.2f}")


if __name__ == "__main__":
    main()
