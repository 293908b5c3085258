"""Mixture-of-Gaussians head of EAR-TTS and its component sampling (docs/model.md §2.5.7).

Keys (under ``tts_model.tts_model.mog_head.``): ``mlp_stack.{0..n-1}.{pre_norm, mlp.{gate,up,down}_proj, post_norm}``,
``mlp_stack.n`` (final RMSNorm), ``proj_logits``, ``proj_mus``, ``proj_logs``, ``proj_else``, ``low_mat``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

import mlx.core as mx
import mlx.nn as nn

from ..config import MoGConfig
from ..layers import Linear
from .layers import MLPLayer, RMSNorm

GUMBEL_EPS = 1e-8  # docs/model.md §2.5.7: inside both logs of -log(-log(u + eps) + eps)


# ----------------------------------------------------------------------------------------------------------------
# randomness
# ----------------------------------------------------------------------------------------------------------------
class NoiseSource(Protocol):
    """The random draws of one frame's n MoG iterations: (Gumbel [n, 1, components], normal [n, 1, latent]);
    iteration i uses gumbel[i], then normal[i] (NeMo's order)."""

    def frame(self, n: int, components: int, latent: int) -> tuple[mx.array, mx.array]: ...


def gumbel_from_uniform(u: mx.array) -> mx.array:
    return -mx.log(-mx.log(u + GUMBEL_EPS) + GUMBEL_EPS)


class KeyNoise:
    """Draws from an explicit ``mx.random`` key, split once per frame, so a session's draws depend only on its seed."""

    def __init__(self, seed_or_key):
        self.key = mx.random.key(seed_or_key) if isinstance(seed_or_key, int) else seed_or_key

    def frame(self, n: int, components: int, latent: int) -> tuple[mx.array, mx.array]:
        keys, gumbel, normal = key_draws(self.key[None], n, components, latent)
        self.key = keys[0]
        return gumbel[0], normal[0]


def draw_frame(key: mx.array, n: int, components: int, latent: int) -> tuple[mx.array, mx.array, mx.array]:
    """One key's frame: (next key, Gumbel [n, 1, components], normal [n, 1, latent])."""
    key, g, z = mx.random.split(key, 3)
    return (key, gumbel_from_uniform(mx.random.uniform(shape=(n, 1, components), key=g)),
            mx.random.normal(shape=(n, 1, latent), key=z))


def key_draws(keys: mx.array, n: int, components: int, latent: int) -> tuple[mx.array, mx.array, mx.array]:
    """:func:`draw_frame` for each row's key at once (one call for a group's rows; each row's draws are those its key
    gives alone): keys [R, 2] -> (next keys [R, 2], Gumbel [R, n, 1, components], normal [R, n, 1, latent])."""
    return mx.vmap(lambda key: draw_frame(key, n, components, latent))(keys)


# ----------------------------------------------------------------------------------------------------------------
# logit filters (transformers' TopPLogitsWarper / TopKLogitsWarper, min_tokens_to_keep 1)
# ----------------------------------------------------------------------------------------------------------------
def top_p_filter(logits: mx.array, p: float) -> mx.array:
    """Sort ascending, drop the entries whose cumulative softmax is <= 1 - p, always keep the largest: [..., N]."""
    return drop_mass(logits, mx.array(1.0 - p))


def drop_mass(logits: mx.array, mass: mx.array) -> mx.array:
    """:func:`top_p_filter` with the dropped mass 1 - p given, one per row ([..., 1] or a scalar), formed in double
    precision on the host as a float p's is: [..., N]."""
    order = mx.argsort(logits, axis=-1)
    ascending = mx.take_along_axis(logits, order, axis=-1)
    cumulative = mx.cumsum(mx.softmax(ascending, axis=-1), axis=-1)
    drop_sorted = cumulative <= mass
    keep_largest = mx.arange(logits.shape[-1]) == logits.shape[-1] - 1
    drop_sorted = drop_sorted & ~keep_largest
    drop = mx.put_along_axis(mx.zeros(logits.shape, dtype=mx.bool_), order, drop_sorted, axis=-1)
    return mx.where(drop, -mx.inf, logits)


def top_k_filter(logits: mx.array, k) -> mx.array:
    """Drop the entries below the k-th largest (ties with it are kept); ``k`` an int or one per row [..., 1]:
    [..., N]."""
    n = logits.shape[-1]
    k = mx.minimum(mx.broadcast_to(mx.array(k), (*logits.shape[:-1], 1)), n)
    kth = mx.take_along_axis(mx.sort(logits, axis=-1), (n - k).astype(mx.int32), axis=-1)
    return mx.where(logits < kth, -mx.inf, logits)


NO_FILTER, TOP_P, TOP_K = 0, 1, 2


@dataclass(frozen=True)
class Filters:
    """The component filter of each row of a group (docs/batching.md): its kind (none, top-p or top-k: a top-k
    wins over a top-p) and value. ``kinds``: the kinds present, which fix the computation's shape."""

    kinds: frozenset
    kind: mx.array  # [R, 1] int
    mass: mx.array  # [R, 1] float32: 1 - p
    k: mx.array  # [R, 1] int

    @staticmethod
    def of(rows: list) -> "Filters":
        """From each row's (top_p or None, top_k or None)."""
        kinds = [TOP_K if k is not None else TOP_P if p is not None else NO_FILTER for p, k in rows]
        column = lambda values, dtype: mx.array(values, dtype).reshape(-1, 1)  # noqa: E731
        return Filters(frozenset(kinds), column(kinds, mx.int32),
                       column([1.0 - p if p is not None else 0.0 for p, _ in rows], mx.float32),
                       column([k if k is not None else 1 for _, k in rows], mx.int32))

    def arrays(self) -> tuple:
        return self.kind, self.mass, self.k

    def apply(self, logits: mx.array, kind: mx.array, mass: mx.array, k: mx.array) -> mx.array:
        """Each row of logits [R, N] filtered by its own kind (the arrays as :meth:`arrays` gives them, passed
        explicitly so that a compiled caller takes them as inputs)."""
        out = logits
        if TOP_K in self.kinds:
            out = mx.where(kind == TOP_K, top_k_filter(logits, k), out)
        if TOP_P in self.kinds:
            out = mx.where(kind == TOP_P, drop_mass(logits, mass), out)
        return out


def choose_component(logits: mx.array, gumbel: mx.array, top_p: Optional[float], top_k: Optional[int]) -> mx.array:
    """Gumbel-max sample of a mixture component, in float32: argmax(log_softmax(filtered logits) + G).
    [..., N] -> [...]"""
    logits = logits.astype(mx.float32)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    elif top_p is not None:
        logits = top_p_filter(logits, top_p)
    return gumbel_max(logits, gumbel)


def gumbel_max(logits: mx.array, gumbel: mx.array) -> mx.array:
    """argmax(log_softmax(logits) + G) of filtered float32 logits: [..., N] -> [...]"""
    log_probs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return mx.argmax(log_probs + gumbel, axis=-1)


# ----------------------------------------------------------------------------------------------------------------
# the head
# ----------------------------------------------------------------------------------------------------------------
class MoGHead(nn.Module):
    def __init__(self, cfg: MoGConfig, hidden_size: int, out_size: int):
        super().__init__()
        n, r = cfg.num_predictions, cfg.low_rank
        self.num_predictions, self.low_rank, self.min_log_std = n, r, cfg.min_log_std
        self.mlp_stack = [MLPLayer(hidden_size, cfg.intermediate_size, cfg.eps) for _ in range(cfg.num_layers)]
        self.mlp_stack.append(RMSNorm(hidden_size, cfg.eps))
        self.proj_logits = Linear(hidden_size, n, bias=False)
        self.proj_mus = Linear(hidden_size, n * r, bias=False)
        self.proj_logs = Linear(hidden_size, 1, bias=False)
        self.proj_else = Linear(hidden_size, out_size, bias=False)
        self.low_mat = mx.zeros((n, out_size, r))

    def trunk(self, x: mx.array) -> mx.array:
        for layer in self.mlp_stack:
            x = layer(x)
        return x

    def component_mean(self, x: mx.array, component: mx.array) -> mx.array:
        """``low_mat[c] @ (proj_mus.weight[c*r:(c+1)*r] @ x)``, gathering only the chosen component's rows.
        [B, H], [B] -> [B, out]"""
        hidden = x.shape[-1]
        rows = self.proj_mus.weight.reshape(self.num_predictions, self.low_rank, hidden)[component]  # [B, r, H]
        low = (rows @ x[..., None])  # [B, r, 1]
        return (self.low_mat[component] @ low)[..., 0]

    def infer(self, x: mx.array, guidance_scale: Optional[mx.array], choose,
              gumbel: mx.array) -> tuple[mx.array, mx.array]:
        """``MoGHead.infer``: x [2B, H] ([cond; uncond]) with ``guidance_scale`` (one per row [B, 1]), else [B, H]
        -> (mean, log std) [B, out], [B, 1]; ``choose(logits [B, N] float32)`` filters each row's component logits,
        ``gumbel`` [B, N] is the component noise."""
        x = self.trunk(x)
        if guidance_scale is not None:
            cond, uncond = mx.split(x, 2, axis=0)
            x = cond + guidance_scale.astype(x.dtype) * (cond - uncond)
        component = gumbel_max(choose(self.proj_logits(x).astype(mx.float32)), gumbel)
        mu = self.component_mean(x, component)
        logs = mx.maximum(self.proj_logs(x), self.min_log_std)
        return mu * mx.exp(logs) + self.proj_else(x), logs
