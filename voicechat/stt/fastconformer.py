"""FastConformer encoder: NeMo's ConformerEncoder at inference (docs/model.md §2.2), ``stt_model.perception.encoder.*``.

log-mel [B, T, F] -> dw-striding subsampling x8 (``pre_encode``) -> (x sqrt(d_model) if xscaling) -> conformer layers
-> [B, T / 8, d_model]. Module attribute names are the checkpoint's key names (docs/model.md §2.2.4).

Self-attention is NeMo's relative-position attention with its masks (limited context + padding), computed over
blocks of queries against only the keys their context can reach, so memory grows linearly with the input length:
with att_context_size [70, 0] a query sees at most 71 keys, and no T x T matrix is ever built. Every score that
NeMo's masked full attention would keep is computed the same way; the masked ones it drives to exactly zero
probability are left out, so the result is the same (tests/test_fastconformer.py checks it against a dense one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..config import EncoderConfig
from ..errors import ConfigError
from ..layers import CausalDepthwiseConv, Linear

SUBSAMPLING_KERNEL = 3
SUBSAMPLING_STRIDE = 2
NORM_EPS = 1e-5  # torch.nn.LayerNorm / BatchNorm1d default, all conformer norms (docs/model.md §2.2.4)
MASKED_SCORE = -10000.0  # NeMo's INF_VAL fill for masked attention scores (docs/model.md §2.2.3)
POS_EMB_BASE = 10000.0  # sinusoid base of the relative positional encoding (docs/model.md §2.2.2)
QUERY_BLOCK = 64  # queries per attention block; any value gives the same result, this one suits CPU BLAS


# ----------------------------------------------------------------------------------------------------------------
# subsampling (pre_encode)
# ----------------------------------------------------------------------------------------------------------------
def subsampling_padding(causal: bool) -> tuple[int, int]:
    """(left, right) zero padding of each stride-2 conv, on time and frequency alike: CausalConv2D pads
    (kernel - 1, stride - 1), the symmetric variant (kernel - 1) // 2 on both sides (docs/model.md §2.2.1)."""
    if causal:
        return SUBSAMPLING_KERNEL - 1, SUBSAMPLING_STRIDE - 1
    return (SUBSAMPLING_KERNEL - 1) // 2, (SUBSAMPLING_KERNEL - 1) // 2


def strided_length(length, causal: bool):
    """Output length of one stride-2 conv: floor((L + pad_left + pad_right - kernel) / stride) + 1."""
    left, right = subsampling_padding(causal)
    return (length + left + right - SUBSAMPLING_KERNEL) // SUBSAMPLING_STRIDE + 1


def subsampled_length(length, factor: int, causal: bool):
    """Encoder frames for ``length`` feature frames: the stride-2 rule applied log2(factor) times (causal: g(x) =
    floor(x / 2) + 1, so 100 -> 14, 128 -> 17)."""
    for _ in range(int(math.log2(factor))):
        length = strided_length(length, causal)
    return length


def zero_past_length(x: mx.array, lengths: mx.array) -> mx.array:
    """Frames at and past each item's length set to 0 (axis 1 is time)."""
    inside = mx.arange(x.shape[1])[None, :] < lengths[:, None]
    return mx.where(inside.reshape(inside.shape + (1,) * (x.ndim - 2)), x, 0.0)


def strided_taps(x: mx.array) -> list[mx.array]:
    """The 3x3 stride-2 conv's nine inputs over a padded [B, T, F, C]: tap (i, j) holds x[:, 2t + i, 2f + j] for every
    output (t, f), [B, T', F', C] each, row-major over (i, j) as the conv's weight."""
    k, s = SUBSAMPLING_KERNEL, SUBSAMPLING_STRIDE
    t2, f2 = (x.shape[1] - k) // s + 1, (x.shape[2] - k) // s + 1
    return [x[:, i:i + s * (t2 - 1) + 1:s, j:j + s * (f2 - 1) + 1:s] for i in range(k) for j in range(k)]


class StridedDepthwiseConv(nn.Module):
    """The subsampling's ``Conv2d(C, C, 3, stride=2, groups=C)``: weight [C, 3, 3, 1] (channels-last), bias [C]. Its
    nine taps times their weight columns, added in a fixed order in float32 (as a conv accumulates): elementwise, so
    each item's numbers are what they are alone whatever the batch, on every device; as one conv, cuDNN picks its
    algorithm by the batch's shape (docs/batching.md §3). Compiled, the sum is one fused kernel."""

    def __init__(self, channels: int):
        super().__init__()
        k = SUBSAMPLING_KERNEL
        self.weight = mx.zeros((channels, k, k, 1))
        self.bias = mx.zeros((channels,))
        self._taps = compute.Derived()

    def __call__(self, x: mx.array) -> mx.array:
        # padded [B, T, F, C] -> [B, T', F', C]
        taps, columns = strided_taps(x.astype(mx.float32)), self.columns()
        total = taps[0] * columns[0]
        for tap, column in zip(taps[1:], columns[1:]):
            total = total + tap * column
        return total.astype(x.dtype) + self.bias

    def columns(self) -> list[mx.array]:
        """The nine weight columns [C] in float32, each its own array, made once per loaded weight."""
        k = SUBSAMPLING_KERNEL
        return self._taps.of(self.weight, lambda w: [mx.contiguous(w[:, i, j, 0].astype(mx.float32))
                                                     for i in range(k) for j in range(k)])

    def prepare(self) -> list[mx.array]:
        return self.columns()


