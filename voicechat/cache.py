"""Attention key/value caches: one class for every attention layer of the model (Nemotron-H's attention blocks and
the EAR-TTS backbone's full and sliding-window layers).

A cache holds keys and values [B, heads, capacity, D]. Its buffers grow by doubling from FIRST_CAPACITY, so that the
fixed-shape compiled steps of a session meet only a handful of shapes, each traced once per model (and ahead of
time: :func:`capacities`).
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

import mlx.core as mx

FIRST_CAPACITY = 256

Mask = Union[None, str, mx.array]


def capacity_for(positions: int, window: Optional[int] = None) -> int:
    """Slots a cache holds for ``positions``: the next power of two from FIRST_CAPACITY, at most the window."""
    capacity = FIRST_CAPACITY
    while capacity < positions:
        capacity *= 2
    return capacity if window is None else min(capacity, window)


def capacities(positions: int, window: Optional[int] = None) -> list[int]:
    """Every capacity a cache passes through on its way to ``positions``."""
    out = [capacity_for(1, window)]
    while out[-1] < capacity_for(positions, window):
        out.append(capacity_for(out[-1] + 1, window))
    return out


def _grown(buf: Optional[mx.array], like: mx.array, used: int, capacity: int) -> mx.array:
    """``buf`` with its first ``used`` slots kept and room for ``capacity``: [B, N, C, D]."""
    b, n, _, d = like.shape
    room = mx.zeros((b, n, capacity - used, d), dtype=like.dtype)
    return room if buf is None or used == 0 else mx.concatenate([buf[..., :used, :], room], axis=2)


def slots_and_counts(offsets: np.ndarray, window: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per row with ``offsets`` positions so far: the slot its next position goes to and the number of slots its
    query then sees (a window's slots are reused: position p lives in slot p % window)."""
    if window is None:
        return offsets, offsets + 1
    return offsets % window, np.minimum(offsets + 1, window)


def write_slots(buf: mx.array, new: mx.array, slots: mx.array) -> mx.array:
    """``buf`` [B, N, C, D] with row r's one new position ``new`` [B, N, 1, D] written to slot ``slots[r]``
    (``slots`` [B] or [1] for all rows): a scatter, in place when nothing else holds ``buf``."""
    return mx.put_along_axis(buf, slots.reshape(-1, 1, 1, 1), new.astype(buf.dtype), axis=2)


def visible_slots(counts: mx.array, capacity: int) -> mx.array:
    """The attention mask of one query per row: row r sees its first ``counts[r]`` slots. [B] -> [B, 1, 1, C]"""
    return (mx.arange(capacity)[None] < counts[:, None]).reshape(-1, 1, 1, capacity)


class KVCache:
    """Keys and values of the positions so far; positions continue across calls. Without a ``window`` every position
    is kept (a query sees all earlier keys); with one, a query at p sees the keys p - window + 1 .. p, and position p
    lives in slot p % window, so a step overwrites exactly the position that left the window."""

    def __init__(self, window: Optional[int] = None):
        self.window = window
        self.keys: Optional[mx.array] = None
        self.values: Optional[mx.array] = None
        self.offset = 0  # positions so far

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.keys, self.values) if a is not None]

    def update_and_fetch(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array, Mask]:
        """Append L positions [B, N, L, D]; return the keys and values the L new queries attend and their mask
        ("causal" aligns the queries with the last L keys)."""
        n = k.shape[2]
        if self.window is not None and self.offset + n > self.window and n > 1:
            return self._wrapping_block(k, v)
        end = self.offset + n
        self._reserve(end, k)
        first = self.offset % self.window if self.window is not None else self.offset
        self.keys[..., first:first + n, :] = k
        self.values[..., first:first + n, :] = v
        self.offset = end
        seen = end if self.window is None else min(end, self.window)
        return self.keys[..., :seen, :], self.values[..., :seen, :], ("causal" if n > 1 else None)

    def kept(self) -> "KVCache":
        """A copy of the positions so far in buffers of their own, sized to them (lazy): what stays of a speaker's
        TTS warm-up for the conversations after it (docs/batching.md §1). A slice would hold the whole buffer."""
        used = min(self.offset, self.window or self.offset)
        copy = KVCache(self.window)
        copy.keys, copy.values = (mx.contiguous(buf[..., :used, :]) for buf in (self.keys, self.values))
        copy.offset = self.offset
        return copy

    def positions(self) -> np.ndarray:
        """Positions so far, per row that has its own (one here: every row of the buffer shares ``offset``)."""
        return np.array([self.offset])

    def reserve_step(self, like: mx.array) -> tuple[np.ndarray, np.ndarray]:
        """Room for one more position (keys shaped like ``like`` [B, N, 1, D]), for a compiled step that writes it:
        (its slot, the number of slots its query sees) per row of :meth:`positions`. The caller calls ``advance``
        once the step is built."""
        self._reserve(int(self.positions().max()) + 1, like)
        return slots_and_counts(self.positions(), self.window)

    def advance(self, active: Optional[np.ndarray] = None) -> None:
        self.offset += 1

    def _reserve(self, positions: int, like: mx.array) -> None:
        capacity = capacity_for(positions, self.window)
        if self.keys is None or self.keys.shape[2] < capacity:
            used = min(self.offset, self.window or self.offset)
            self.keys, self.values = _grown(self.keys, like, used, capacity), _grown(self.values, like, used, capacity)
            # evaluated on their own, so that the position's graph has the kernels of every other position: on CUDA a
            # graph of new kernels is instantiated anew, and the one holding this copy was a spike (docs/performance.md)
            mx.eval(self.keys, self.values)

    def _in_order(self, buf: mx.array) -> mx.array:
        """The stored positions oldest first: [B, N, min(offset, window), D]."""
        if self.offset <= self.window:
            return buf[..., :self.offset, :]
        return mx.roll(buf, -(self.offset % self.window), axis=2)

    def _wrapping_block(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array, Mask]:
        """Several positions that pass the window: attention over the kept positions and the new ones with an explicit
        window mask, then the last ``window`` positions kept, each in its slot."""
        n_new = k.shape[2]
        keys = k if self.keys is None else mx.concatenate([self._in_order(self.keys), k], axis=2)
        values = v if self.values is None else mx.concatenate([self._in_order(self.values), v], axis=2)
        total = self.offset + n_new
        key_pos = mx.arange(total - keys.shape[2], total)
        query_pos = mx.arange(self.offset, total)[:, None]
        mask = (key_pos <= query_pos) & (query_pos - key_pos < self.window)  # [L, T_kv]
        shift = (total - self.window) % self.window  # slot of the oldest kept position
        self.keys = mx.roll(keys[..., -self.window:, :], shift, axis=2)
        self.values = mx.roll(values[..., -self.window:, :], shift, axis=2)
        self.offset = total
        return keys, values, mask


