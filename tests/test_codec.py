"""Audio codec (docs/model.md §2.6): NeMo parity on the recorded codec calls, streaming, loading, pieces by hand."""

import math

import numpy as np
import pytest

import mlx.core as mx
from mlx.utils import tree_flatten

from conftest import NEMO
from voicechat.checkpoint import UNUSED_KEYS, fit_layout, load_config, load_into, read_weights
from voicechat.config import CodecConfig
from voicechat.codec.rvqvae import (AudioCodec, StridedConv1d, StridedConvTranspose1d,
                                 bounded_magnitude, head_spectrum, periodic_hann, overlap_add, pad_to_multiple,
                                 stft_channels, windowed_frames)

pytestmark = pytest.mark.nemo  # checked against NVIDIA's NeMo on its tiny checkpoints (tests/fixtures/nemo)

PREFIX = "tts_model.audio_codec."
RUNS = {"greedy": "tiny_model", "greedy_aria": "tiny_model_aria", "v2_greedy_aria": "tiny_v2_aria"}
_codecs = {}


def codec_for(model: str) -> AudioCodec:
    if model not in _codecs:
        codec = AudioCodec(load_config(NEMO / model).codec)
        load_into(codec, read_weights(NEMO / model), prefix=PREFIX)
        _codecs[model] = codec
    return _codecs[model]


def reference(run: str):
    return np.load(NEMO / run / "reference.npz")


# ----------------------------------------------------------------------------------------------------------------
# NeMo parity (teacher-forced on the recorded codec inputs)
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("run", RUNS)
def test_encode_matches_nemo(run):
    ref = reference(run)
    codes = codec_for(RUNS[run]).encode(ref["codec.encode_in_wav.0"][:, 0])
    assert isinstance(codes, np.ndarray)
    np.testing.assert_array_equal(codes, ref["codec.encode_out_codes.0"])


@pytest.mark.parametrize("run", RUNS)
def test_decode_matches_nemo(run):
    ref = reference(run)
    wave = codec_for(RUNS[run]).decode(ref["codec.decode_in_codes.0"])
    expected = ref["codec.decode_out_wav.0"][:, 0]
    assert wave.shape == expected.shape and wave.dtype == np.float32
    assert np.abs(wave - expected).max() <= 1e-4


@pytest.mark.parametrize("run", RUNS)
def test_silence_frame_is_nemos(run):
    silence = codec_for(RUNS[run]).silence_codes()
    np.testing.assert_array_equal(np.array(silence), reference(run)["tts.codec_silence_tokens"])


def test_mx_in_mx_out():
    codec = codec_for("tiny_model")
    ref = reference("greedy")
    codes = codec.encode(mx.array(ref["codec.encode_in_wav.0"][:, 0]))
    assert isinstance(codes, mx.array) and codes.dtype == mx.int32
    wave = codec.decode(codes)
    assert isinstance(wave, mx.array) and wave.shape == (1, 38 * 1764)


def test_batch_rows_are_independent():
    codec = codec_for("tiny_model")
    ref = reference("greedy")
    wave = ref["codec.encode_in_wav.0"][:, 0]
    codes = codec.encode(np.concatenate([wave, np.zeros_like(wave)]))
    np.testing.assert_array_equal(codes[:1], ref["codec.encode_out_codes.0"])
    np.testing.assert_array_equal(codes[1:], reference("greedy_aria")["codec.encode_out_codes.0"])  # zeros there
    decode_in = ref["codec.decode_in_codes.0"]
    waves = codec.decode(np.concatenate([decode_in, decode_in[:, ::-1]]))
    assert np.abs(waves[:1] - ref["codec.decode_out_wav.0"][:, 0]).max() <= 1e-4
    assert np.abs(waves[1:] - codec.decode(decode_in[:, ::-1])).max() <= 1e-5


