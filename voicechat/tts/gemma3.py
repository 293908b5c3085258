"""The EAR-TTS backbone: HF ``Gemma3TextModel`` without its embedding table (SPEC §2.5.2), and its KV caches.

Keys (under ``tts_model.tts_model.backbone.``): ``layers.N.{input_layernorm, post_attention_layernorm,
pre_feedforward_layernorm, post_feedforward_layernorm}``, ``layers.N.self_attn.{q,k,v,o}_proj``,
``layers.N.self_attn.{q,k}_norm``, ``layers.N.mlp.{gate,up,down}_proj``, ``norm``.
Inputs are embeddings, not ids, and are not scaled by sqrt(hidden) (the scaling lived in the deleted embedding).
"""

from __future__ import annotations

from typing import Optional, Union

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..config import GemmaConfig
from .layers import GatedMLP, RMSNorm, merge_heads, rope, split_heads

CACHE_STEP = 256  # positions a cache grows by, so that a step writes in place instead of concatenating

Mask = Union[None, str, mx.array]


def _grown(buf: Optional[mx.array], like: mx.array, used: int, capacity: int) -> mx.array:
    """``buf`` (its first ``used`` positions kept) with room for ``capacity`` positions: [B, N, C, D]."""
    b, n, _, d = like.shape
    room = mx.zeros((b, n, capacity - used, d), dtype=like.dtype)
    return room if buf is None or used == 0 else mx.concatenate([buf[..., :used, :], room], axis=2)


