"""Admission: whether one more conversation fits in a group (a free row, and its state at its cap in memory), and how
many a server takes by default (docs/batching.md §4). The rows double as conversations join, so each
network meets a handful of row counts."""

from __future__ import annotations

from typing import Optional, Sequence

from .. import compute
import mlx.core as mx

from ..cache import capacity_for
from ..config import FRAME_SECONDS
from ..errors import ConfigError, SessionsFull
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
    """Refuse a conversation whose group could not hold every conversation at its cap (``group.max_positions``):
    any may grow to it and every row's buffers have the longest one's capacity, so the state of ``rows`` rows then
    (:func:`state_bytes`) must fit in what the group holds now and MEMORY_SHARE of what the device has free (the
    rest is the activations' and the other programs': docs/batching.md §4)."""
    itemsize = compute.speech_dtype().size
    conversations, most = group.open + 1, group.max_positions
    need = state_bytes(group.cfg, [most] * conversations, itemsize, rows)
    have = group.held_bytes() + MEMORY_SHARE * free_memory()
    if need > have:
        raise SessionsFull(f"one more conversation would not fit in memory: {conversations} conversations of "
                           f"{most} positions ({most * FRAME_SECONDS / 60:.3g} min) need {need / 1e9:.2f} GB of "
                           f"state, {have / 1e9:.2f} GB can be had; close one first")


def capped_positions(max_minutes: Optional[float]) -> int:
    """A conversation's most timeline positions: ``max_minutes`` of them (None: the timeline's limit), at most the
    limit."""
    if max_minutes is None:
        return TIMELINE_LIMIT
    if not max_minutes > 0:
        raise ConfigError(f"max_minutes must be above 0, got {max_minutes}")
    return min(TIMELINE_LIMIT, max(1, int(max_minutes * 60 / FRAME_SECONDS)))


def state_bytes(cfg, positions: Sequence[int], itemsize: int, rows: Optional[int] = None) -> int:
    """The device state of a group of ``rows`` rows (None: one per conversation) whose conversations are at
    ``positions`` timeline positions each (docs/batching.md §4): every row's attention buffers have the longest
    conversation's capacity (voicechat/cache.py): the LLM's key/value caches, the TTS backbone's (two CFG rows each,
    after its warm-up's positions); per row the Mamba conv and SSM states and the seen ids. ``itemsize``: bytes of
    the speech dtype. The streaming encoders' and the codec's states (a fixed size per row, small) are not counted."""
    llm, tts = cfg.llm, cfg.tts.backbone
    longest = max(positions, default=0)
    attention = llm.pattern.count("*") * 2 * llm.num_key_value_heads * capacity_for(longest) * llm.head_dim
    mamba = llm.pattern.count("M") * ((llm.conv_kernel - 1) * llm.conv_dim * itemsize
                                      + llm.mamba_num_heads * llm.mamba_head_dim * llm.ssm_state_size * 4)
    tts_positions = longest + prompt_frames(cfg)  # the warm-up's positions come first
    window = lambda kind: tts.sliding_window if kind == "sliding_attention" else None  # noqa: E731
    backbone = sum(2 * 2 * tts.num_key_value_heads * capacity_for(tts_positions, window(kind)) * tts.head_dim
                   for kind in tts.layer_types)
    rows = len(positions) if rows is None else rows
    held = (attention + backbone) * itemsize if positions else 0  # no buffers before the first position
    return rows * (held + mamba + llm.vocab_size)


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


def fitting_sessions(model, most: int = DEFAULT_MOST_SESSIONS, max_positions: int = TIMELINE_LIMIT) -> int:
    """How many conversations a server takes by default: as many as fit (their state at ``max_positions``, the cap,
    in MEMORY_SHARE of the device's free memory, measured now), at most ``most``; at least one."""
    budget = MEMORY_SHARE * free_memory()
    itemsize = compute.speech_dtype().size
    n = 1
    while n < most and state_bytes(model.config, [max_positions] * (n + 1), itemsize) <= budget:
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
