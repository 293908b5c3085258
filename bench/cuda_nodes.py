"""The graph nodes of a group's steady tick as MLX's CUDA backend gets them, counted on a machine without CUDA:
``python -m bench.cuda_nodes --model M [--rows 1,8] [--json F]``.

On a GPU the tick is bound by the host's time per graph node (docs/batching.md §6), so a change that removes nodes
can be weighed on a CPU. Here the frame path takes its CUDA branches (``compute.on_gpu``: bfloat16 activations,
``rows_kernel.on_cuda``: our rows kernels' products) and each kernel call is stood in for by MLX's own product over
the same inputs (a 4-bit one a node, as the kernel; a bf16 one two, its weight's transpose and the product). Per part
of the tick, as ``bench.rows`` splits it, at each row count. Not the GPU's count: the bf16 stand-ins' transposes, and
on a CPU MLX's fused norms, RoPE and attention are their compositions (a LayerNorm is five nodes there, one on the
GPU); compare two versions of the code with it. ``VOICECHAT_COMPILE=0`` counts the graph unfused (quick; compiled, as on
the GPU, a CPU compiles every fused kernel with its C++ compiler first: minutes at the release's depths).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlx.core as mx

from voicechat import compute, load, rows_kernel
from voicechat.benchmarks.sessions import session_counts


def stand_in_kernels() -> None:
    """Take the CUDA branches, with MLX's products standing in for the rows kernels."""
    compute.on_gpu = lambda: True
    rows_kernel.on_cuda = lambda: True

    def run(kind: str, inputs: list, tiles) -> mx.array:
        if kind == "q4_rows":
            x, w, scales, biases = inputs
            return mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size=rows_kernel.GROUP,
                                       bits=rows_kernel.BITS)
        return inputs[0] @ inputs[1].T

    rows_kernel.run = run


def count(model_dir: str, rows: list[int], runs: int = 2) -> list[dict]:
    """Per row count: each part's nodes in a steady tick and their sum."""
    from bench import rows as rows_bench

    stand_in_kernels()
    model = load(model_dir)
    out = []
    for r in rows:
        parts = {name: p["nodes"] for name, p in rows_bench.measure_rows(model, r, runs)["parts"].items()}
        out.append({"rows": r, "parts": parts, "tick": sum(parts.values())})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cuda_nodes", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--rows", type=session_counts, default=[1], help="row counts (default 1)")
    p.add_argument("--json", help="write the counts here")
    a = p.parse_args(argv)
    counts = count(a.model, a.rows)
    for c in counts:
        print(f"R={c['rows']}: " + ", ".join(f"{k} {v}" for k, v in c["parts"].items()) + f"; tick {c['tick']}")
    if a.json:
        Path(a.json).write_text(json.dumps({"model": a.model, "activations": str(compute.speech_dtype()),
                                            "compiled": compute.compile_enabled(), "counts": counts}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