class KVCache:
    """Keys and values of every position so far (full-attention layers). Positions continue across calls."""

    def __init__(self):
        self.keys: Optional[mx.array] = None
        self.values: Optional[mx.array] = None
        self.offset = 0

    def update_and_fetch(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array, Mask]:
        """Append [B, N, L, D] keys/values; return all keys/values so far and the mask for the L new queries."""
        start, n = self.offset, k.shape[2]
        if self.keys is None or self.keys.shape[2] < start + n:
            capacity = -(-(start + n) // CACHE_STEP) * CACHE_STEP
            self.keys, self.values = _grown(self.keys, k, start, capacity), _grown(self.values, v, start, capacity)
        self.keys[..., start:start + n, :] = k
        self.values[..., start:start + n, :] = v
        self.offset += n
        return self.keys[..., :self.offset, :], self.values[..., :self.offset, :], ("causal" if n > 1 else None)

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.keys, self.values) if a is not None]

    def reserve_step(self) -> tuple[int, int]:
        """Room for one more position after at least one: (its slot, the number of stored positions it sees)."""
        if self.keys.shape[2] <= self.offset:
            capacity = (self.offset // CACHE_STEP + 1) * CACHE_STEP
            self.keys = _grown(self.keys, self.keys, self.offset, capacity)
            self.values = _grown(self.values, self.values, self.offset, capacity)
        return self.offset, self.offset + 1


class RotatingKVCache:
    """Keys and values of the last ``window`` positions (sliding layers: a query at p sees keys p-window+1 .. p).

    Position p lives in slot p % window, so a step overwrites exactly the position that left the window."""

    def __init__(self, window: int):
        self.window = window
        self.keys: Optional[mx.array] = None
        self.values: Optional[mx.array] = None
        self.offset = 0

    def _in_order(self, buf: mx.array) -> mx.array:
        """The stored positions oldest first: [B, N, min(offset, window), D]."""
        if self.offset <= self.window:
            return buf[..., :self.offset, :]
        return mx.roll(buf, -(self.offset % self.window), axis=2)

    def _step(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array, Mask]:
        slot = self.offset % self.window
        if self.offset < self.window and (self.keys is None or self.keys.shape[2] <= slot):
            capacity = min(self.window, (slot // CACHE_STEP + 1) * CACHE_STEP)
            self.keys, self.values = _grown(self.keys, k, slot, capacity), _grown(self.values, v, slot, capacity)
        self.keys[..., slot:slot + 1, :] = k
        self.values[..., slot:slot + 1, :] = v
        self.offset += 1
        n = min(self.offset, self.window)  # every stored position is inside the new query's window
        return self.keys[..., :n, :], self.values[..., :n, :], None

    def _block(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array, Mask]:
        n_new = k.shape[2]
        if self.keys is None:
            keys, values = k, v
        else:
            keys = mx.concatenate([self._in_order(self.keys), k], axis=2)
            values = mx.concatenate([self._in_order(self.values), v], axis=2)
        total = self.offset + n_new
        key_pos = mx.arange(total - keys.shape[2], total)
        query_pos = mx.arange(self.offset, total)[:, None]
        mask = (key_pos <= query_pos) & (query_pos - key_pos < self.window)  # [L, T_kv]
        keep = min(total, self.window)
        shift = (total - keep) % self.window  # slot of the oldest kept position
        self.keys = mx.roll(keys[..., -keep:, :], shift, axis=2)
        self.values = mx.roll(values[..., -keep:, :], shift, axis=2)
        self.offset = total
        return keys, values, mask

    def update_and_fetch(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array, Mask]:
        return self._step(k, v) if k.shape[2] == 1 else self._block(k, v)

    def reserve_step(self) -> tuple[int, int]:
        """Room for one more position after at least one: (its slot, the number of stored positions it sees)."""
        slot = self.offset % self.window
        if self.offset < self.window and self.keys.shape[2] <= slot:
            capacity = min(self.window, (slot // CACHE_STEP + 1) * CACHE_STEP)
            self.keys = _grown(self.keys, self.keys, slot, capacity)
            self.values = _grown(self.values, self.values, slot, capacity)
        return slot, min(self.offset + 1, self.window)

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.keys, self.values) if a is not None]


class Gemma3Attention(nn.Module):
    """GQA attention with per-head q/k RMSNorm before RoPE, scale ``query_pre_attn_scalar^-0.5`` (SPEC §2.5.2)."""

    def __init__(self, cfg: GemmaConfig, rope_base: float):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.scale = cfg.query_pre_attn_scalar ** -0.5
        self.rope_base = rope_base
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def __call__(self, x: mx.array, cache: Union[KVCache, RotatingKVCache]) -> mx.array:
        # [B, L, H] -> [B, L, H]; positions cache.offset .. cache.offset + L - 1
        q = rope(self.q_norm(split_heads(self.q_proj(x), self.num_heads)), self.rope_base, cache.offset)
        k = rope(self.k_norm(split_heads(self.k_proj(x), self.num_kv_heads)), self.rope_base, cache.offset)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        keys, values, mask = cache.update_and_fetch(k, v)
        out = mx.fast.scaled_dot_product_attention(q, keys, values, scale=self.scale, mask=mask)
        return self.o_proj(merge_heads(out))


    def step(self, x: mx.array, position: mx.array, keys: mx.array, values: mx.array, slot: mx.array,
             count: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """One position in fixed shapes: x [B, 1, H] at ``position``; its key/value go to ``slot`` of the buffers
        [B, N, C, D]; the query sees the first ``count`` slots (the order of slots does not matter: positions are
        in the keys through RoPE). -> (out [B, 1, H], keys, values)"""
        q = rope(self.q_norm(split_heads(self.q_proj(x), self.num_heads)), self.rope_base, position)
        k = rope(self.k_norm(split_heads(self.k_proj(x), self.num_kv_heads)), self.rope_base, position)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        keys = mx.slice_update(keys, k.astype(keys.dtype), slot, axes=(2,))
        values = mx.slice_update(values, v.astype(values.dtype), slot, axes=(2,))
        mask = mx.arange(keys.shape[2]) < count
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

    def __call__(self, x: mx.array, cache: Union[KVCache, RotatingKVCache]) -> mx.array:
        return self.feed_forward(x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cache)))

    def feed_forward(self, x: mx.array) -> mx.array:
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))

    def step(self, x: mx.array, position: mx.array, keys: mx.array, values: mx.array, slot: mx.array,
             count: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        attn, keys, values = self.self_attn.step(self.input_layernorm(x), position, keys, values, slot, count)
        return self.feed_forward(x + self.post_attention_layernorm(attn)), keys, values


class Gemma3TextModel(nn.Module):
    """Gemma-3 decoder stack over input embeddings; one cache per layer carries the session's positions."""

    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = [Gemma3DecoderLayer(cfg, t == "sliding_attention") for t in cfg.layer_types]
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self._compiled = compute.CompiledFunctions()

    def make_caches(self) -> list[Union[KVCache, RotatingKVCache]]:
        return [RotatingKVCache(self.cfg.sliding_window) if t == "sliding_attention" else KVCache()
                for t in self.cfg.layer_types]

    def __call__(self, x: mx.array, caches: list) -> mx.array:
        # [B, L, H] -> [B, L, H] (after the final norm)
        if x.shape[1] == 1 and caches[0].offset > 0:
            return self.step(x, caches)
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cache)
        return self.norm(x)

    def step(self, x: mx.array, caches: list) -> mx.array:
        """One position after a warm-up: the whole stack as one compiled function over fixed-shape cache buffers
        (they grow by CACHE_STEP positions, so it is traced again only then). [B, 1, H] -> [B, 1, H]"""
        slots, counts = zip(*(cache.reserve_step() for cache in caches))
        buffers = [a for cache in caches for a in (cache.keys, cache.values)]
        position = mx.array(caches[0].offset)
        fn = self._compiled.get("step", self.run_step)  # traced again when a buffer's shape changes
        out, *buffers = fn(x, position, mx.array(slots), mx.array(counts), *buffers)
        for i, cache in enumerate(caches):
            cache.keys, cache.values = buffers[2 * i], buffers[2 * i + 1]
            cache.offset += 1
        return out

    def run_step(self, x: mx.array, position: mx.array, slots: mx.array, counts: mx.array, *buffers) -> tuple:
        out = []
        for i, layer in enumerate(self.layers):
            x, keys, values = layer.step(x, position, buffers[2 * i], buffers[2 * i + 1], slots[i:i + 1], counts[i])
            out += [keys, values]
        return (self.norm(x), *out)