# ----------------------------------------------------------------------------------------------------------------
# streaming
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("run", ["greedy", "v2_greedy_aria"])
@pytest.mark.parametrize("step", [1, 2, 7])
def test_streaming_equals_full_decode(run, step):
    codec = codec_for(RUNS[run])
    codes = reference(run)["codec.decode_in_codes.0"]
    full = codec.decode(codes)
    stream = codec.stream()
    pieces = [stream.push(codes[:, i:i + step]) for i in range(0, codes.shape[1], step)]
    tail = stream.flush()
    # the output runs 6 samples behind: the first push owes the start crop, the flush gives the end
    assert [p.shape[1] for p in pieces[:2]] == [step * 1764 - 6, step * 1764]
    assert tail.shape == (1, 6)
    joined = np.concatenate(pieces + [tail], axis=1)
    assert joined.shape == full.shape
    # one decoder pass per code frame makes the result independent of the grouping: exact, not only within 1e-5
    np.testing.assert_array_equal(joined, full)


def test_stream_edge_cases():
    codec = codec_for("tiny_model")
    stream = codec.stream()
    assert stream.push(np.zeros((1, 0, 31), np.int64)).shape == (1, 0)
    assert stream.flush().shape == (1, 0)
    with pytest.raises(ValueError, match="flushed"):
        stream.push(np.zeros((1, 1, 31), np.int64))


# ----------------------------------------------------------------------------------------------------------------
# input checks
# ----------------------------------------------------------------------------------------------------------------
def test_encode_refuses_partial_frames_and_pad_to_multiple_fixes_it():
    codec = codec_for("tiny_model")
    wave = np.zeros((1, 1764 + 5), np.float32)
    with pytest.raises(ValueError, match="multiple of 1764"):
        codec.encode(wave)
    padded = pad_to_multiple(wave, 1764)
    assert padded.shape == (1, 2 * 1764) and not padded.any()
    assert codec.encode(padded).shape == (1, 2, 31)


def test_decode_refuses_control_codes():
    codec = codec_for("tiny_model")
    codes = np.zeros((1, 2, 31), np.int64)
    codes[0, 1, 3] = 64  # the tiny codebook has 64 entries: 64 is the speech PAD control code
    with pytest.raises(ValueError, match="control codes"):
        codec.decode(codes)


# ----------------------------------------------------------------------------------------------------------------
# structure and loading
# ----------------------------------------------------------------------------------------------------------------
def test_release_geometry_matches_spec():
    """docs/model.md §2.6: 13 encoder and 13 decoder modules, 214 tensors, the listed shapes (in our layouts)."""
    codec = AudioCodec(CodecConfig())
    shapes = {k: tuple(v.shape) for k, v in tree_flatten(codec.parameters())}
    assert len(codec.encoder.layers) == 13 and len(codec.decoder.layers) == 13
    assert len(shapes) + 31 == 214  # + the 31 PRVQ variances the loader skips
    assert shapes["encoder.layers.0.weight"] == (384, 18)
    assert shapes["encoder.layers.4.weight"] == (768, 7, 384)
    assert shapes["encoder.layers.12.weight"] == (512, 9, 1536)
    assert shapes["encoder.layers.9.dwconv.weight"] == (1536, 7, 1)
    assert shapes["encoder.layers.9.pwconv1.weight"] == (6144, 1536)
    assert shapes["decoder.layers.0.weight"] == (512, 9, 1536)
    assert shapes["decoder.layers.4.weight"] == (1536, 7, 768)
    assert shapes["decoder.layers.8.weight"] == (768, 7, 384)
    assert shapes["decoder.layers.11.pwconv2.weight"] == (384, 1536)
    assert shapes["decoder.layers.12.weight"] == (18, 384)
    assert shapes["prvq.mus_list.30"] == (1024, 512)


