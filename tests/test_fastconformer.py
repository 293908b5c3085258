"""FastConformer + perception (voicechat/stt/fastconformer.py, perception.py): NeMo 3.0.0 parity per stage
(teacher-forced on NeMo's recorded inputs, and end to end from the waveform), and the attention/mask/length math
against dense references written here from NeMo's code (docs/model.md §2.2)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from conftest import NEMO
import mlx.core as mx
from mlx.utils import tree_flatten, tree_map

from voicechat.checkpoint import load_config, load_into, read_weights
from voicechat.config import EncoderConfig
from voicechat.network import DERIVED_KEYS
from voicechat.stt.fastconformer import (ConformerEncoder, ConvSubsampling, RelPositionMultiHeadAttention,
                                         attention_context, skew_to_keys, subsampled_length)
from voicechat.stt.perception import Perception

pytestmark = pytest.mark.nemo  # checked against NVIDIA's NeMo on its tiny checkpoints (tests/fixtures/nemo)

RUNS = {"greedy": "tiny_model", "v2_greedy_aria": "tiny_v2_aria"}  # 2 layers / 3 layers, 80 / 128 mels
PARITY = 1e-4


def max_err(ours: mx.array, nemo: np.ndarray) -> float:
    assert tuple(ours.shape) == nemo.shape
    return float(np.abs(np.array(ours) - nemo).max())


@pytest.fixture(scope="module", params=sorted(RUNS))
def nemo_run(request):
    model = RUNS[request.param]
    perception = Perception(load_config(NEMO / model).audio)
    load_into(perception, read_weights(NEMO / model), prefix="stt_model.perception.")
    return perception, dict(np.load(NEMO / request.param / "reference.npz"))


# ----------------------------------------------------------------------------------------------------------------
# NeMo parity
# ----------------------------------------------------------------------------------------------------------------
def test_pre_encode_matches_nemo(nemo_run):
    perception, ref = nemo_run
    mel = mx.array(ref["stt.mel_features"].transpose(0, 2, 1))
    out, lengths = perception.encoder.pre_encode(mel, mx.array(ref["stt.mel_lengths"]))
    assert max_err(out, ref["stt.pre_encode_out"]) <= PARITY
    np.testing.assert_array_equal(np.array(lengths), ref["stt.encoder_lengths"])


def test_each_layer_matches_nemo(nemo_run):
    """Layer i run on NeMo's recorded input of layer i (the pre_encode output, scaled by sqrt(d_model) since the
    harness model has xscaling on, for layer 0)."""
    perception, ref = nemo_run
    encoder = perception.encoder
    lengths = mx.array(ref["stt.encoder_lengths"])
    inputs = [encoder.scale_input(mx.array(ref["stt.pre_encode_out"]))]
    inputs += [mx.array(ref[f"stt.encoder_layer{i}_out"]) for i in range(len(encoder.layers) - 1)]
    ctx = encoder.context(inputs[0].shape[1], lengths)
    for i, (layer, x) in enumerate(zip(encoder.layers, inputs)):
        assert max_err(layer(x, ctx), ref[f"stt.encoder_layer{i}_out"]) <= PARITY, f"layer {i}"


def test_encoder_and_proj_match_nemo(nemo_run):
    perception, ref = nemo_run
    mel = mx.array(ref["stt.mel_features"].transpose(0, 2, 1))
    out, lengths = perception.encoder(mel, mx.array(ref["stt.mel_lengths"]))
    assert max_err(out, ref["stt.encoder_out"].transpose(0, 2, 1)) <= PARITY
    np.testing.assert_array_equal(np.array(lengths), ref["stt.encoder_lengths"])
    projected = perception.proj(mx.array(ref["stt.encoder_out"].transpose(0, 2, 1)))
    assert max_err(projected, ref["stt.audio_embeds"]) <= PARITY


def test_end_to_end_from_waveform(nemo_run):
    perception, ref = nemo_run
    audio, samples = mx.array(ref["stt.input_signal"]), mx.array(ref["stt.input_signal_length"])
    projected, lengths, encoded = perception(audio, samples)
    assert max_err(projected, ref["stt.audio_embeds"]) <= PARITY
    assert max_err(encoded, ref["stt.encoder_out"].transpose(0, 2, 1)) <= PARITY
    np.testing.assert_array_equal(np.array(lengths), ref["stt.audio_embeds_lengths"])


def test_tensor_length_exceeds_valid_length(nemo_run):
    """floor(N / 160) = 9 = 1 (mod 8): 10 mel frames -> 3 encoder frames, 2 valid (docs/model.md §1.2 B)."""
    perception, _ = nemo_run
    audio = mx.array(np.random.default_rng(9).uniform(-0.5, 0.5, (1, 9 * 160 + 37)).astype(np.float32))
    projected, lengths, encoded = perception(audio, mx.array([9 * 160 + 37]))
    assert projected.shape[:2] == encoded.shape[:2] == (1, 3)
    assert np.array(lengths).tolist() == [2]
    assert np.all(np.isfinite(np.array(projected)))


def test_loads_without_featurizer_buffers():
    """A checkpoint without the window / filterbank buffers loads (they are derived) and gives NeMo's output."""
    weights = {k: v for k, v in read_weights(NEMO / "tiny_v2_aria").items() if ".featurizer." not in k}
    perception = Perception(load_config(NEMO / "tiny_v2_aria").audio)
    skipped = load_into(perception, weights, prefix="stt_model.perception.", optional=DERIVED_KEYS)
    assert sorted(skipped) == ["stt_model.perception.preprocessor.featurizer.fb",
                               "stt_model.perception.preprocessor.featurizer.window"]
    ref = np.load(NEMO / "v2_greedy_aria" / "reference.npz")
    projected, _, _ = perception(mx.array(ref["stt.input_signal"]), mx.array(ref["stt.input_signal_length"]))
    assert max_err(projected, ref["stt.audio_embeds"]) <= PARITY


