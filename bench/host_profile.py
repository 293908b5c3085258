"""Where MLX's host time goes while it walks and launches a frame's graph (``mx.async_eval``), from a native
sampling profile:

    py-spy record --native -r 150 -f raw -o frame.raw -- python -m bench.frame_split MODEL --frames 640
    python -m bench.host_profile frame.raw [--top 40]

(py-spy is a standalone binary from PyPI, not a dependency.) Prints the share of the samples under
``mlx::core::async_eval`` spent in each function (inclusive: a function's callees count for it), then in a few
groups that say what the time is for: cross-stream fences, CUDA graph commits, cuBLAS, cuDNN, fused kernels, run-time
compilation. A session's first positions compile kernels; a long run keeps their share small.
"""

from __future__ import annotations

import argparse
from collections import Counter

ROOT = "mlx::core::async_eval"
GROUPS = {  # group -> the function names (substrings) any of which puts a sample in it
    "cross-stream fences (Fence::update, Event::wait)": ("mlx::core::Fence::update", "mlx::core::Event::wait"),
    "CUDA graph commits (any caller)": ("mlx::core::cu::CommandEncoder::commit",),
    "cuBLAS products": ("cublas", "Cublas"),
    "gemv products": ("mlx::core::cu::gemv",),
    "quantized products": ("mlx::core::QuantizedMatmul::eval_gpu",),
    "cuDNN (attention, convolution)": ("cudnn", "DnnGraph"),
    "fused elementwise kernels": ("mlx::core::Compiled::eval_gpu",),
    "run-time compilation (NVRTC)": ("nvrtc",),
    "buffer allocation": ("malloc_async",),
}


def frame_name(frame: str) -> str:
    """'function (library or file:line)' -> the function; an unnamed address -> its library."""
    name, _, where = frame.partition(" (")
    return f"?? ({where}" if name.startswith("0x") else name


def read(path: str) -> tuple[list[tuple[list[str], int]], int]:
    """The stacks under ROOT (from ROOT down) with their sample counts, and the total sample count."""
    stacks, total = [], 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            total += int(count)
            frames = [frame_name(fr) for fr in stack.split(";")]
            if ROOT in frames:
                stacks.append((frames[frames.index(ROOT):], int(count)))
    return stacks, total


def shares(stacks: list[tuple[list[str], int]]) -> tuple[Counter, Counter, int]:
    functions, groups = Counter(), Counter()
    for frames, count in stacks:
        for name in set(frames):
            functions[name] += count
        for group, keys in GROUPS.items():
            if any(key in name for name in frames for key in keys):
                groups[group] += count
    return functions, groups, sum(count for _, count in stacks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", help="py-spy record --native -f raw output")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    stacks, total = read(args.raw)
    functions, groups, under = shares(stacks)
    print(f"samples {total}, under {ROOT} {under} ({100 * under / max(total, 1):.0f}%)")
    print("groups (a sample can be in several):")
    for group in GROUPS:
        print(f"  {100 * groups[group] / max(under, 1):5.1f}%  {group}")
    print(f"functions, inclusive (top {args.top}):")
    for name, count in functions.most_common(args.top):
        print(f"  {100 * count / max(under, 1):5.1f}%  {name[:140]}")


if __name__ == "__main__":
    main()