@pytest.mark.parametrize("model", ["tiny_model", "tiny_v2_aria"])
def test_layout_fitting_is_shape_gated_and_idempotent(model):
    weights = read_weights(NEMO / model)
    expected = dict(tree_flatten(AudioCodec(load_config(NEMO / model).codec).parameters()))
    codec_keys = [k for k in weights if k.startswith(PREFIX) and not UNUSED_KEYS.search(k)]
    assert len(codec_keys) == len(expected)
    for key in codec_keys:
        torch_w, want = weights[key], expected[key[len(PREFIX):]].shape
        fitted = fit_layout(key, torch_w, want)
        if torch_w.ndim == 3 and torch_w.shape[-1] == 1 and len(want) == 2:  # pointwise conv -> Linear
            np.testing.assert_array_equal(np.array(fitted), np.array(torch_w)[..., 0])
        elif torch_w.ndim == 3:  # Conv1d [out, in, k] / ConvTranspose1d [in, out, k]: last two axes swapped
            np.testing.assert_array_equal(np.array(fitted), np.array(torch_w).swapaxes(1, 2))
        else:
            assert fitted is torch_w
        assert fit_layout(key, fitted, want) is fitted


# ----------------------------------------------------------------------------------------------------------------
# layers against direct references on random data (torch layouts in, through the loader's fitting)
# ----------------------------------------------------------------------------------------------------------------
def test_transposed_conv_as_matmul():
    rng = np.random.default_rng(0)
    c_in, c_out, k, t = 5, 3, 4, 6
    w = rng.normal(size=(c_in, c_out, k)).astype(np.float32)  # torch ConvTranspose1d
    x = rng.normal(size=(2, c_in, t)).astype(np.float32)  # torch [B, C, T]
    expected = np.zeros((2, c_out, t * k), np.float32)  # y[o, t*k + j] = sum_i x[i, t] w[i, o, j]
    for ti in range(t):
        for j in range(k):
            expected[:, :, ti * k + j] = x[:, :, ti] @ w[:, :, j]
    layer = StridedConvTranspose1d(c_in, c_out, k)
    layer.weight = fit_layout("w", mx.array(w), layer.weight.shape)
    got = np.array(layer(mx.array(x.transpose(0, 2, 1))))
    np.testing.assert_allclose(got, expected.transpose(0, 2, 1), atol=1e-5)


def test_strided_conv_as_matmul():
    rng = np.random.default_rng(1)
    c_in, c_out, k, t = 4, 6, 3, 5
    w = rng.normal(size=(c_out, c_in, k)).astype(np.float32)  # torch Conv1d
    x = rng.normal(size=(2, c_in, t * k)).astype(np.float32)
    expected = np.stack([np.einsum("oij,bij->bo", w, x[:, :, ti * k:(ti + 1) * k]) for ti in range(t)], axis=-1)
    layer = StridedConv1d(c_in, c_out, k)
    layer.weight = fit_layout("w", mx.array(w), layer.weight.shape)
    got = np.array(layer(mx.array(x.transpose(0, 2, 1))))
    np.testing.assert_allclose(got, expected.transpose(0, 2, 1), atol=1e-5)


def test_prvq_greedy_residual_hand_case():
    cfg = CodecConfig(latent_size=2, codebook_size=3, num_quantizers=2)
    codec = AudioCodec(cfg)
    codec.prvq.mus_list = [mx.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]),
                           mx.array([[0.5, 0.0], [0.0, 0.5], [0.0, -0.5]])]
    z = mx.array([[[0.9, 0.6], [-1.2, -0.4]]])  # [B=1, T=2, 2]
    # frame 0: nearest of (1,0); residual (-0.1, 0.6) -> (0, 0.5). frame 1: (-1,0); residual (-0.2,-0.4) -> (0,-0.5)
    codes = codec.prvq.encode(z)
    np.testing.assert_array_equal(np.array(codes), [[[0, 1], [2, 2]]])
    np.testing.assert_allclose(np.array(codec.prvq.decode(codes)), [[[1.0, 0.5], [-1.0, -0.5]]])