# ----------------------------------------------------------------------------------------------------------------
# checkpoint layout of the release configuration (docs/model.md §2.2.4: 26 tensors per layer, 12 in pre_encode)
# ----------------------------------------------------------------------------------------------------------------
def release_like(d_model=64, heads=4, channels=16, mels=128, layers=2, **changes) -> EncoderConfig:
    cfg = EncoderConfig(feat_in=mels, n_layers=layers, d_model=d_model, n_heads=heads, subsampling_factor=8,
                        subsampling_conv_channels=channels, conv_kernel_size=9, conv_norm_type="layer_norm",
                        att_context_size=(70, 0), att_context_style="chunked_limited", xscaling=False, use_bias=False,
                        causal_downsampling=True)
    return replace(cfg, **changes)


def test_release_parameter_names_and_shapes():
    cfg = release_like()
    d, c = cfg.d_model, cfg.subsampling_conv_channels
    got = {k: tuple(v.shape) for k, v in tree_flatten(ConformerEncoder(cfg).parameters())}
    expected = {"pre_encode.conv.0.weight": (c, 3, 3, 1), "pre_encode.out.weight": (d, c * 17),
                "pre_encode.out.bias": (d,)}
    for i in (0, 2, 5):
        expected.update({f"pre_encode.conv.{i}.bias": (c,)})
    for i in (2, 5):
        expected[f"pre_encode.conv.{i}.weight"] = (c, 3, 3, 1)
    for i in (3, 6):
        expected.update({f"pre_encode.conv.{i}.weight": (c, 1, 1, c), f"pre_encode.conv.{i}.bias": (c,)})
    for n in range(cfg.n_layers):
        p = f"layers.{n}."
        for norm in ("norm_feed_forward1", "norm_self_att", "norm_conv", "norm_feed_forward2", "norm_out",
                     "conv.batch_norm"):
            expected.update({p + norm + ".weight": (d,), p + norm + ".bias": (d,)})
        for ff in ("feed_forward1", "feed_forward2"):
            expected.update({p + ff + ".linear1.weight": (4 * d, d), p + ff + ".linear2.weight": (d, 4 * d)})
        for lin in ("q", "k", "v", "out", "pos"):
            expected[p + f"self_attn.linear_{lin}.weight"] = (d, d)
        expected.update({p + "self_attn.pos_bias_u": (cfg.n_heads, d // cfg.n_heads),
                         p + "self_attn.pos_bias_v": (cfg.n_heads, d // cfg.n_heads),
                         p + "conv.pointwise_conv1.weight": (2 * d, d), p + "conv.depthwise_conv.weight": (d, 9, 1),
                         p + "conv.pointwise_conv2.weight": (d, d)})
    assert got == expected
    assert len(got) == 12 + 26 * cfg.n_layers


# ----------------------------------------------------------------------------------------------------------------
# lengths
# ----------------------------------------------------------------------------------------------------------------
def test_subsampled_length_examples():
    assert [subsampled_length(n, 8, causal=True) for n in (1, 2, 8, 9, 10, 100, 128, 215, 216)] == \
        [1, 2, 2, 2, 3, 14, 17, 28, 28]
    assert [subsampled_length(n, 8, causal=False) for n in (1, 2, 8, 9, 100)] == [1, 1, 1, 2, 13]


def test_tensor_is_one_frame_longer_exactly_when_floor_n_over_160_is_1_mod_8():
    """docs/model.md §1.2 B: valid encoder frames g3(floor(N/160)) vs tensor frames g3(1 + floor(N/160))."""
    for frames in range(0, 400):
        extra = subsampled_length(frames + 1, 8, True) - subsampled_length(frames, 8, True)
        assert extra == int(frames % 8 == 1), frames


@pytest.mark.parametrize("causal", [True, False])
def test_subsampling_output_lengths(causal):
    """The conv stack's tensor length and returned lengths follow the formula, for lengths around multiples of 8."""
    cfg = release_like(mels=20, channels=4, d_model=8, heads=2, causal_downsampling=causal)
    sub = ConvSubsampling(cfg)
    for t in range(1, 26):
        lengths = [t, max(t - 1, 1), max(t - 8, 1)]
        out, got = sub(mx.zeros((3, t, 20)), mx.array(lengths))
        assert out.shape[1] == subsampled_length(t, 8, causal)
        assert np.array(got).tolist() == [subsampled_length(n, 8, causal) for n in lengths]


# ----------------------------------------------------------------------------------------------------------------
# attention: dense NeMo-style references
# ----------------------------------------------------------------------------------------------------------------
def nemo_rel_shift(x: np.ndarray) -> np.ndarray:
    """NeMo's rel_shift on [..., T, 2T - 1]: pad a zero column on the left, view as [..., 2T, T], drop the first
    row, view back."""
    *lead, t, p = x.shape
    padded = np.concatenate([np.zeros((*lead, t, 1), x.dtype), x], axis=-1)
    return padded.reshape(*lead, p + 1, t)[..., 1:, :].reshape(*lead, t, p)


def nemo_dense_mask(cfg: EncoderConfig, t: int, lengths: list[int]) -> np.ndarray:
    """``ConformerEncoder._create_masks``: True where attention is allowed. [B, T, T]."""
    left, right = cfg.att_context_size
    allowed = np.ones((t, t), dtype=bool)
    if cfg.att_context_style == "regular":
        if left >= 0:
            allowed = np.triu(allowed, -left)
        if right >= 0:
            allowed = np.tril(allowed, right)
    elif right == -1:
        if left >= 0:
            allowed = np.triu(allowed, -left)
    else:
        chunk = right + 1
        left_chunks = left // chunk if left >= 0 else 10000
        idx = np.arange(t) // chunk
        diff = idx[:, None] - idx[None, :]
        allowed &= (diff <= left_chunks) & (diff >= 0)
    pad = np.arange(t)[None, :] < np.array(lengths)[:, None]
    return allowed[None] & pad[:, None, :] & pad[:, :, None]


def nemo_positions(t: int, d_model: int) -> np.ndarray:
    """NeMo's pos_emb for length t: the sinusoids of positions t-1 ... -(t-1). [2t - 1, d_model]."""
    positions = np.arange(t - 1, -t, -1, dtype=np.float64)[:, None]
    rates = np.exp(np.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe = np.zeros((2 * t - 1, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(positions * rates), np.cos(positions * rates)
    return pe


def nemo_dense_attention(attn: RelPositionMultiHeadAttention, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """RelPositionMultiHeadAttention.forward in float64 with a full T x T score matrix. x [B, T, D]."""
    w = {k: np.array(v, dtype=np.float64) for k, v in tree_flatten(attn.parameters())}
    b, t, d = x.shape
    h = attn.heads
    dk = d // h

    def linear(name, y):
        out = y @ w[f"{name}.weight"].T
        return out + w[f"{name}.bias"] if f"{name}.bias" in w else out

    def heads(y):
        return y.reshape(*y.shape[:-1], h, dk).swapaxes(-2, -3)  # [..., H, T, dk]

    q, k, v = (heads(linear(f"linear_{n}", x)) for n in "qkv")
    p = heads(linear("linear_pos", nemo_positions(t, d)))  # [H, 2T - 1, dk]
    ac = (q + w["pos_bias_u"][:, None]) @ k.swapaxes(-1, -2)
    bd = nemo_rel_shift((q + w["pos_bias_v"][:, None]) @ p.swapaxes(-1, -2))[..., :t]
    scores = np.where(mask[:, None], (ac + bd) / math.sqrt(dk), -10000.0)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs = np.where(mask[:, None], probs / probs.sum(-1, keepdims=True), 0.0)
    out = (probs @ v).swapaxes(1, 2).reshape(b, t, d)
    return linear("linear_out", out)


def random_attention(cfg: EncoderConfig, seed: int) -> RelPositionMultiHeadAttention:
    attn = RelPositionMultiHeadAttention(cfg)
    mx.random.seed(seed)
    attn.update(tree_map(lambda p: 0.15 * mx.random.normal(p.shape), attn.parameters()))
    return attn


def test_rel_shift_is_relative_indexing():
    """rel_shift(x)[i, j] = x[i, (T - 1) - i + j]: score (i, j) uses the encoding of distance i - j."""
    t = 7
    x = np.random.default_rng(0).normal(size=(t, 2 * t - 1))
    shifted = nemo_rel_shift(x)[:, :t]
    assert all(shifted[i, j] == x[i, t - 1 - i + j] for i in range(t) for j in range(t))


def test_skew_to_keys_is_hand_indexing():
    """out[a, c] = band[a, c - a] for 0 <= c - a < W, else 0."""
    block, width, span = 5, 4, 9
    band = np.random.default_rng(1).normal(size=(2, block, width)).astype(np.float32)
    out = np.array(skew_to_keys(mx.array(band), span))
    expected = np.zeros((2, block, span), np.float32)
    for a in range(block):
        for c in range(span):
            if 0 <= c - a < width:
                expected[:, a, c] = band[:, a, c - a]
    np.testing.assert_array_equal(out, expected)


def test_banded_rel_shift_equals_nemo_rel_shift():
    """With an unlimited context the band is the whole row: the skewed band equals NeMo's rel_shift."""
    t = 9
    scores = np.random.default_rng(2).normal(size=(t, 2 * t - 1)).astype(np.float32)  # distances t-1 ... -(t-1)
    skewed = np.array(skew_to_keys(mx.array(scores), t + 2 * (t - 1)))  # keys -(t-1) ... 2t-2 around each block
    np.testing.assert_array_equal(skewed[:, t - 1 : 2 * t - 1], nemo_rel_shift(scores)[:, :t])


CONTEXTS = [("chunked_limited", (70, 0)), ("chunked_limited", (6, 2)), ("chunked_limited", (5, -1)),
            ("regular", (5, 3)), ("regular", (-1, -1))]


@pytest.mark.parametrize("style,context", CONTEXTS)
def test_mask_contents(style, context):
    """The blocked mask holds exactly NeMo's dense mask (context rule and padding), and nothing NeMo allows falls
    outside the band."""
    cfg = release_like(att_context_style=style, att_context_size=context)
    t, lengths = 200, [200, 137]
    ctx = attention_context(cfg, t, mx.array(lengths))
    allowed = np.array(ctx.allowed)[:, 0]  # [B, blocks, block, span]
    dense = np.zeros((2, t, t), dtype=bool)
    for n in range(ctx.blocks):
        for a in range(ctx.block):
            i = n * ctx.block + a
            j = n * ctx.block - ctx.left + np.arange(ctx.span)
            inside = (i < t) & (j >= 0) & (j < t)
            if i < t:
                dense[:, i, j[inside]] = allowed[:, n, a, inside]
            else:
                assert not allowed[:, n, a].any()
            assert not allowed[:, n, a, ~inside].any()
    np.testing.assert_array_equal(dense, nemo_dense_mask(cfg, t, lengths))


def test_chunked_limited_70_0_sees_71_keys():
    cfg = release_like()
    ctx = attention_context(cfg, 200, mx.array([200, 137]))
    assert (ctx.left, ctx.right) == (70, 0) and ctx.span == ctx.block + 70
    keys = np.array(ctx.allowed)[:, 0].sum(-1).reshape(2, -1)[:, :200]
    i = np.arange(200)
    np.testing.assert_array_equal(keys[0], np.minimum(i, 70) + 1)
    np.testing.assert_array_equal(keys[1], np.where(i < 137, np.minimum(i, 70) + 1, 0))


@pytest.mark.parametrize("style,context", CONTEXTS)
def test_banded_attention_equals_dense_masked_attention(style, context):
    """T = 200 > 71 with a padded batch item: our blocked attention equals NeMo's full masked attention, padded query
    rows included (they output linear_out(0) = its bias)."""
    cfg = release_like(att_context_style=style, att_context_size=context, use_bias=True)
    attn = random_attention(cfg, seed=3)
    t, lengths = 200, [200, 137]
    x = np.random.default_rng(4).normal(size=(2, t, cfg.d_model)).astype(np.float32)
    ours = np.array(attn(mx.array(x), attention_context(cfg, t, mx.array(lengths))))
    dense = nemo_dense_attention(attn, x.astype(np.float64), nemo_dense_mask(cfg, t, lengths))
    np.testing.assert_allclose(ours, dense, rtol=0, atol=1e-5)
    bias = np.array(attn.linear_out.bias)
    np.testing.assert_array_equal(ours[1, 137:], np.broadcast_to(bias, (t - 137, cfg.d_model)))


def test_attention_block_size_does_not_matter(monkeypatch):
    import voicechat.stt.fastconformer as fc

    cfg = release_like()
    attn = random_attention(cfg, seed=5)
    x = mx.array(np.random.default_rng(6).normal(size=(1, 150, cfg.d_model)).astype(np.float32))
    lengths = mx.array([141])
    reference = np.array(attn(x, attention_context(cfg, 150, lengths)))
    for block in (1, 7, 71, 512):
        monkeypatch.setattr(fc, "QUERY_BLOCK", block)
        out = np.array(attn(x, attention_context(cfg, 150, lengths)))
        np.testing.assert_allclose(out, reference, rtol=0, atol=2e-6)


# ----------------------------------------------------------------------------------------------------------------
# whole encoder invariants
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["layer_norm", "batch_norm"])
def test_batch_items_are_independent(norm):
    """A padded batch gives each item what it gets alone (the masks in subsampling, attention and the conv module),
    and NeMo's outputs for frames past the length stay finite; T > 71 so the band is narrower than the input."""
    harness_style = norm == "batch_norm"  # the NeMo harness model also has xscaling and biases
    cfg = release_like(conv_norm_type=norm, mels=40, layers=2, xscaling=harness_style, use_bias=harness_style)
    encoder = ConformerEncoder(cfg)
    mx.random.seed(7)
    encoder.update(tree_map(lambda p: p + 0.2 * mx.random.normal(p.shape), encoder.parameters()))
    rng = np.random.default_rng(8)
    long, short = rng.normal(size=(800, 40)), rng.normal(size=(523, 40))
    batch = np.zeros((2, 800, 40), np.float32)
    batch[0], batch[1, :523] = long, short
    out, lengths = encoder(mx.array(batch), mx.array([800, 523]))
    alone_long, _ = encoder(mx.array(long[None].astype(np.float32)), mx.array([800]))
    alone_short, short_len = encoder(mx.array(short[None].astype(np.float32)), mx.array([523]))
    assert np.array(lengths).tolist() == [101, 67] and np.array(short_len).tolist() == [67]
    np.testing.assert_allclose(np.array(out[0]), np.array(alone_long[0]), rtol=0, atol=1e-4)
    np.testing.assert_allclose(np.array(out[1, :67]), np.array(alone_short[0, :67]), rtol=0, atol=1e-4)
    assert np.all(np.isfinite(np.array(out)))
