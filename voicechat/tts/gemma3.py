"""The EAR-TTS backbone: HF ``Gemma3TextModel`` without its embedding table (docs/model.md §2.5.2).

Keys (under ``tts_model.tts_model.backbone.``): ``layers.N.{input_layernorm, post_attention_layernorm,
pre_feedforward_layernorm, post_feedforward_layernorm}``, ``layers.N.self_attn.{q,k,v,o}_proj``,
``layers.N.self_attn.{q,k}_norm``, ``layers.N.mlp.{gate,up,down}_proj``, ``norm``.
Inputs are embeddings, not ids, and are not scaled by sqrt(hidden) (the scaling lived in the deleted embedding).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..cache import KVCache, RowsKV, visible_slots, write_slots
from ..config import GemmaConfig
from ..layers import Linear
from .layers import GatedMLP, RMSNorm, merge_heads, rope, split_heads

class Gemma3Attention(nn.Module):
    """GQA attention, per-head q/k RMSNorm before RoPE, scale ``query_pre_attn_scalar^-0.5`` (docs/model.md §2.5.2)."""

    def __init__(self, cfg: GemmaConfig, rope_base: float):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.scale = cfg.query_pre_attn_scalar ** -0.5
        self.rope_base = rope_base
        self.q_proj = Linear(h, self.num_heads * d, bias=False)
        self.k_proj = Linear(h, self.num_kv_heads * d, bias=False)
        self.v_proj = Linear(h, self.num_kv_heads * d, bias=False)
        self.o_proj = Linear(self.num_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)
        self._fused = compute.Fused()

    def prepare(self) -> list[mx.array]:
        return self._fused.prepare([self.q_proj, self.k_proj, self.v_proj])

    def project(self, x: mx.array, position) -> tuple[mx.array, mx.array, mx.array]:
        """Queries, keys (RMS-normed per head, then RoPE at ``position`` ..) and values: [B, L, H] -> [B, N, L, D]."""
        q, k, v = self._fused.project(x, [self.q_proj, self.k_proj, self.v_proj])
        q = rope(self.q_norm(split_heads(q, self.num_heads)), self.rope_base, position)
        k = rope(self.k_norm(split_heads(k, self.num_kv_heads)), self.rope_base, position)
        return q, k, split_heads(v, self.num_kv_heads)

    def __call__(self, x: mx.array, cache: KVCache) -> mx.array:
        # [B, L, H] -> [B, L, H]; positions cache.offset .. cache.offset + L - 1
        q, k, v = self.project(x, cache.offset)
        keys, values, mask = cache.update_and_fetch(k, v)
        out = mx.fast.scaled_dot_product_attention(q, keys, values, scale=self.scale, mask=mask)
        return self.o_proj(merge_heads(out))

    def step(self, x: mx.array, position: mx.array, keys: mx.array, values: mx.array, slots: mx.array,
             mask: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """One position in fixed shapes: row r of x [B, 1, H] at ``position[r]``; its key/value go to slot
        ``slots[r]`` of the buffers [B, N, C, D] (``position``, ``slots`` [B] or [1] for all rows); the query sees
        the slots ``mask`` [B or 1, 1, 1, C] holds (the order of slots does not matter: positions are in the keys
        through RoPE). -> (out [B, 1, H], keys, values)"""
        q, k, v = self.project(x, position)
        keys, values = write_slots(keys, k, slots), write_slots(values, v, slots)
        out = mx.fast.scaled_dot_product_attention(q, keys, values, scale=self.scale, mask=mask)
        return self.o_proj(merge_heads(out)), keys, values


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, cfg: GemmaConfig, sliding: bool):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.self_attn = Gemma3Attention(cfg, cfg.rope_local_base if sliding else cfg.rope_global_base)
        self.mlp = GatedMLP(h, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        self.post_feedforward_layernorm = RMSNorm(h, eps)

    def __call__(self, x: mx.array, cache: KVCache) -> mx.array:
        return self.feed_forward(x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cache)))

    def feed_forward(self, x: mx.array) -> mx.array:
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))

    def step(self, x: mx.array, position: mx.array, keys: mx.array, values: mx.array, slot: mx.array,
             mask: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        attn, keys, values = self.self_attn.step(self.input_layernorm(x), position, keys, values, slot, mask)
        return self.feed_forward(x + self.post_attention_layernorm(attn)), keys, values


class Gemma3TextModel(nn.Module):
    """Gemma-3 decoder stack over input embeddings; one cache per layer carries the session's positions."""

    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = [Gemma3DecoderLayer(cfg, t == "sliding_attention") for t in cfg.layer_types]
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self._compiled = compute.CompiledFunctions()

    def make_caches(self) -> list[KVCache]:
        return [KVCache(self.cfg.sliding_window if t == "sliding_attention" else None) for t in self.cfg.layer_types]

    def make_rows_caches(self, conversations: int) -> list[RowsKV]:
        """A group's caches: per layer one buffer of each conversation's two CFG rows, [conditional rows;
        unconditional rows]."""
        return [RowsKV(2 * conversations, self.cfg.sliding_window if t == "sliding_attention" else None)
                for t in self.cfg.layer_types]

    def __call__(self, x: mx.array, caches: list) -> mx.array:
        # [B, L, H] -> [B, L, H] (after the final norm)
        if x.shape[1] == 1 and caches[0].offset > 0:
            return self.step(x, caches)
        return self.norm(self.through(x, caches, range(len(self.layers))))

    def through(self, x: mx.array, caches: list, layers: range) -> mx.array:
        """``x`` through the ``layers`` alone, each filling its cache: a forward in pieces of layers gives the one
        forward's numbers (a joining conversation's TTS warm-up runs so, docs/batching.md §1). [B, L, H] -> [B, L, H]
        (before the final norm)"""
        for i in layers:
            x = self.layers[i](x, caches[i])
        return x

    def warm_up(self, capacities: list[int], dtype: mx.Dtype, rows: int = 2) -> None:
        """One step at each cache capacity (zero caches, evaluated): traced and compiled ahead."""
        x = mx.zeros((rows, 1, self.cfg.hidden_size), dtype)
        for capacity in capacities:
            caches = self.caches_at(capacity, rows, dtype)
            mx.eval(self.step(x, caches), [c.arrays() for c in caches])

    def caches_at(self, capacity: int, rows: int, dtype: mx.Dtype) -> list[RowsKV]:
        """Zero caches of a group of ``rows`` / 2 conversations (the step's shapes in a session) whose next step meets
        buffers of ``capacity`` slots (a window's layers: at most the window)."""
        cfg, caches = self.cfg, self.make_rows_caches(rows // 2)
        for cache in caches:
            size = capacity if cache.window is None else min(capacity, cache.window)
            cache.keys = cache.values = mx.zeros((rows, cfg.num_key_value_heads, size, cfg.head_dim), dtype)
            cache.offsets = np.full(rows, size - 1)
        return caches

    def step(self, x: mx.array, caches: list, active: Optional[np.ndarray] = None) -> mx.array:
        """One position after a warm-up: the whole stack as one compiled function over fixed-shape cache buffers
        (they grow by doubling, so it is traced again only then); each row at its own position (a group's caches:
        :class:`~voicechat.cache.RowsKV`), ``active`` the rows that advance (None: all). [B, 1, H] -> [B, 1, H]"""
        like = mx.zeros((x.shape[0], self.cfg.num_key_value_heads, 1, self.cfg.head_dim), x.dtype)
        slots, counts = zip(*(cache.reserve_step(like) for cache in caches))
        buffers = [a for cache in caches for a in (cache.keys, cache.values)]
        position = mx.array(caches[0].positions().astype(np.int32))
        fn = self._compiled.get("step", self.run_step)  # traced again when a buffer's shape changes
        out, *buffers = fn(x, position, mx.array(np.stack(slots).astype(np.int32)),
                           mx.array(np.stack(counts).astype(np.int32)), *buffers)
        for i, cache in enumerate(caches):
            cache.keys, cache.values = buffers[2 * i], buffers[2 * i + 1]
            cache.advance(active)
        return out

    def run_step(self, x: mx.array, position: mx.array, slots: mx.array, counts: mx.array, *buffers) -> tuple:
        out, masks = [], {}
        for i, layer in enumerate(self.layers):
            keys = buffers[2 * i]
            kind = (self.cfg.layer_types[i], keys.shape[2])  # layers of a kind see the same slots: one mask each
            if kind not in masks:
                masks[kind] = visible_slots(compute.entry(counts, i), keys.shape[2])
            x, keys, values = layer.step(x, position, keys, buffers[2 * i + 1], compute.entry(slots, i), masks[kind])
            out += [keys, values]
        return (self.norm(x), *out)
