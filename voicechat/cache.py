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
BLOCK = 256  # slots per block of a group's key/value pool (docs/batching.md §4)

Mask = Union[None, str, mx.array]


def capacity_for(positions: int, window: Optional[int] = None) -> int:
    """Slots a cache holds for ``positions``: the next power of two from FIRST_CAPACITY, at most the window."""
    capacity = FIRST_CAPACITY
    while capacity < positions:
        capacity *= 2
    return capacity if window is None else min(capacity, window)


def blocks_for(positions: int, window: Optional[int] = None) -> int:
    """Blocks of BLOCK slots a row of a group's cache holds for ``positions`` (a window's: at most its slots)."""
    return -(-min(positions, window or positions) // BLOCK)


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

    def reserve_step(self, like: mx.array, active: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """Room for one more position (keys shaped like ``like`` [B, N, 1, D]), for a compiled step that writes it
        into :meth:`buffers` and gives them back (:meth:`stored`): (its slot, the number of slots its query sees) per
        row of :meth:`positions`. The caller calls ``advance`` once the step is built."""
        self._reserve(int(self.positions().max()) + 1, like)
        return slots_and_counts(self.positions(), self.window)

    def buffers(self) -> tuple[mx.array, mx.array]:
        return self.keys, self.values

    def stored(self, keys: mx.array, values: mx.array) -> None:
        self.keys, self.values = keys, values

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
    """The key/value caches of many conversations (docs/batching.md §4): row r's positions live in blocks of BLOCK
    slots of its own (``tables[r]``, in order of its slots) in one pool per layer, [blocks, BLOCK, heads, D] for the
    keys and one for the values, so a row holds what its own length needs, whatever the other rows' lengths. A step
    reads every row's blocks gathered into buffers [rows, heads, C, D] (:meth:`buffers`: C the longest row's
    capacity, as one buffer had it; made for the step and dropped after it) and writes each row's new position back
    into its block (:meth:`stored`). Block 0 is the sink, no row's: it pads the gathered buffers (slots no query
    sees) and takes the writes of rows that do not advance past their blocks. A step's inputs for a row that does not
    advance write only the slot that row's next real position overwrites, never one its query sees. The step
    interface is :class:`KVCache`'s."""

    def __init__(self, rows: int, window: Optional[int] = None):
        self.window = window
        self.pools: Optional[tuple[mx.array, mx.array]] = None  # keys, values
        self.tables: list[list[int]] = [[] for _ in range(rows)]
        self.free: list[int] = []  # blocks of the pool no row holds (the sink aside)
        self.offsets = np.zeros(rows, np.int64)
        self._slots = np.zeros(rows, np.int64)  # where the step being built writes each row's position

    def arrays(self) -> list[mx.array]:
        return list(self.pools or ())

    @property
    def dtype(self) -> mx.Dtype:
        return self.pools[0].dtype

    def positions(self) -> np.ndarray:
        return self.offsets

    def reserve_step(self, like: mx.array, active: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """Room for one more position of the rows that advance (``active``, None: all): blocks for their next slot;
        -> (each row's slot, the slots its query sees), as :meth:`KVCache.reserve_step`."""
        self._pools_like(like.shape[1], like.shape[3], like.dtype)
        slots, counts = slots_and_counts(self.offsets, self.window)
        for r in np.flatnonzero(np.ones(len(self.offsets), bool) if active is None else active):
            self._hold(int(r), int(counts[r]))
        self._slots = slots
        return slots, counts

    def buffers(self) -> tuple[mx.array, mx.array]:
        """Every row's blocks gathered into the step's buffers [rows, heads, C, D]: C the capacity of the longest row
        (:func:`capacity_for`: the handful of shapes a compiled step meets), each row's slots in order, then the
        sink's (slots its query does not see)."""
        capacity = capacity_for(int(self.offsets.max(initial=0)) + 1, self.window)
        width = -(-capacity // BLOCK)
        table = np.zeros((len(self.tables), width), np.int32)
        for r, blocks in enumerate(self.tables):
            table[r, :len(blocks)] = blocks
        index = mx.array(table.reshape(-1))
        rows = len(self.tables)
        return tuple(pool[index].reshape(rows, width * BLOCK, *pool.shape[2:])[:, :capacity].swapaxes(1, 2)
                     for pool in self.pools)

    def stored(self, keys: mx.array, values: mx.array) -> None:
        """The step's buffers back: each row's new position (at the slot :meth:`reserve_step` gave) into its block,
        or into the sink where the row holds no block for it (a row that did not advance)."""
        slots = self._slots
        blocks = [self.tables[r][s // BLOCK] if s // BLOCK < len(self.tables[r]) else 0 for r, s in enumerate(slots)]
        at = mx.array(np.asarray(blocks, np.int64) * BLOCK + slots % BLOCK)
        taken = mx.array(slots.reshape(-1, 1, 1, 1).astype(np.int32))
        self.pools = tuple(_written(pool, at, mx.take_along_axis(buf, taken, axis=2)[:, :, 0])
                           for pool, buf in zip(self.pools, (keys, values)))

    def advance(self, active: Optional[np.ndarray] = None) -> None:
        self.offsets = self.offsets + (1 if active is None else active.astype(np.int64))

    def with_rows(self, rows: int, halves: int) -> None:
        """Room for ``rows`` rows, the rows read as ``halves`` blocks of rows (the TTS's [conditional;
        unconditional] halves): each block padded with empty rows. No state moves: a row's blocks stay where they
        are."""
        half = len(self.tables) // halves
        self.tables = [t for h in range(halves)
                       for t in self.tables[h * half:(h + 1) * half] + [[] for _ in range(rows // halves - half)]]
        self.offsets = _more_rows(self.offsets, halves, rows)
        self._slots = np.zeros(rows, np.int64)

    def put(self, rows: list[int], cache: KVCache) -> None:
        """Copy one conversation's cache (its buffer rows in order) into ``rows`` of this cache, evaluated: each row
        gives back the blocks it held and takes the blocks its positions need."""
        self.release(rows)
        used = min(cache.offset, cache.window or cache.offset)
        if used:
            _, heads, _, dim = cache.keys.shape
            self._pools_like(heads, dim, cache.keys.dtype)
            for i, row in enumerate(rows):
                self._hold(row, used)
                blocks = np.asarray(self.tables[row], np.int64)
                at = mx.array((blocks[:, None] * BLOCK + np.arange(BLOCK)).reshape(-1)[:used])
                self.pools = tuple(_written(pool, at, src[i, :, :used].swapaxes(0, 1))
                                   for pool, src in zip(self.pools, (cache.keys, cache.values)))
            mx.eval(*self.pools)
        self.offsets = self.offsets.copy()
        self.offsets[rows] = cache.offset

    def release(self, rows: list[int]) -> None:
        """``rows`` give their blocks back (a conversation left): its positions are gone, the blocks are the next
        ones taken."""
        self.offsets = self.offsets.copy()
        for r in rows:
            self.free += self.tables[r]
            self.tables[r] = []
            self.offsets[r] = 0

    def blocks_held(self) -> int:
        return sum(len(t) for t in self.tables)

    def _hold(self, row: int, slots: int) -> None:
        """``row`` holds blocks for its first ``slots`` slots: taken from the free blocks, the pool grown when none
        is left."""
        short = -(-slots // BLOCK) - len(self.tables[row])
        if short > len(self.free):
            self._grow(short - len(self.free))
        for _ in range(max(0, short)):
            self.tables[row].append(self.free.pop(0))

    def _grow(self, short: int) -> None:
        """The pool with ``short`` blocks more at least, one per row (each row's next BLOCK positions: the growth is
        copied rarely, and never more than that lies unused), evaluated on its own as KVCache._reserve says why."""
        more = max(short, len(self.tables))
        size = self.pools[0].shape[0]
        self.pools = tuple(mx.concatenate([pool, mx.zeros((more, *pool.shape[1:]), pool.dtype)]) for pool in self.pools)
        mx.eval(*self.pools)
        self.free += list(range(size, size + more))

    def _pools_like(self, heads: int, dim: int, dtype: mx.Dtype) -> None:
        """The pools, with the sink alone, before the first position."""
        if self.pools is None:
            self.pools = tuple(mx.zeros((1, BLOCK, heads, dim), dtype) for _ in range(2))

    @classmethod
    def filled(cls, rows: int, capacity: int, heads: int, dim: int, dtype: mx.Dtype,
               window: Optional[int] = None) -> "RowsKV":
        """Zero caches of ``rows`` rows whose next step meets buffers of ``capacity`` slots (a compiled step's
        warm-up): every row reads the same blocks, so they hold one row's memory."""
        cache = cls(rows, window)
        size = capacity if window is None else min(capacity, window)
        cache._pools_like(heads, dim, dtype)
        cache._hold(0, size)
        cache.tables = [list(cache.tables[0]) for _ in range(rows)]
        cache.offsets = np.full(rows, size - 1)
        return cache


def _written(pool: mx.array, at: mx.array, new: mx.array) -> mx.array:
    """``pool`` [blocks, BLOCK, heads, D] with ``new`` [n, heads, D] at the flat slots ``at`` [n] (a new array: the
    pool given is left as it was)."""
    flat = pool.reshape(-1, *pool.shape[2:])
    flat[at] = new.astype(pool.dtype)
    return flat.reshape(pool.shape)


def _more_rows(buf, halves: int, rows: int):
    """[halves * r, ...] -> [rows, ...] (mx or numpy): each of the ``halves`` blocks of r rows padded with zeros to
    rows / halves."""
    blocks = buf.reshape(halves, -1, *buf.shape[1:])
    widths = [(0, 0), (0, rows // halves - blocks.shape[1])] + [(0, 0)] * (buf.ndim - 1)
    padded = np.pad(blocks, widths) if isinstance(buf, np.ndarray) else mx.pad(blocks, widths)
    return padded.reshape(rows, *buf.shape[1:])
