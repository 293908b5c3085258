"""Admission: whether one more conversation fits in a group (a free row, and its state at the timeline limit in
memory), and how many a server takes by default (docs/batching.md §4). The rows double as conversations join, so each
network meets a handful of row counts."""

from __future__ import annotations

from .. import compute
import mlx.core as mx

from ..cache import capacity_for
from ..errors import SessionsFull
from ..limits import TIMELINE_LIMIT
from ..network import prompt_frames

MEMORY_SHARE = 0.8  # of the device's free memory, what a group's state may take (the rest: docs/batching.md §4)
# a server's default: the most conversations whose tick p95 stayed under 80 ms on this project's 2-core CPU, tiny model
# (docs/batching.md, bench --sessions); more fit in memory almost anywhere, so speed bounds it
DEFAULT_MOST_SESSIONS = 4


def free_row(group) -> int:
    """The first free row, else the next one to add; :class:`SessionsFull` when all ``max_sessions`` are open."""
    row = next((r for r, member in enumerate(group.members) if member is None), len(group.members))
    if row >= group.max_sessions:
        raise SessionsFull(f"this group holds {group.max_sessions} conversations at most and all are open; "
                           "close one first")
    return row


def check_memory(group, rows: int) -> None:
    """Refuse a conversation whose group would not fit at the timeline limit: every row may grow to it, so the
    group's state then (:func:`state_bytes`) must fit in what it holds now and what the device has free (half of
    it: the rest is the activations' and the other programs')."""
    itemsize = compute.speech_dtype().size
    need = state_bytes(group.cfg, rows, TIMELINE_LIMIT, itemsize)
    have = state_bytes(group.cfg, group.rows, group.positions(), itemsize) + MEMORY_SHARE * free_memory()
    if need > have:
        raise SessionsFull(f"one more conversation would not fit in memory: {rows} conversations at the "
                           f"{TIMELINE_LIMIT}-position limit need {need / 1e9:.1f} GB of state, "
                           f"{have / 1e9:.1f} GB can be had; close one first")


def state_bytes(cfg, rows: int, positions: int, itemsize: int) -> int:
    """The group's device state for ``rows`` conversations once the longest holds ``positions`` timeline positions
    (every row's attention buffers have the longest row's capacity, voicechat/cache.py): the LLM's key/value caches
    and Mamba states, the TTS backbone's caches (two CFG rows each, after its warm-up's positions), the seen ids.
    ``itemsize``: bytes of the speech dtype. The streaming encoders' and the codec's states (a fixed size per row,
    small) are not counted."""
    llm, tts = cfg.llm, cfg.tts.backbone
    attention = llm.pattern.count("*") * 2 * llm.num_key_value_heads * capacity_for(positions) * llm.head_dim
    mamba = llm.pattern.count("M") * ((llm.conv_kernel - 1) * llm.conv_dim * itemsize
                                      + llm.mamba_num_heads * llm.mamba_head_dim * llm.ssm_state_size * 4)
    tts_positions = positions + prompt_frames(cfg)  # the warm-up's positions come first
    window = lambda kind: tts.sliding_window if kind == "sliding_attention" else None  # noqa: E731
    backbone = sum(2 * 2 * tts.num_key_value_heads * capacity_for(tts_positions, window(kind)) * tts.head_dim
                   for kind in tts.layer_types)
    return rows * ((attention + backbone) * itemsize + mamba + llm.vocab_size)


def free_memory() -> int:
    """Bytes the device can still give: the GPU allocator's limit less what is in use; on a CPU the system's
    available memory (/proc/meminfo), the allocator's limit at most."""
    in_use = mx.get_active_memory()
    if compute.on_gpu():
        return max(0, mx.get_memory_limit() - in_use)
    try:
        with open("/proc/meminfo") as info:
            available = next(int(line.split()[1]) * 1024 for line in info if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return max(0, mx.get_memory_limit() - in_use)
    return min(available, max(0, mx.get_memory_limit() - in_use))


def fitting_sessions(model, most: int = DEFAULT_MOST_SESSIONS) -> int:
    """How many conversations a server takes by default: as many as fit (their state at the timeline limit in
    MEMORY_SHARE of the device's free memory, measured now), at most ``most``; at least one."""
    budget = MEMORY_SHARE * free_memory()
    itemsize = compute.speech_dtype().size
    n = 1
    while n < most and state_bytes(model.config, n + 1, TIMELINE_LIMIT, itemsize) <= budget:
        n += 1
    return n


def grown_rows(rows: int, row: int, most: int) -> int:
    """The rows a group of ``rows`` (at most ``most``) holds once a conversation takes row ``row``: they double, so
    each network meets a handful of row counts."""
    return rows if row < rows else min(most, max(row + 1, 2 * rows))


def row_counts(most: int) -> list[int]:
    """Every row count a group of at most ``most`` conversations meets as they join (what its warm-up traces)."""
    counts = [0]
    for row in range(most):
        if (rows := grown_rows(counts[-1], row, most)) != counts[-1]:
            counts.append(rows)
    return counts[1:]
