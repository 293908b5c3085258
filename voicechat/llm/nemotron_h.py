"""Nemotron-H, the LLM of the STT side (``stt_model.llm.*``, docs/model.md §2.4).

A hybrid stack with one block per pattern letter: ``M`` Mamba-2 mixer, ``*`` attention (GQA, no positional
encoding), ``-`` squared-ReLU MLP. Every block is ``x + mixer(RMSNorm(x))`` and ``norm_f`` closes the stack, so the
output is the normalised hidden state both vocabulary heads read.

Modules hold weights only. Per-session state (Mamba conv + SSM state, attention keys/values) lives in an
:class:`LLMCache`, so several sessions can share one model. A call with L > 1 positions is a prefill (Mamba: the
chunked state-space-dual scan, carrying the state in and out), L == 1 a recurrent decode step; both compute the same
recurrence.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..cache import KVCache, RowsKV, visible_slots, write_slots
from ..config import LLMConfig
from ..layers import CausalDepthwiseConv, Linear


# ----------------------------------------------------------------------------------------------------------------
# per-session state
# ----------------------------------------------------------------------------------------------------------------
class MambaCache:
    """The last ``conv_kernel - 1`` inputs of the depthwise conv [B, K-1, conv_dim] and the SSM state [B, H, P, N];
    ``keep`` (a group's decode step): [B] bool, the rows whose state advances (None: all)."""

    def __init__(self):
        self.conv: Optional[mx.array] = None
        self.ssm: Optional[mx.array] = None
        self.keep: Optional[mx.array] = None


class LLMCache:
    """One session's Nemotron-H state: a :class:`MambaCache` per Mamba layer, a :class:`KVCache` per attention
    layer, None per MLP layer. With ``rows``, the state of that many conversations, one per row (attention:
    :class:`~voicechat.cache.RowsKV`, each row with its own positions)."""

    def __init__(self, pattern: str, rows: Optional[int] = None):
        attention = KVCache if rows is None else (lambda: RowsKV(rows))
        self.rows = rows
        self.layers = [MambaCache() if c == "M" else attention() if c == "*" else None for c in pattern]

    def with_rows(self, rows: int) -> None:
        """Room for ``rows`` conversations (a rows cache): every state padded with zero rows."""
        self.rows = rows
        for c in self.layers:
            if isinstance(c, MambaCache):
                if c.conv is not None:
                    c.conv, c.ssm = (mx.pad(a, [(0, rows - a.shape[0])] + [(0, 0)] * (a.ndim - 1))
                                     for a in (c.conv, c.ssm))
            elif c is not None:
                c.with_rows(rows, 1)
        mx.eval(self.state)

    def put(self, row: int, one: "LLMCache") -> None:
        """Conversation ``one``'s state (a single cache, after its prompt or none) into ``row`` of this rows cache."""
        for c, src in zip(self.layers, one.layers):
            if isinstance(c, MambaCache):
                like = src if src.conv is not None else c
                if like.conv is None:
                    continue  # neither has run a position: the first step makes the zero state of every row
                if c.conv is None:
                    c.conv, c.ssm = (mx.zeros((self.rows, *a.shape[1:]), a.dtype) for a in (src.conv, src.ssm))
                for name in ("conv", "ssm"):
                    buf = getattr(c, name)
                    value = getattr(src, name) if src.conv is not None else mx.zeros((1, *buf.shape[1:]), buf.dtype)
                    start = mx.array([row] + [0] * (buf.ndim - 1))
                    setattr(c, name, mx.slice_update(buf, value.astype(buf.dtype), start, axes=tuple(range(buf.ndim))))
            elif c is not None:
                c.put([row], src)
        mx.eval(self.state)

    @property
    def state(self) -> list[mx.array]:
        """The arrays to evaluate together with a call's outputs (so the graph does not grow across calls)."""
        arrays = []
        for c in self.layers:
            if isinstance(c, MambaCache):
                arrays += [a for a in (c.conv, c.ssm) if a is not None]
            elif c is not None and c.keys is not None:
                arrays += [c.keys, c.values]
        return arrays


# ----------------------------------------------------------------------------------------------------------------
# norms
# ----------------------------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x^2) + eps)`` in float32, no +1 offset (docs/model.md §2.4)."""

    def __init__(self, dims: int, eps: float):
        super().__init__()
        self.weight = mx.ones((dims,))
        self.eps = eps
        self._weight32 = compute.Derived()

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.rms_norm(x.astype(mx.float32), self.weight32(), self.eps).astype(x.dtype)

    def weight32(self) -> mx.array:
        """The weight in float32, made once per loaded weight (not a conversion kernel per call)."""
        return self._weight32.of(self.weight, lambda w: w.astype(mx.float32))

    def prepare(self) -> list[mx.array]:
        return [self.weight32()]


class GatedRMSNorm(nn.Module):
    """Mamba's output norm with norm_before_gate=False: ``y * silu(z)``, RMS-normalised per group of
    ``dims / groups`` channels, times ``weight`` (docs/model.md §2.4)."""

    def __init__(self, dims: int, groups: int, eps: float):
        super().__init__()
        self.weight = mx.ones((dims,))
        self.groups = groups
        self.eps = eps
        self._weight32 = compute.Derived()

    def __call__(self, y: mx.array, z: mx.array) -> mx.array:
        # [B, L, inner] x2 -> [B, L, inner]
        gated = y.astype(mx.float32) * nn.silu(z.astype(mx.float32))
        grouped = gated.reshape(*gated.shape[:-1], self.groups, -1)
        normed = mx.fast.rms_norm(grouped, None, self.eps).reshape(gated.shape)
        return (self.weight32() * normed).astype(z.dtype)

    def weight32(self) -> mx.array:
        return self._weight32.of(self.weight, lambda w: w.astype(mx.float32))

    def prepare(self) -> list[mx.array]:
        return [self.weight32()]


# ----------------------------------------------------------------------------------------------------------------
# Mamba-2 math
# ----------------------------------------------------------------------------------------------------------------
def step_sizes(dt: mx.array, dt_bias: mx.array, low: float, high: float) -> mx.array:
    """``clip(softplus(dt + dt_bias), low, high)``: the per-head time step (docs/model.md §2.4, time_step_limit)."""
    return mx.clip(nn.softplus(dt + dt_bias), low, None if math.isinf(high) else high)


def segment_sum(a: mx.array) -> mx.array:
    """[..., T] -> [..., T, T]: ``out[i, j] = a[j+1] + ... + a[i]`` for i >= j and -inf above the diagonal, so that
    ``exp(out)`` is the decay from position j to i. A masked cumulative sum (no difference of two long cumsums)."""
    t = a.shape[-1]
    rows = mx.arange(t)[:, None]
    cols = mx.arange(t)[None, :]
    terms = mx.where(rows > cols, a[..., :, None], 0.0)  # terms[k, j] = a[k] for k > j
    return mx.where(rows >= cols, mx.cumsum(terms, axis=-2), -mx.inf)


def ssm_step(x: mx.array, dt: mx.array, a: mx.array, b: mx.array, c: mx.array, d: mx.array,
             state: mx.array, keep: Optional[mx.array] = None) -> tuple[mx.array, mx.array]:
    """One recurrent step: ``h = exp(dt*A) h + dt * x B^T``, ``y = h C + D x``.

    x [Bt, G, r, P, 1] (the r = H/G heads of each group together), dt [Bt, G, r, 1, 1], a / d [G, r, 1, 1],
    b [Bt, G, 1, 1, N], c [Bt, G, 1, N, 1], state [Bt, G, r, P, N] -> y [Bt, G, r, P, 1], state. ``keep`` [Bt] bool:
    the rows whose state advances; the others keep theirs bit for bit. The choice is part of the update's own
    elementwise expression (one fused pass over the state), not a second pass over the whole state after it: the
    state is the largest tensor of a decode step (docs/batching.md §6)."""
    new = mx.exp(dt * a) * state + (dt * x) * b
    if keep is not None:
        new = mx.where(keep.reshape(-1, 1, 1, 1, 1), new, state)
    return new @ c + d * x, new


def ssd_scan(x: mx.array, dt: mx.array, a: mx.array, b: mx.array, c: mx.array, chunk: int,
             state: mx.array) -> tuple[mx.array, mx.array]:
    """The recurrence of :func:`ssm_step` (without the D skip) over L positions, in Mamba-2's chunked
    (state-space-dual) form: within a chunk as a masked matrix product, across chunks by carrying the chunk-end
    states.

    x [Bt, L, H, P], dt [Bt, L, H], a [H], b/c [Bt, L, G, N], state [Bt, H, P, N] (entering)
    -> y [Bt, L, H, P], state after the last position."""
    bt, length, h, p = x.shape
    g, n = b.shape[2:]
    r = h // g
    q = min(chunk, length)
    nc = -(-length // q)
    pad = nc * q - length
    log_decay = dt * a  # [Bt, L, H]
    xdt = x * dt[..., None]
    if pad:  # padded steps have zero input and zero log-decay, so they change neither outputs nor the state
        log_decay, xdt, b, c = (mx.pad(t, [(0, 0), (0, pad)] + [(0, 0)] * (t.ndim - 2)) for t in (log_decay, xdt, b, c))

    log_decay = log_decay.reshape(bt, nc, q, h).transpose(0, 1, 3, 2)  # [Bt, c, H, Q]
    xdt = xdt.reshape(bt, nc, q, g, r, p).transpose(0, 1, 3, 4, 2, 5)  # [Bt, c, G, r, Q, P]
    b = b.reshape(bt, nc, q, g, n).transpose(0, 1, 3, 2, 4)  # [Bt, c, G, Q, N]
    c = c.reshape(bt, nc, q, g, n).transpose(0, 1, 3, 2, 4)
    cum = mx.cumsum(log_decay, axis=-1)  # [Bt, c, H, Q]

    # within each chunk: y[l] = sum_{s <= l} (C_l . B_s) exp(cum_l - cum_s) xdt_s
    decay_within = mx.exp(segment_sum(log_decay)).reshape(bt, nc, g, r, q, q)
    scores = (c @ b.swapaxes(-1, -2))[:, :, :, None]  # [Bt, c, G, 1, Q, Q]
    y = (scores * decay_within) @ xdt  # [Bt, c, G, r, Q, P]

    # the state each chunk's own inputs leave at its end
    to_end = mx.exp(cum[..., -1:] - cum).reshape(bt, nc, g, r, q, 1)
    own = (xdt * to_end).swapaxes(-1, -2) @ b[:, :, :, None]  # [Bt, c, G, r, P, N]

    # states entering each chunk (and the final one): decayed sums of the earlier chunks' states
    own = own.reshape(bt, nc, h, p * n).transpose(0, 2, 1, 3)  # [Bt, H, c, P*N]
    states = mx.concatenate([state.reshape(bt, h, 1, p * n), own], axis=2)  # [Bt, H, c+1, P*N]
    chunk_totals = mx.pad(cum[..., -1].transpose(0, 2, 1), [(0, 0), (0, 0), (1, 0)])  # [Bt, H, c+1]
    carried = mx.exp(segment_sum(chunk_totals)) @ states  # [Bt, H, c+1, P*N]
    final = mx.contiguous(carried[:, :, -1]).reshape(bt, h, p, n)  # a view would pin all chunk states
    entering = carried[:, :, :-1].reshape(bt, g, r, nc, p, n).transpose(0, 3, 1, 2, 5, 4)  # [Bt, c, G, r, N, P]

    # what the entering state adds: exp(cum_l) C_l . h_entering
    y = y + (c[:, :, :, None] @ entering) * mx.exp(cum).reshape(bt, nc, g, r, q, 1)
    y = y.transpose(0, 1, 4, 2, 3, 5).reshape(bt, nc * q, h, p)
    return y[:, :length], final


# ----------------------------------------------------------------------------------------------------------------
# mixers
# ----------------------------------------------------------------------------------------------------------------
class Mamba2Mixer(nn.Module):
    """``layers.N.mixer`` for pattern letter M (docs/model.md §2.4)."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.heads, self.head_dim = cfg.mamba_num_heads, cfg.mamba_head_dim
        self.groups, self.state_size = cfg.n_groups, cfg.ssm_state_size
        self.inner, self.conv_dim = cfg.mamba_inner, cfg.conv_dim
        self.chunk_size = cfg.chunk_size
        self.dt_low, self.dt_high = cfg.time_step_limit
        self.in_proj = Linear(cfg.hidden_size, self.inner + self.conv_dim + self.heads, bias=cfg.mamba_proj_bias)
        self.conv1d = CausalDepthwiseConv(self.conv_dim, cfg.conv_kernel, cfg.use_conv_bias)
        self.dt_bias = mx.zeros((self.heads,))
        self.A_log = mx.zeros((self.heads,))
        self.D = mx.ones((self.heads,))
        self.norm = GatedRMSNorm(self.inner, self.groups, cfg.layer_norm_epsilon)
        self.out_proj = Linear(self.inner, cfg.hidden_size, bias=cfg.mamba_proj_bias)

    def __call__(self, x: mx.array, cache: MambaCache) -> mx.array:
        # [B, L, hidden] -> [B, L, hidden]
        bt, length, _ = x.shape
        h, p, g, n = self.heads, self.head_dim, self.groups, self.state_size
        z, xbc, dt = mx.split(self.in_proj(x), [self.inner, self.inner + self.conv_dim], axis=-1)
        xbc = nn.silu(self._causal_conv(xbc, cache)).astype(mx.float32)
        xs, b, c = mx.split(xbc, [self.inner, self.inner + g * n], axis=-1)
        dt = step_sizes(dt.astype(mx.float32), self.dt_bias, self.dt_low, self.dt_high)  # [B, L, H]
        a = -mx.exp(self.A_log)
        state = cache.ssm
        if state is None:
            state = mx.zeros((bt, h, p, n), mx.float32)
        if length == 1:  # decode: one position, heads grouped with the B / C they share
            r = h // g
            y, state = ssm_step(xs.reshape(bt, g, r, p, 1), dt.reshape(bt, g, r, 1, 1), a.reshape(g, r, 1, 1),
                                b.reshape(bt, g, 1, 1, n), c.reshape(bt, g, 1, n, 1), self.D.reshape(g, r, 1, 1),
                                state.reshape(bt, g, r, p, n), cache.keep)
            cache.ssm = state.reshape(bt, h, p, n)
        else:
            xs = xs.reshape(bt, length, h, p)
            y, cache.ssm = ssd_scan(xs, dt, a, b.reshape(bt, length, g, n), c.reshape(bt, length, g, n),
                                    self.chunk_size, state)
            y = y + xs * self.D[:, None]
        return self.out_proj(self.norm(y.reshape(bt, length, self.inner), z))

    def _causal_conv(self, xbc: mx.array, cache: MambaCache) -> mx.array:
        # [B, L, conv_dim] -> [B, L, conv_dim]: the kernel also sees the K-1 inputs before this call (zeros at start)
        k = self.conv1d.weight.shape[1]
        past = cache.conv
        if past is None:
            past = mx.zeros((xbc.shape[0], k - 1, self.conv_dim), xbc.dtype)
        window = mx.concatenate([past, xbc], axis=1)
        tail = window[:, -(k - 1):]
        cache.conv = tail if xbc.shape[1] == 1 else mx.contiguous(tail)  # a view would pin a prefill's whole window
        return self.conv1d(window)


class Attention(nn.Module):
    """``layers.N.mixer`` for pattern letter *: causal GQA, no positional encoding, scale head_dim^-0.5."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        bias = cfg.attention_bias
        self.q_proj = Linear(cfg.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = Linear(self.heads * self.head_dim, cfg.hidden_size, bias=bias)

    def __call__(self, x: mx.array, cache: KVCache) -> mx.array:
        # [B, L, hidden] -> [B, L, hidden]
        bt, length, _ = x.shape
        q = self.q_proj(x).reshape(bt, length, self.heads, self.head_dim).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(bt, length, self.kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(bt, length, self.kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        k, v, mask = cache.update_and_fetch(k, v)  # "causal": the L queries come after the cached history
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask=mask)
        return self.o_proj(o.transpose(0, 2, 1, 3).reshape(bt, length, -1))


    def step(self, x: mx.array, keys: mx.array, values: mx.array, slots: mx.array,
             counts: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """One position in fixed shapes: row r's key/value written to slot ``slots[r]`` of the buffers [B, kv, C, D],
        its query attending its first ``counts[r]`` slots (``slots``, ``counts`` [B], or [1] for every row).
        [B, 1, hidden] -> ([B, 1, hidden], keys, values)"""
        bt = x.shape[0]
        q = self.q_proj(x).reshape(bt, 1, self.heads, self.head_dim).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(bt, 1, self.kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(bt, 1, self.kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        keys, values = write_slots(keys, k, slots), write_slots(values, v, slots)
        o = mx.fast.scaled_dot_product_attention(q, keys, values, scale=self.scale,
                                                 mask=visible_slots(counts, keys.shape[2]))
        return self.o_proj(o.transpose(0, 2, 1, 3).reshape(bt, 1, -1)), keys, values


class MLP(nn.Module):
    """``layers.N.mixer`` for pattern letter -: ``down(relu(up(x))^2)``."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)

    def __call__(self, x: mx.array, cache: None = None) -> mx.array:
        return self.down_proj(mx.square(nn.relu(self.up_proj(x))))


MIXERS = {"M": Mamba2Mixer, "*": Attention, "-": MLP}


class Block(nn.Module):
    """``layers.N``: ``x + mixer(norm(x))``."""

    def __init__(self, cfg: LLMConfig, letter: str):
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon)
        self.mixer = MIXERS[letter](cfg)

    def __call__(self, x: mx.array, cache) -> mx.array:
        return x + self.mixer(self.norm(x), cache)


# ----------------------------------------------------------------------------------------------------------------
# the stack
# ----------------------------------------------------------------------------------------------------------------
class NemotronH(nn.Module):
    """``stt_model.llm``: the blocks of ``cfg.pattern`` and ``norm_f`` (the token embedding lives outside, in
    ``stt_model.embed_tokens``)."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.cfg = cfg
        self.pattern = cfg.pattern
        self.layers = [Block(cfg, letter) for letter in cfg.pattern]
        self.norm_f = RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon)
        self._compiled = compute.CompiledFunctions()

    def make_cache(self, rows: Optional[int] = None) -> LLMCache:
        return LLMCache(self.pattern, rows)

    def __call__(self, x: mx.array, cache: Optional[LLMCache] = None, active: Optional[np.ndarray] = None) -> mx.array:
        # [B, L, hidden] -> [B, L, hidden] (after norm_f); cache None: a stand-alone pass from the empty state;
        # ``active`` (one position, rows of a group): the rows whose state advances
        cache = cache if cache is not None else self.make_cache()
        if x.shape[1] == 1:
            return self.norm_f(self.decode(x, cache, active))
        for layer, layer_cache in zip(self.layers, cache.layers):
            x = layer(x, layer_cache)
        return self.norm_f(x)

    def decode(self, x: mx.array, cache: LLMCache, active: Optional[np.ndarray] = None) -> mx.array:
        """One position: the whole stack as one compiled function over fixed-shape state (Mamba conv and SSM states;
        attention key/value buffers that grow by doubling, so it is traced again only then), its
        elementwise work fused. Each row has its own slots and counts (a group's rows hold caches of different
        lengths); ``active`` [B] bool: the rows whose state advances (None: all; the others keep theirs exactly).
        [B, 1, hidden] -> [B, 1, hidden] before norm_f"""
        states, steps = [], []
        for c in cache.layers:
            if isinstance(c, MambaCache):
                states += self.mamba_state(c, x)
            elif c is not None:
                steps.append(c.reserve_step(mx.zeros((x.shape[0], self.cfg.num_key_value_heads, 1, self.cfg.head_dim),
                                                     x.dtype)))
                states += [c.keys, c.values]
        slots, counts = ((mx.array(np.stack(v).astype(np.int32)) for v in zip(*steps)) if steps
                         else (mx.zeros((0, 1), mx.int32),) * 2)
        keep = mx.array(np.ones(x.shape[0], bool) if active is None else active)
        x, *states = self._compiled.get("decode", self.run_decode)(x, slots, counts, keep, *states)
        for c in cache.layers:
            if isinstance(c, MambaCache):
                (c.conv, c.ssm), states = states[:2], states[2:]
            elif c is not None:
                (c.keys, c.values), states = states[:2], states[2:]
                c.advance(active)
        return x

    def warm_up(self, capacities: list[int], rows: int = 1) -> None:
        """One decode step of ``rows`` conversations at each attention-cache capacity (zero state, evaluated): traced
        and compiled ahead."""
        x = mx.zeros((rows, 1, self.cfg.hidden_size), compute.speech_dtype())
        for capacity in capacities:
            cache = self.cache_at(capacity, rows)
            mx.eval(self.decode(x, cache), cache.state)

    def cache_at(self, capacity: int, rows: int = 1) -> LLMCache:
        """A zero state of ``rows`` conversations (a group's) whose next decode step meets attention buffers of
        ``capacity`` slots."""
        cache, dtype = self.make_cache(rows), compute.speech_dtype()
        for c in cache.layers:
            if isinstance(c, RowsKV):
                c.keys = c.values = mx.zeros((rows, self.cfg.num_key_value_heads, capacity, self.cfg.head_dim), dtype)
                c.offsets = np.full(rows, capacity - 1)
        return cache

    def mamba_state(self, c: MambaCache, x: mx.array) -> list[mx.array]:
        """A Mamba layer's [conv, ssm] state, zeros before the first position."""
        if c.conv is None:
            cfg = self.cfg
            c.conv = mx.zeros((x.shape[0], cfg.conv_kernel - 1, cfg.conv_dim), x.dtype)
            c.ssm = mx.zeros((x.shape[0], cfg.mamba_num_heads, cfg.mamba_head_dim, cfg.ssm_state_size), mx.float32)
        return [c.conv, c.ssm]

    def run_decode(self, x: mx.array, slots: mx.array, counts: mx.array, active: mx.array, *states: mx.array) -> tuple:
        """Every block on one position: (x, per attention block the rows' slots and counts [A, B], the rows that
        advance [B], per Mamba block conv and ssm, per attention block keys and values) -> (x, the new states in the
        same order)."""
        out, states, a = [], list(states), 0
        for layer in self.layers:
            mixer = layer.mixer
            if isinstance(mixer, Mamba2Mixer):
                cache = MambaCache()
                (conv, ssm), states = states[:2], states[2:]
                cache.conv, cache.ssm, cache.keep = conv, ssm, active
                x = layer(x, cache)
                out += [compute.kept_where(active, cache.conv, conv), cache.ssm]
            elif isinstance(mixer, Attention):
                (keys, values), states = states[:2], states[2:]
                y, keys, values = mixer.step(layer.norm(x), keys, values, compute.entry(slots, a),
                                             compute.entry(counts, a))
                x, a = x + y, a + 1
                out += [keys, values]
            else:
                x = layer(x, None)
        return (x, *out)