class RowsKV:
    """The key/value caches of many conversations in one buffer [rows, N, C, D] (docs/batching.md): row r is its
    conversation's cache, with its own ``offsets[r]``; C fits the longest row, and a row's query sees only its own
    slots (:func:`visible_slots`). A step's inputs for a row that does not advance write only the slot that row's
    next real position overwrites, never one its query sees. The step interface is :class:`KVCache`'s."""

    def __init__(self, rows: int, window: Optional[int] = None):
        self.window = window
        self.keys: Optional[mx.array] = None
        self.values: Optional[mx.array] = None
        self.offsets = np.zeros(rows, np.int64)

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.keys, self.values) if a is not None]

    def positions(self) -> np.ndarray:
        return self.offsets

    def reserve_step(self, like: mx.array) -> tuple[np.ndarray, np.ndarray]:
        self._reserve(int(self.offsets.max()) + 1, like.shape[1], like.shape[3], like.dtype)
        return slots_and_counts(self.offsets, self.window)

    def advance(self, active: Optional[np.ndarray] = None) -> None:
        self.offsets = self.offsets + (1 if active is None else active.astype(np.int64))

    def _reserve(self, positions: int, heads: int, dim: int, dtype: mx.Dtype) -> None:
        capacity = capacity_for(positions, self.window)
        if self.keys is None or self.keys.shape[2] < capacity:
            like = mx.zeros((len(self.offsets), heads, 1, dim), dtype)
            used = 0 if self.keys is None else self.keys.shape[2]
            self.keys, self.values = _grown(self.keys, like, used, capacity), _grown(self.values, like, used, capacity)
            mx.eval(self.keys, self.values)  # on its own, as KVCache._reserve says why

    def with_rows(self, rows: int, halves: int) -> None:
        """Room for ``rows`` rows, the buffer read as ``halves`` blocks of rows (the TTS's [conditional;
        unconditional] halves): each block padded with zero rows."""
        if self.keys is not None:
            self.keys, self.values = (_more_rows(b, halves, rows) for b in (self.keys, self.values))
            mx.eval(self.keys, self.values)
        self.offsets = _more_rows(self.offsets, halves, rows)

    def put(self, rows: list[int], cache: KVCache) -> None:
        """Copy one conversation's cache (its buffer rows in order) into ``rows`` of this buffer, evaluated."""
        used = min(cache.offset, cache.window or cache.offset)
        if used:
            _, heads, _, dim = cache.keys.shape
            self._reserve(cache.offset, heads, dim, cache.keys.dtype)
            for name in ("keys", "values"):
                buf, src = getattr(self, name), getattr(cache, name)
                for i, row in enumerate(rows):
                    buf = mx.slice_update(buf, src[i:i + 1, :, :used].astype(buf.dtype), mx.array([row, 0, 0, 0]),
                                          axes=(0, 1, 2, 3))
                setattr(self, name, buf)
            mx.eval(self.keys, self.values)
        self.offsets = self.offsets.copy()
        self.offsets[rows] = cache.offset


def _more_rows(buf, halves: int, rows: int):
    """[halves * r, ...] -> [rows, ...] (mx or numpy): each of the ``halves`` blocks of r rows padded with zeros to
    rows / halves."""
    blocks = buf.reshape(halves, -1, *buf.shape[1:])
    widths = [(0, 0), (0, rows // halves - blocks.shape[1])] + [(0, 0)] * (buf.ndim - 1)
    padded = np.pad(blocks, widths) if isinstance(buf, np.ndarray) else mx.pad(blocks, widths)
    return padded.reshape(rows, *buf.shape[1:])
