"""Nemotron-H (voicechat/llm/nemotron_h.py) against NeMo 3.0.0 (transformers' NemotronH) on the tiny checkpoints,
a sequential numpy Mamba-2 reference, and cache invariants."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pytest

from conftest import NEMO
import mlx.core as mx

from voicechat import cache
from voicechat.checkpoint import load_config, load_into, read_weights
from voicechat.llm import nemotron_h
from voicechat.llm.nemotron_h import NemotronH, segment_sum, step_sizes

pytestmark = pytest.mark.nemo  # checked against NVIDIA's NeMo on its tiny checkpoints (tests/fixtures/nemo)

# (checkpoint, reference run): the default geometry (pattern M-M*-, chunk 16) and variant2 (M-*-M*-, n_groups 4,
# two attention layers, chunk 8); both timelines are 11 prompt + 28 audio positions, so the scan spans chunks.
GEOMETRIES = [("tiny_model", "greedy"), ("tiny_v2_aria", "v2_greedy_aria")]
PARITY = 1e-4


@lru_cache(maxsize=None)
def checkpoint(name: str):
    """(ModelConfig, weights) of a NeMo fixture checkpoint."""
    return load_config(NEMO / name), read_weights(NEMO / name)


@lru_cache(maxsize=None)
def reference(run: str) -> dict:
    with np.load(NEMO / run / "reference.npz") as z:
        return {k: z[k] for k in z.files if k.startswith("stt.")}


def build_llm(name: str) -> NemotronH:
    cfg, weights = checkpoint(name)
    llm = NemotronH(cfg.llm)
    load_into(llm, weights, prefix="stt_model.llm.")
    return llm


def max_err(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def run_in_pieces(llm: NemotronH, x: mx.array, bounds: list[int]) -> mx.array:
    """One cache, one call per piece x[:, bounds[i]:bounds[i+1]] (pieces of length 1 are decode steps)."""
    cache = llm.make_cache()
    outs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        outs.append(llm(x[:, lo:hi], cache))
        mx.eval(outs[-1], cache.state)
    return mx.concatenate(outs, axis=1)


# ----------------------------------------------------------------------------------------------------------------
# teacher-forced parity with NeMo
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,run", GEOMETRIES)
@pytest.mark.parametrize("mode", ["one prefill", "prompt prefill + cached steps"])
def test_teacher_forced_parity(name, run, mode):
    ref = reference(run)
    llm = build_llm(name)
    x = mx.array(ref["stt.input_embeds_final"])  # [1, 39, H]: the fused inputs NeMo fed
    t, p = x.shape[1], ref["stt.prompt_tokens"].shape[1]
    bounds = [0, t] if mode == "one prefill" else [0, p, *range(p + 1, t + 1)]
    hidden = run_in_pieces(llm, x, bounds)
    logits = hidden @ checkpoint(name)[1]["stt_model.lm_head.weight"].T
    assert max_err(hidden, ref["stt.llm_hidden_final"]) < PARITY
    assert max_err(logits, ref["stt.text_logits_final_full"]) < PARITY
    assert max_err(logits, ref["stt.text_logits_step"]) < PARITY


# ----------------------------------------------------------------------------------------------------------------
# cache invariants
# ----------------------------------------------------------------------------------------------------------------
def random_inputs(name: str, length: int, seed: int = 0) -> mx.array:
    cfg, _ = checkpoint(name)
    return mx.array(np.random.default_rng(seed).standard_normal((1, length, cfg.llm.hidden_size)).astype(np.float32))


@pytest.mark.parametrize("name", [g[0] for g in GEOMETRIES])
def test_cached_steps_equal_full_recompute(name, monkeypatch):
    monkeypatch.setattr(cache, "FIRST_CAPACITY", 8)  # the attention buffers grow several times
    llm = build_llm(name)
    length = 3 * llm.layers[0].mixer.chunk_size + 5
    x = random_inputs(name, length)
    full = llm(x)
    assert max_err(run_in_pieces(llm, x, list(range(length + 1))), full) < 1e-5
    # prefills that start from a carried state, of lengths below, at and above the chunk size
    chunk = llm.layers[0].mixer.chunk_size
    assert max_err(run_in_pieces(llm, x, [0, 3, 4, 4 + chunk, 5 + 2 * chunk, length]), full) < 1e-5


def test_final_states_agree_between_prefill_and_steps():
    llm = build_llm("tiny_model")
    x = random_inputs("tiny_model", 37)
    one, steps = llm.make_cache(), llm.make_cache()
    mx.eval(llm(x, one))
    for t in range(x.shape[1]):
        mx.eval(llm(x[:, t:t + 1], steps), steps.state)
    assert len(one.state) == len(steps.state) == 2 * 2 + 2  # 2 Mamba layers (conv, ssm), 1 attention (k, v)
    for a, b in zip(one.state, steps.state):
        assert a.shape == b.shape
        assert max_err(a, b) < 1e-5


def test_several_caches_coexist():
    llm = build_llm("tiny_model")
    xa, xb = random_inputs("tiny_model", 20, seed=1), random_inputs("tiny_model", 20, seed=2)
    solo_a, solo_b = llm(xa), llm(xb)
    ca, cb = llm.make_cache(), llm.make_cache()
    outs_a, outs_b = [llm(xa[:, :6], ca)], [llm(xb[:, :9], cb)]
    for t in range(6, 20):  # interleaved: a step of one session, then of the other
        outs_a.append(llm(xa[:, t:t + 1], ca))
        if t + 3 < 20:
            outs_b.append(llm(xb[:, t + 3:t + 4], cb))
        mx.eval(outs_a[-1], outs_b[-1], ca.state, cb.state)
    assert max_err(mx.concatenate(outs_a, axis=1), solo_a) < 1e-5
    assert max_err(mx.concatenate(outs_b, axis=1), solo_b) < 1e-5


# ----------------------------------------------------------------------------------------------------------------
# Mamba-2 math: hand cases and a sequential numpy reference
# ----------------------------------------------------------------------------------------------------------------
def softplus(v: float) -> float:
    return math.log1p(math.exp(v))


def test_step_sizes_hand_cases():
    dt = mx.array([[-10.0, 0.0, 3.0]])
    bias = mx.array([0.0, 0.0, 0.0])
    got = np.array(step_sizes(dt, bias, 0.001, math.inf))[0]
    assert softplus(-10.0) < 0.001  # the clamp binds for the first head only
    np.testing.assert_allclose(got, [0.001, math.log(2.0), softplus(3.0)], rtol=1e-6)
    got = np.array(step_sizes(dt, mx.array([0.0, 0.0, -3.0]), 0.001, 0.1))[0]
    np.testing.assert_allclose(got, [0.001, 0.1, 0.1], rtol=1e-6)


def test_segment_sum_hand_case():
    got = np.array(segment_sum(mx.array([1.0, 2.0, 3.0])))
    inf = np.inf
    np.testing.assert_array_equal(got, [[0.0, -inf, -inf], [2.0, 0.0, -inf], [5.0, 3.0, 0.0]])


def silu(v):
    return v / (1.0 + np.exp(-v))


def mamba_reference(mixer, x: np.ndarray, low: float, high: float) -> np.ndarray:
    """Sequential float64 Mamba-2 mixer (docs/model.md §2.4) from the module's weights. x [L, hidden] -> [L, hidden]."""
    p = {k: np.array(v, dtype=np.float64) for k, v in
         [("in", mixer.in_proj.weight), ("conv", mixer.conv1d.weight[:, :, 0]), ("conv_b", mixer.conv1d.bias),
          ("dt_bias", mixer.dt_bias), ("A_log", mixer.A_log), ("D", mixer.D), ("norm", mixer.norm.weight),
          ("out", mixer.out_proj.weight)]}
    heads, head_dim, groups, n = mixer.heads, mixer.head_dim, mixer.groups, mixer.state_size
    inner, k = heads * head_dim, p["conv"].shape[1]
    proj = x.astype(np.float64) @ p["in"].T
    z, xbc, dt = proj[:, :inner], proj[:, inner:-heads], proj[:, -heads:]
    padded = np.concatenate([np.zeros((k - 1, xbc.shape[1])), xbc])
    xbc = silu(np.stack([(padded[t:t + k] * p["conv"].T).sum(0) for t in range(len(x))]) + p["conv_b"])
    xs = xbc[:, :inner].reshape(-1, heads, head_dim)
    bmat = np.repeat(xbc[:, inner:inner + groups * n].reshape(-1, groups, n), heads // groups, axis=1)
    cmat = np.repeat(xbc[:, inner + groups * n:].reshape(-1, groups, n), heads // groups, axis=1)
    dt = np.clip(np.log1p(np.exp(dt + p["dt_bias"])), low, high)
    a = -np.exp(p["A_log"])
    h = np.zeros((heads, head_dim, n))
    ys = []
    for t in range(len(x)):
        h = np.exp(dt[t] * a)[:, None, None] * h + (dt[t][:, None] * xs[t])[:, :, None] * bmat[t][:, None, :]
        ys.append(h @ cmat[t][:, :, None])
    y = np.stack(ys)[..., 0] + xs * p["D"][:, None]
    g = (y.reshape(len(x), inner) * silu(z)).reshape(len(x), groups, -1)
    g = (g / np.sqrt((g**2).mean(-1, keepdims=True) + mixer.norm.eps)).reshape(len(x), inner) * p["norm"]
    return g @ p["out"].T


@pytest.mark.parametrize("binding", [True, False])
def test_mamba_mixer_matches_sequential_reference_with_dt_clamp(binding):
    llm = build_llm("tiny_model")
    mixer = llm.layers[0].mixer
    low, high = mixer.dt_low, mixer.dt_high
    assert (low, high) == (0.001, math.inf)  # config_formats.py: time_step_min of the tiny HF config
    length = 2 * mixer.chunk_size + 7
    x = np.random.default_rng(3).standard_normal((length, mixer.in_proj.weight.shape[1])).astype(np.float32)
    # dt_bias -30 puts softplus(dt + dt_bias) far below 0.001 at every position; +2 far above
    mixer.dt_bias = mx.full(mixer.dt_bias.shape, -30.0 if binding else 2.0)
    raw_dt = x.astype(np.float64) @ np.array(mixer.in_proj.weight, dtype=np.float64)[-mixer.heads:].T
    raw = np.log1p(np.exp(raw_dt + np.array(mixer.dt_bias)))
    assert (raw < low).all() if binding else (raw > low).all()

    want = mamba_reference(mixer, x, low, high)
    prefill = mixer(mx.array(x)[None], nemotron_h.MambaCache())[0]
    cache = nemotron_h.MambaCache()
    steps = mx.concatenate([mixer(mx.array(x)[None, t:t + 1], cache)[0] for t in range(length)])
    scale = np.abs(want).max()
    assert max_err(prefill, want) < 1e-5 * scale
    assert max_err(steps, want) < 1e-5 * scale
    unclamped = mamba_reference(mixer, x, 0.0, math.inf)
    if binding:  # the clamp changes the result, so the comparison above would catch a missing clamp
        assert max_err(unclamped, want) > 1e-2 * scale
    else:
        assert max_err(unclamped, want) == 0.0


def test_ssm_step_keeps_the_rows_that_do_not_advance_bit_for_bit():
    """A group's decode step keeps the SSM state of the rows that do not advance inside the update's own expression
    (docs/batching.md §6): those rows' state is the old one bit for bit, the others' the plain step's, even where
    a row's inputs would give inf or nan (a row that does not advance may hold any input)."""
    rng = np.random.default_rng(5)
    bt, g, r, p, n = 4, 2, 3, 5, 7
    x, dt = rng.standard_normal((bt, g, r, p, 1)), rng.random((bt, g, r, 1, 1))
    b, c = rng.standard_normal((bt, g, 1, 1, n)), rng.standard_normal((bt, g, 1, n, 1))
    a, d = -rng.random((g, r, 1, 1)) - 0.1, rng.standard_normal((g, r, 1, 1))
    state = rng.standard_normal((bt, g, r, p, n))
    x[2] = np.inf  # a row that does not advance, with inputs that would poison its state
    args = [mx.array(v.astype(np.float32)) for v in (x, dt, a, b, c, d, state)]
    keep = mx.array([True, False, False, True])
    _, plain = nemotron_h.ssm_step(*args)
    y, kept = nemotron_h.ssm_step(*args, keep=keep)
    for row in range(bt):
        want = plain[row] if bool(keep[row]) else args[-1][row]
        assert np.array_equal(np.array(kept[row]), np.array(want)), row
    assert np.isfinite(np.array(kept)).all()
    assert np.array_equal(np.array(y[0]), np.array(nemotron_h.ssm_step(*args)[0][0]))