def is_strided(layer: nn.Module) -> bool:
    return isinstance(layer, StridedDepthwiseConv) or (isinstance(layer, nn.Conv2d) and layer.stride != (1, 1))


class ConvSubsampling(nn.Module):
    """``pre_encode``: ``conv`` mirrors NeMo's MaskedConvSequential, [conv3x3/2, ReLU, (depthwise 3x3/2, 1x1, ReLU)
    x (log2(factor) - 1)], so the convs sit at indices 0, 2, 3, 5, 6; ``out`` maps channels x frequency to d_model.
    Frames past the running length are zeroed before every layer and after the last one (docs/model.md §2.2.1)."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        steps = int(math.log2(cfg.subsampling_factor))
        if 2**steps != cfg.subsampling_factor or steps < 1:
            raise ConfigError(f"encoder subsampling_factor {cfg.subsampling_factor} is not a power of two")
        self.causal = cfg.causal_downsampling
        self.feat_in = cfg.feat_in
        channels = cfg.subsampling_conv_channels
        k, s = SUBSAMPLING_KERNEL, SUBSAMPLING_STRIDE
        conv: list[nn.Module] = [nn.Conv2d(1, channels, k, stride=s), nn.ReLU()]
        for _ in range(steps - 1):
            conv += [StridedDepthwiseConv(channels), nn.Conv2d(channels, channels, 1), nn.ReLU()]
        self.conv = conv
        freq = cfg.feat_in
        for _ in range(steps):
            freq = strided_length(freq, self.causal)
        self.out = Linear(channels * freq, cfg.d_model)

    def image(self, features: mx.array) -> mx.array:
        """Log-mel rows [..., T, F] (float32, docs/model.md §2.1) -> a one-channel image [..., T, F, 1], channels-last,
        in the weights' dtype: the encoder computes in the speech path's dtype (docs/model.md §2.2), and a float32
        input would make every matmul convert its bfloat16 weight, every frame."""
        return features[..., None].astype(self.conv[0].weight.dtype)

    def strided(self, layer: nn.Module, x: mx.array) -> mx.array:
        """A stride-2 3x3 conv over a padded [B, T, F, C], each item's numbers what they are alone on every device
        (docs/batching.md §3). The first one (one input channel) is a product of each item's 3x3 patches with the
        weight, each item's rows their own (``compute.product``): as one conv, OpenBLAS rounds an item's rows by the
        batch. The depthwise ones are :class:`StridedDepthwiseConv`."""
        if isinstance(layer, StridedDepthwiseConv):
            return layer(x)
        taps = strided_taps(x)
        b, t2, f2 = taps[0].shape[:3]
        patches = mx.stack([tap[..., 0] for tap in taps], axis=-1).reshape(b, t2 * f2, len(taps))
        y = compute.product(patches, layer.weight.reshape(layer.weight.shape[0], len(taps)).T)
        return y.reshape(b, t2, f2, -1) + layer.bias

    def unstrided(self, layer: nn.Module, x: mx.array) -> mx.array:
        """A 1x1 conv (or a ReLU) over [B, T, F, C]. The 1x1 conv is a product over channels, each item's rows their
        own (``compute.product``): as one conv, OpenBLAS rounds an item's rows by the batch's row count (a group's
        streams would move each other's frames by ~1e-6, docs/batching.md §3)."""
        if not isinstance(layer, nn.Conv2d):
            return layer(x)
        b, t, f, c = x.shape
        y = compute.product(x.reshape(b, t * f, c), layer.weight.reshape(layer.weight.shape[0], c).T)
        return y.reshape(b, t, f, -1) + layer.bias

    def __call__(self, features: mx.array, lengths: mx.array) -> tuple[mx.array, mx.array]:
        # [B, T, F], [B] -> [B, T', d_model], [B]
        x = self.image(features)
        lengths = lengths.astype(mx.int32)
        left, right = subsampling_padding(self.causal)
        x = zero_past_length(x, lengths)
        for layer in self.conv:
            if is_strided(layer):
                x = self.strided(layer, mx.pad(x, [(0, 0), (left, right), (left, right), (0, 0)]))
                lengths = strided_length(lengths, self.causal)
            else:
                x = self.unstrided(layer, x)
            x = zero_past_length(x, lengths)
        b, t, f, c = x.shape
        x = x.transpose(0, 1, 3, 2).reshape(b, t, c * f)  # channel-major flattening, as NeMo's [B, C, T, F]
        return self.out(x), lengths


# ----------------------------------------------------------------------------------------------------------------
# attention context: which keys each query may see, and the relative positions that reach them
# ----------------------------------------------------------------------------------------------------------------
def context_reach(cfg: EncoderConfig, length: int) -> tuple[int, int]:
    """How far left and right of a query its context can reach: (max i - j, max j - i) over allowed pairs, capped at
    length - 1. chunked_limited [L, R]: chunks of R + 1 frames, L // (R + 1) chunks to the left
    (docs/model.md §2.2.3)."""
    left, right = cfg.att_context_size
    cap = max(length - 1, 0)
    if cfg.att_context_style == "chunked_limited" and right >= 0:
        chunk = right + 1
        left_chunks = left // chunk if left >= 0 else cap
        return min(left_chunks * chunk + chunk - 1, cap), min(chunk - 1, cap)
    return (min(left, cap) if left >= 0 else cap), (min(right, cap) if right >= 0 else cap)


def context_allows(cfg: EncoderConfig, i: mx.array, j: mx.array) -> mx.array:
    """NeMo's attention context rule for query frames ``i`` and key frames ``j`` (broadcast), before padding is
    considered (``ConformerEncoder._create_masks``)."""
    left, right = cfg.att_context_size
    if cfg.att_context_style == "chunked_limited" and right >= 0:
        chunk = right + 1
        diff = i // chunk - j // chunk
        allowed = diff >= 0
        return allowed & (diff <= left // chunk) if left >= 0 else allowed
    allowed = mx.ones(mx.broadcast_shapes(i.shape, j.shape), dtype=mx.bool_)
    if left >= 0:
        allowed = allowed & (i - j <= left)
    if right >= 0:
        allowed = allowed & (j - i <= right)
    return allowed


def relative_positional_encoding(positions: mx.array, d_model: int) -> mx.array:
    """Sinusoids of relative distances: pe[p, 2k] = sin(p w_k), pe[p, 2k + 1] = cos(p w_k), w_k = 10000^(-2k / d),
    computed in float32 like NeMo's table (docs/model.md §2.2.2). [P] -> [P, d_model]."""
    rates = mx.exp(mx.arange(0, d_model, 2, dtype=mx.float32) * -(math.log(POS_EMB_BASE) / d_model))
    angles = positions.astype(mx.float32)[:, None] * rates[None, :]
    return mx.stack([mx.sin(angles), mx.cos(angles)], axis=-1).reshape(positions.shape[0], d_model)


@dataclass(frozen=True)
class AttentionContext:
    """Everything the layers of one forward share: the key band, its positional encodings and the masks.

    The forward computes ``T`` new frames at absolute positions start .. start + T - 1; ``history`` earlier frames'
    keys and values (a stream's cache) come before them. Queries come in blocks of ``block`` frames; block n's
    queries start + n*block + a see keys start + n*block - left + c for c in [0, span), span = block + left + right.
    ``pos_emb`` [left + right + 1, d_model] holds the encodings of the distances i - j = left, left - 1, ..., -right.
    ``allowed`` [B, 1, blocks, block, span] is NeMo's attention mask (context rule AND query and key at or after 0 and
    inside the valid length) in that layout; ``valid`` [B, T, 1] marks new frames inside the length."""

    left: int
    right: int
    block: int
    blocks: int
    history: int
    pos_emb: mx.array
    allowed: mx.array
    valid: mx.array

    @property
    def span(self) -> int:
        return self.block + self.left + self.right


def attention_context(cfg: EncoderConfig, length: int, lengths: mx.array, start=0, history: int = 0,
                      left: Optional[int] = None) -> AttentionContext:
    """The context of ``length`` new frames from absolute position ``start`` (an int, or an array in a compiled stream
    step: a scalar, or [B], each stream's own) with ``history`` cached frames before them; ``lengths`` [B] are the
    valid lengths, absolute. A
    stream passes its fixed ``left`` reach (its cache holds that many frames, zeros before the first, all masked)."""
    if left is None:
        left, right = context_reach(cfg, start + length)
    else:
        right = 0
    block = max(1, min(QUERY_BLOCK, length))
    blocks = -(-length // block)
    span = block + left + right
    first = mx.reshape(mx.array(start), (-1, 1, 1, 1))  # each item's first new frame (one for all, or one per row)
    starts = first + mx.arange(blocks)[:, None, None] * block  # [1 or B, blocks, 1, 1]
    i = starts + mx.arange(block)[None, :, None]  # [1 or B, blocks, block, 1]
    j = starts - left + mx.arange(span)[None, None, :]  # [1 or B, blocks, 1, span]
    lengths = lengths.astype(mx.int32)
    per_item = lengths[:, None, None, None]
    allowed = context_allows(cfg, i, j) & (i < per_item) & (j >= 0) & (j < per_item) & (j < first + length)
    pos_emb = relative_positional_encoding(mx.arange(left, -right - 1, -1), cfg.d_model)
    valid = ((first.reshape(-1, 1) + mx.arange(length)[None, :]) < lengths[:, None])[..., None]
    return AttentionContext(left, right, block, blocks, history, pos_emb, allowed[:, None], valid)


def key_blocks(x: mx.array, ctx: AttentionContext) -> mx.array:
    """The keys (or values) each query block can reach, zeros where nothing was cached or computed; blocks folded
    into the batch. [B, history + T, H, dk] -> [B * n, H, span, dk]"""
    b, length, h, dk = x.shape
    t = length - ctx.history
    left, right = ctx.left - ctx.history, ctx.blocks * ctx.block - t + ctx.right
    if left or right:
        x = mx.pad(x, [(0, 0), (left, right), (0, 0), (0, 0)])
    if ctx.blocks == 1:  # one block reaches every key: no gather, and a view (of a stream's cache: no copy)
        return x.swapaxes(1, 2)
    x = x[:, mx.arange(ctx.blocks)[:, None] * ctx.block + mx.arange(ctx.span)[None, :]]
    return x.reshape(b, ctx.blocks, ctx.span, h, dk).transpose(0, 1, 3, 2, 4).reshape(b * ctx.blocks, h, ctx.span, dk)


def query_blocks(x: mx.array, ctx: AttentionContext) -> mx.array:
    """[B, T, H, dk] -> [B * n, H, block, dk] (the last block zero-padded)."""
    b, t, h, dk = x.shape
    if ctx.blocks * ctx.block > t:
        x = mx.pad(x, [(0, 0), (0, ctx.blocks * ctx.block - t), (0, 0), (0, 0)])
    return x.reshape(b, ctx.blocks, ctx.block, h, dk).transpose(0, 1, 3, 2, 4).reshape(b * ctx.blocks, h, ctx.block, dk)


def skew_to_keys(by_distance: mx.array, span: int) -> mx.array:
    """Place per-query scores indexed by distance slot e (key = query - left + e) at their key column in the block:
    out[..., a, c] = by_distance[..., a, c - a] for 0 <= c - a < width, else 0. It is NeMo's ``rel_shift`` (pad,
    reshape, drop) applied to a band: [..., block, width] -> [..., block, span]."""
    *lead, block, width = by_distance.shape
    if block == 1 and width == span:  # one query: its distance slots are its key columns
        return by_distance
    padded = mx.pad(by_distance, [(0, 0)] * len(lead) + [(0, 0), (0, span + 1 - width)])
    flat = padded.reshape(*lead, block * (span + 1))[..., : block * span]
    return flat.reshape(*lead, block, span)


def relative_attention(q_u: mx.array, q_v: mx.array, k: mx.array, v: mx.array, p: mx.array,
                       ctx: AttentionContext) -> mx.array:
    """softmax(((q + u) k^T + rel_shift((q + v) p^T)) / sqrt(dk)) v with NeMo's masking: masked scores -10000,
    masked probabilities zeroed, so a query outside the length gets exactly 0 (docs/model.md §2.2.3-4). Computed as
    scaled dot-product attention of each query block over its key band, the position scores and the mask as its additive
    bias (e^-10000 is 0 in float32, so the masked probabilities are zero as NeMo makes them).
    q_u, q_v [B, T, H, dk]; k, v [B, history + T, H, dk]; p [H, W, dk] (distances left .. -right, the position keys:
    :meth:`RelPositionMultiHeadAttention.position_keys`) -> [B, T, H * dk]. Both products and the position scores are
    in ``compute.by_transposed`` form, so a stream's steady frame is the same in a group of any size on CUDA too."""
    b, t, h, dk = q_u.shape
    position = compute.by_transposed(query_blocks(q_v, ctx), p)  # [B n, H, block, W]
    allowed = ctx.allowed.reshape(b * ctx.blocks, 1, ctx.block, ctx.span)
    bias = mx.where(allowed, skew_to_keys(position, ctx.span) / math.sqrt(dk), MASKED_SCORE)
    out = compute.biased_attention(query_blocks(q_u, ctx), key_blocks(k, ctx), key_blocks(v, ctx),
                                   1 / math.sqrt(dk), bias.astype(q_u.dtype))
    out = out.reshape(b, ctx.blocks, h, ctx.block, dk).transpose(0, 1, 3, 2, 4).reshape(b, -1, h * dk)[:, :t]
    return mx.where(ctx.valid, out, 0.0)


# ----------------------------------------------------------------------------------------------------------------
# conformer layer
# ----------------------------------------------------------------------------------------------------------------
class RelPositionMultiHeadAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        d, h = cfg.d_model, cfg.n_heads
        self.heads = h
        self.linear_q = Linear(d, d, bias=cfg.use_bias)
        self.linear_k = Linear(d, d, bias=cfg.use_bias)
        self.linear_v = Linear(d, d, bias=cfg.use_bias)
        self.linear_out = Linear(d, d, bias=cfg.use_bias)
        self.linear_pos = Linear(d, d, bias=False)
        self.pos_bias_u = mx.zeros((h, d // h))
        self.pos_bias_v = mx.zeros((h, d // h))
        self._fused = compute.Fused()

    def prepare(self) -> list[mx.array]:
        return self._fused.prepare([self.linear_q, self.linear_k, self.linear_v])

    def split_heads(self, y: mx.array) -> mx.array:
        """[..., D] -> [..., H, D / H]"""
        return y.reshape(*y.shape[:-1], self.heads, y.shape[-1] // self.heads)

    def position_keys(self, pos_emb: mx.array) -> mx.array:
        """``linear_pos`` of the relative-position encodings [W, d] (float32) -> [H, W, dk] in the weights' dtype, the
        rows of the position scores' right operand (``compute.by_transposed``; a stream computes this once)."""
        keys = self.split_heads(self.linear_pos(pos_emb.astype(self.linear_pos.weight.dtype)))
        return mx.contiguous(keys.transpose(1, 0, 2))

    def __call__(self, x: mx.array, ctx: AttentionContext, cache: Optional["LayerCache"] = None) -> mx.array:
        """[B, T, D] -> [B, T, D]. With a stream's ``cache``, its ``ctx.history`` cached keys and values come first
        and the last ones (as many as it holds) replace them."""
        q, k, v = (self.split_heads(y) for y in self._fused.project(x, [self.linear_q, self.linear_k, self.linear_v]))
        if cache is None:
            p = self.position_keys(ctx.pos_emb)
        else:  # the cache is [B, H, left, dk], the layout of the attention's key block: its keys are not copied again
            keep = cache.keys.shape[2]
            k = mx.concatenate([cache.keys, k.swapaxes(1, 2)], axis=2)
            v = mx.concatenate([cache.values, v.swapaxes(1, 2)], axis=2)
            cache.keys, cache.values = k[:, :, k.shape[2] - keep:], v[:, :, v.shape[2] - keep:]
            k, v, p = k.swapaxes(1, 2), v.swapaxes(1, 2), cache.positions
        return self.linear_out(relative_attention(q + self.pos_bias_u, q + self.pos_bias_v, k, v, p, ctx))


class ConformerFeedForward(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        hidden = cfg.d_model * cfg.ff_expansion_factor
        self.linear1 = Linear(cfg.d_model, hidden, bias=cfg.use_bias)
        self.linear2 = Linear(hidden, cfg.d_model, bias=cfg.use_bias)

    def __call__(self, x: mx.array) -> mx.array:
        return self.linear2(nn.silu(self.linear1(x)))


class BatchNorm1d(nn.Module):
    """torch.nn.BatchNorm1d in eval mode: the stored running statistics normalise each channel."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = mx.ones((channels,))
        self.bias = mx.zeros((channels,))
        self.running_mean = mx.zeros((channels,))
        self.running_var = mx.ones((channels,))

    def __call__(self, x: mx.array) -> mx.array:
        return (x - self.running_mean) * mx.rsqrt(self.running_var + NORM_EPS) * self.weight + self.bias


def conv_norm(cfg: EncoderConfig) -> nn.Module:
    """``conv.batch_norm``: a LayerNorm over channels in the release (``conv_norm_type: layer_norm``, the name is
    NeMo's), a real BatchNorm1d in the NeMo harness."""
    if cfg.conv_norm_type == "layer_norm":
        return nn.LayerNorm(cfg.d_model, eps=NORM_EPS)
    if cfg.conv_norm_type == "batch_norm":
        return BatchNorm1d(cfg.d_model)
    raise ConfigError(f"encoder conv_norm_type={cfg.conv_norm_type!r} is not supported")


class ConformerConvolution(nn.Module):
    """pointwise_conv1 (d -> 2d) -> GLU -> padded frames zeroed -> causal depthwise conv (left pad kernel - 1) ->
    norm -> SiLU -> pointwise_conv2 (docs/model.md §2.2.4). Pointwise convs are Linears ([out, in] weights)."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        d = cfg.d_model
        self.kernel_size = cfg.conv_kernel_size
        self.pointwise_conv1 = Linear(d, 2 * d, bias=cfg.use_bias)
        self.depthwise_conv = CausalDepthwiseConv(d, cfg.conv_kernel_size, bias=cfg.use_bias)
        self.batch_norm = conv_norm(cfg)
        self.pointwise_conv2 = Linear(d, d, bias=cfg.use_bias)

    def __call__(self, x: mx.array, valid: mx.array, cache: Optional["LayerCache"] = None) -> mx.array:
        """[B, T, D], valid [B, T, 1] -> [B, T, D]. The depthwise conv's left context is zeros, or a stream's last
        kernel - 1 inputs (``cache.conv``, which the new ones then replace)."""
        x = nn.glu(self.pointwise_conv1(x), axis=-1)
        x = mx.where(valid, x, 0.0)
        if cache is None:
            x = mx.pad(x, [(0, 0), (self.kernel_size - 1, 0), (0, 0)])
        else:
            x = mx.concatenate([cache.conv, x], axis=1)
            cache.conv = x[:, x.shape[1] - (self.kernel_size - 1):]
        return self.pointwise_conv2(nn.silu(self.batch_norm(self.depthwise_conv(x))))


class ConformerLayer(nn.Module):
    """x + FF1/2 -> + MHSA -> + Conv -> + FF2/2 -> LayerNorm (docs/model.md §2.2.4)."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        d = cfg.d_model
        self.norm_feed_forward1 = nn.LayerNorm(d, eps=NORM_EPS)
        self.feed_forward1 = ConformerFeedForward(cfg)
        self.norm_self_att = nn.LayerNorm(d, eps=NORM_EPS)
        self.self_attn = RelPositionMultiHeadAttention(cfg)
        self.norm_conv = nn.LayerNorm(d, eps=NORM_EPS)
        self.conv = ConformerConvolution(cfg)
        self.norm_feed_forward2 = nn.LayerNorm(d, eps=NORM_EPS)
        self.feed_forward2 = ConformerFeedForward(cfg)
        self.norm_out = nn.LayerNorm(d, eps=NORM_EPS)

    def __call__(self, x: mx.array, ctx: AttentionContext, cache: Optional["LayerCache"] = None) -> mx.array:
        # [B, T, D] -> [B, T, D]; a stream passes its layer cache
        x = x + 0.5 * self.feed_forward1(self.norm_feed_forward1(x))
        x = x + self.self_attn(self.norm_self_att(x), ctx, cache)
        x = x + self.conv(self.norm_conv(x), ctx.valid, cache)
        x = x + 0.5 * self.feed_forward2(self.norm_feed_forward2(x))
        return self.norm_out(x)


# ----------------------------------------------------------------------------------------------------------------
# encoder
# ----------------------------------------------------------------------------------------------------------------
def check_supported(cfg: EncoderConfig) -> None:
    if cfg.d_model % cfg.n_heads:
        raise ConfigError(f"encoder d_model {cfg.d_model} is not a multiple of n_heads {cfg.n_heads}")
    if cfg.att_context_style not in ("chunked_limited", "regular"):
        raise ConfigError(f"encoder att_context_style={cfg.att_context_style!r} is not supported")
    if not cfg.untie_biases:
        raise ConfigError("encoder untie_biases=false (shared pos_bias_u/v) is not supported")


class ConformerEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        check_supported(cfg)
        self.cfg = cfg
        self.pre_encode = ConvSubsampling(cfg)
        self.layers = [ConformerLayer(cfg) for _ in range(cfg.n_layers)]
        self._compiled = compute.CompiledFunctions()

    def __call__(self, features: mx.array, lengths: mx.array) -> tuple[mx.array, mx.array]:
        # [B, T, F], [B] -> [B, T', D], [B]
        x, lengths = self.pre_encode(features, lengths)
        return self.layer_outputs(x, lengths)[-1], lengths

    def scale_input(self, x: mx.array) -> mx.array:
        """NeMo's ``pos_enc`` scales the subsampled input by sqrt(d_model) with xscaling on (docs/model.md §2.2.2)."""
        return x * math.sqrt(self.cfg.d_model) if self.cfg.xscaling else x

    def context(self, length: int, lengths: mx.array) -> AttentionContext:
        return attention_context(self.cfg, length, lengths)

    def stream_reach(self) -> int:
        """Frames of keys a query can reach back (70 in the release): what a stream's caches hold."""
        return context_reach(self.cfg, 1 << 30)[0]

    def stream_state(self, dtype: mx.Dtype, streams: int = 1) -> list[mx.array]:
        """New streams' caches, per layer [keys, values, conv inputs]: all zeros (masked, as NeMo's left padding)."""
        cfg = self.cfg
        heads = cfg.n_heads
        kv = mx.zeros((streams, heads, self.stream_reach(), cfg.d_model // heads), dtype)
        conv = mx.zeros((streams, cfg.conv_kernel_size - 1, cfg.d_model), dtype)
        return [a for _ in self.layers for a in (kv, kv, conv)]

    def stream_positions(self) -> list[mx.array]:
        """Each layer's position keys for a stream's reach: constants of the model, computed once."""
        if not hasattr(self, "_positions"):
            left = self.stream_reach()
            pos_emb = relative_positional_encoding(mx.arange(left, -1, -1), self.cfg.d_model)
            self._positions = Constants([layer.self_attn.position_keys(pos_emb) for layer in self.layers])
        return self._positions.arrays

    def stream_layers(self, x: mx.array, start: mx.array, valid: mx.array, *state: mx.array) -> tuple:
        """The conformer layers over B streams' new frames x [B, T, D] from absolute position ``start`` (a scalar,
        or [B]: each stream's own; valid lengths ``valid`` [B]) with their caches ``state`` -> (out [B, T, D], the
        new caches)."""
        left = self.stream_reach()
        ctx = attention_context(self.cfg, x.shape[1], valid, start=start, history=left, left=left)
        x = self.scale_input(x)
        out = []
        for n, (layer, positions) in enumerate(zip(self.layers, self.stream_positions())):
            cache = LayerCache(*state[3 * n:3 * n + 3], positions)
            x = layer(x, ctx, cache)
            out += [cache.keys, cache.values, cache.conv]
        return (x, *out)

    def compiled_stream_layers(self):
        """:meth:`stream_layers` for one new frame, compiled where that pays (fixed shapes)."""
        mx.eval(self.stream_positions())
        return self._compiled.get("stream", self.stream_layers)

    def layer_outputs(self, x: mx.array, lengths: mx.array) -> list[mx.array]:
        """Output of every conformer layer for the ``pre_encode`` output ``x`` [B, T', D]."""
        ctx = self.context(x.shape[1], lengths)
        x = self.scale_input(x)
        outputs = []
        for layer in self.layers:
            x = layer(x, ctx)
            outputs.append(x)
        return outputs


# ----------------------------------------------------------------------------------------------------------------
# streaming: the same layers over frames that arrive in pieces (causal configurations only)
# ----------------------------------------------------------------------------------------------------------------
class Constants:
    """Arrays a model derives once and keeps outside its parameter tree (a plain holder: modules store arrays in
    attributes as parameters)."""

    def __init__(self, arrays: list[mx.array]):
        self.arrays = arrays


def check_streamable(cfg: EncoderConfig) -> None:
    """A stream needs every frame to depend on earlier input only: causal subsampling and no right attention
    context (the release: ``causal_downsampling``, chunked_limited [70, 0], causal convs; docs/model.md §2.2)."""
    if not cfg.causal_downsampling or context_reach(cfg, 1 << 30)[1] != 0:
        raise ConfigError("this checkpoint's speech encoder looks ahead (non-causal subsampling or right attention "
                          "context), so it cannot listen frame by frame")


def zero_rows_from(x: mx.array, start: int, length: Optional[int]) -> mx.array:
    """Rows (axis 1) whose absolute index start + r is at or past ``length`` set to 0; None = no end known yet."""
    if length is None or start + x.shape[1] <= length:
        return x
    inside = (start + mx.arange(x.shape[1])) < length
    return mx.where(inside.reshape((1, -1) + (1,) * (x.ndim - 2)), x, 0.0)


class SubsamplingStream:
    """``pre_encode`` over mel rows that arrive in pieces. Each stride-2 conv keeps the input rows its next output
    still needs (first its causal left padding of zeros); ``push(..., end=L)`` adds the right padding and NeMo's
    zeroing of rows at and past each layer's valid length (docs/model.md §2.2.1): pieces give the whole's rows."""

    def __init__(self, sub: ConvSubsampling):
        self.sub = sub
        self.left, self.right = subsampling_padding(sub.causal)
        self.carries: list = [None] * sum(1 for layer in sub.conv if is_strided(layer))  # rows not yet consumed
        self.emitted = [0] * len(self.carries)  # output rows so far, per strided layer
        self.rows = 0  # mel rows so far

    def push(self, mel: mx.array, end: Optional[int] = None) -> mx.array:
        """mel rows [n, F]; ``end``: the valid mel length once the input has ended -> encoder-input frames [1, m, D]."""
        x, self.carries, counts = self.rows_of(mel[None], self.carries, final=end is not None,
                                               starts=(self.rows, *self.emitted), end=end)
        self.rows += mel.shape[0]
        self.emitted = [e + c for e, c in zip(self.emitted, counts)]
        return x

    def advance(self, rows: int) -> None:
        """A steady frame's rows go through :meth:`rows_of` elsewhere (a group's tick, with its carries): count them
        (each stride-2 layer with its one carried row halves them)."""
        self.rows += rows
        for n in range(len(self.emitted)):
            rows //= SUBSAMPLING_STRIDE
            self.emitted[n] += rows

    def carry_shapes(self) -> list[tuple[int, ...]]:
        """Each strided layer's carry per stream once past its first mel row: [1, F, C], the one input row its next
        output shares with its last (the rows come as 1 + a multiple of the factor: ``MelStream.take``)."""
        shapes, freq, channels = [], self.sub.feat_in, 1
        for layer in self.sub.conv:
            if is_strided(layer):
                shapes.append((1, freq, channels))
                freq, channels = strided_length(freq, self.sub.causal), layer.weight.shape[0]
        return shapes

    def rows_of(self, mel: mx.array, carries: list, final: bool = False, starts=None,
                end: Optional[int] = None) -> tuple[mx.array, list, list]:
        """The conv stack over new mel rows [B, n, F] of B streams given the strided layers' ``carries`` (None: the
        left padding), pure: -> (encoder-input frames [B, m, D], new carries, output rows per strided layer). With
        ``final`` the right padding comes in, and rows from ``starts`` (absolute index of the first row into each
        layer) at or past their valid length (from ``end``) are zeroed."""
        x, length = self.sub.image(mel), end
        start = starts[0] if starts else 0
        x = zero_rows_from(x, start, length)
        new_carries, counts, n = [], [], 0
        for layer in self.sub.conv:
            if is_strided(layer):
                x, held = self._strided(layer, carries[n], x, final)
                new_carries.append(held)
                counts.append(x.shape[1])
                n += 1
                start = starts[n] if starts else 0
                length = None if length is None else strided_length(length, self.sub.causal)
            elif x.shape[1]:
                x = self.sub.unstrided(layer, x)
            x = zero_rows_from(x, start, length)
        b, t, f, c = x.shape
        return self.sub.out(x.transpose(0, 1, 3, 2).reshape(b, t, c * f)), new_carries, counts

    def _strided(self, layer: nn.Module, held: Optional[mx.array], x: mx.array,
                 final: bool) -> tuple[mx.array, mx.array]:
        """New input rows -> (the output rows they complete, the input rows still needed)."""
        k, s = SUBSAMPLING_KERNEL, SUBSAMPLING_STRIDE
        if held is None:
            held = mx.zeros((x.shape[0], self.left, *x.shape[2:]), x.dtype)
        rows = mx.concatenate([held, x.astype(held.dtype)], axis=1)
        if final:
            rows = mx.concatenate([rows, mx.zeros((1, self.right, *rows.shape[2:]), rows.dtype)], axis=1)
        count = (rows.shape[1] - k) // s + 1 if rows.shape[1] >= k else 0
        held = rows[:, count * s:]
        if count == 0:
            width = strided_length(rows.shape[2], self.sub.causal)
            return mx.zeros((1, 0, width, layer.weight.shape[0]), rows.dtype), held
        used = rows[:, :(count - 1) * s + k]
        return self.sub.strided(layer, mx.pad(used, [(0, 0), (0, 0), (self.left, self.right), (0, 0)])), held


@dataclass
class LayerCache:
    """One conformer layer's memory in a stream: the keys and values of the last ``left`` frames [1, H, left, dk]
    (zeros before the first frame, masked), the last kernel - 1 inputs of the depthwise conv (zeros at first), and the
    layer's position keys for the stream's reach."""

    keys: mx.array
    values: mx.array
    conv: mx.array
    positions: mx.array


class EncoderStream:
    """The encoder over mel rows that arrive in pieces: frame k comes out once mel column 8k is in. Pushing the
    pieces of a recording, the last one with its end, gives the frames :meth:`ConformerEncoder.__call__` gives for
    the whole (same math; float rounding differs with the batch shapes). One new frame at a time runs as one
    compiled function of fixed shapes (the caches always hold ``left`` frames)."""

    def __init__(self, encoder: ConformerEncoder):
        check_streamable(encoder.cfg)
        self.encoder = encoder
        self.subsampling = SubsamplingStream(encoder.pre_encode)
        self.state: Optional[list[mx.array]] = None  # per layer: keys, values, conv inputs
        self.frames = 0  # encoder frames so far
        self.valid: Optional[int] = None  # valid encoder frames, once the input has ended

    def push(self, mel: mx.array, end: Optional[int] = None) -> mx.array:
        """mel rows [n, F] (``end``: the valid mel length, with the last rows of the input) -> new frames [m, D]."""
        cfg = self.encoder.cfg
        if mel.shape[0] == 0 and end is None:
            return mx.zeros((0, cfg.d_model))
        x = self.subsampling.push(mel, end)
        if end is not None:
            self.valid = subsampled_length(end, cfg.subsampling_factor, cfg.causal_downsampling)
        count = x.shape[1]
        if count == 0:
            return x[0]
        if self.state is None:
            self.state = self.encoder.stream_state(x.dtype)
        valid = self.frames + count if self.valid is None else self.valid
        layers = self.encoder.stream_layers if count > 1 else self.encoder.compiled_stream_layers()
        x, *self.state = layers(x, mx.array(self.frames), mx.array([valid]), *self.state)
        self.frames += count
        return x[0]

    def advance(self, mel_rows: int) -> None:
        """A steady frame (``mel_rows`` new rows, one new frame) computed elsewhere, with the caches held there (a
        group's tick, :class:`voicechat.stt.perception.PerceptionRows`): count it."""
        self.subsampling.advance(mel_rows)
        self.frames += 1

    def arrays(self) -> list[mx.array]:
        """The stream's state: the strided layers' carries, then each layer's caches."""
        return [*self.subsampling.carries, *self.state]

    def load(self, arrays: Optional[list[mx.array]]) -> None:
        """Take the state :meth:`arrays` gave (from where it is held between pushes); None: hold none."""
        n = len(self.subsampling.carries)
        self.subsampling.carries, self.state = (list(arrays[:n]), list(arrays[n:])) if arrays else ([None] * n, None)