# ----------------------------------------------------------------------------------------------------------------
# signal processing, hand-computed
# ----------------------------------------------------------------------------------------------------------------
def test_window_and_envelope():
    w = np.array(periodic_hann(16))
    assert w[0] == 0 and w[8] == 1 and abs(w[4] - 0.5) < 1e-7  # periodic: zero only at n = 0
    envelope = np.array(overlap_add(mx.broadcast_to(mx.array(w**2), (1, 10, 16)), 4))[0]  # 4*9 + 16 = 52 samples
    assert envelope.shape == (52,)
    np.testing.assert_allclose(envelope[12:40], 1.5, atol=1e-6)  # sum of Hann^2 at hop n/4 = 3/8 * 16/4
    # first sample kept after the 6-sample crop (frames 0, 1): w[6]^2 + w[2]^2 = (1/2 + sqrt2/4)^2 + (1/2 - sqrt2/4)^2
    assert abs(envelope[6] - 0.75) < 1e-6
    # last one kept (frames 8, 9): w[13]^2 + w[9]^2, w[n] = 1/2 - cos(pi n / 8) / 2
    last = sum((0.5 - 0.5 * math.cos(math.pi * n / 8)) ** 2 for n in (13, 9))
    assert abs(envelope[45] - last) < 1e-6


def test_overlap_add_in_pieces_is_exact():
    frames = mx.random.normal((2, 9, 16), key=mx.random.key(3))
    whole = overlap_add(frames, 4)
    first = overlap_add(frames[:, :4], 4)
    second = overlap_add(frames[:, 4:], 4, carry=first[:, 16:])
    np.testing.assert_array_equal(np.array(mx.concatenate([first[:, :16], second], axis=1)), np.array(whole))


def test_bounded_magnitude():
    m = mx.array([0.0, math.log(100.0), -5.0, 30.0])
    got = np.array(bounded_magnitude(m))
    # 100 exp(-softplus(ln100 - m)) = 100 / (1 + 100 e^-m)
    np.testing.assert_allclose(got, [100 / 101, 50.0, 100 / (1 + 100 * math.exp(5)), 100.0], rtol=1e-6)


def test_head_spectrum_dc_and_nyquist_are_real():
    x = np.zeros((1, 1, 18), np.float32)
    x[0, 0, :9] = math.log(2.0)  # magnitude 100 / (1 + 50) for every bin
    x[0, 0, 9:] = 0.7  # phase 0.7 rad everywhere, also at DC and Nyquist
    spec = np.array(head_spectrum(mx.array(x)))[0, 0]
    mag = 100 / 51
    np.testing.assert_allclose(spec.real, mag * math.cos(0.7), rtol=1e-6)
    assert spec.imag[0] == 0 and spec.imag[8] == 0
    np.testing.assert_allclose(spec.imag[1:8], mag * math.sin(0.7), rtol=1e-6)


def test_windowed_frames_clamp_to_window():
    w = np.array(periodic_hann(16))
    big_dc = np.zeros((1, 2, 9), np.complex64)
    big_dc[0, 0, 0] = 160.0  # irfft: the constant 10 in every sample, clamped to +w[n], then times w[n]
    big_dc[0, 1, 0] = -160.0
    frames = np.array(windowed_frames(mx.array(big_dc), 16))[0]
    np.testing.assert_allclose(frames[0], w**2, atol=1e-6)
    np.testing.assert_allclose(frames[1], -(w**2), atol=1e-6)
    small = np.zeros((1, 1, 9), np.complex64)
    small[0, 0, 0] = 1.6  # 0.1 per sample: clamped only where w[n] < 0.1
    np.testing.assert_allclose(np.array(windowed_frames(mx.array(small), 16))[0, 0], np.minimum(0.1, w) * w,
                               atol=1e-7)


def test_stft_channels_against_numpy():
    rng = np.random.default_rng(4)
    wave = rng.normal(size=(2, 64)).astype(np.float32)
    padded = np.pad(wave, [(0, 0), (6, 6)])
    w = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(16) / 16)
    frames = np.stack([padded[:, 4 * t:4 * t + 16] * w for t in range(16)], axis=1)  # 64 / 4 frames
    spec = np.fft.rfft(frames, axis=-1)
    expected = np.concatenate([spec.real, spec.imag], axis=-1)
    np.testing.assert_allclose(np.array(stft_channels(mx.array(wave), 16, 4)), expected, atol=1e-5)
    ones = np.array(stft_channels(mx.ones((1, 32)), 16, 4))[0, 3]  # a frame fully inside: DFT of the window
    np.testing.assert_allclose(ones, [8, -4] + [0] * 16, atol=1e-5)
