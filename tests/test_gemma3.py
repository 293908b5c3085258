"""Gemma-3 backbone caches: full and rotating (sliding-window) attention against a direct windowed reference."""

from __future__ import annotations

import numpy as np
import pytest

import mlx.core as mx

from voicechat.config import GemmaConfig
from voicechat.cache import KVCache
from voicechat.tts.gemma3 import Gemma3TextModel

HEADS, KV_HEADS, DIM = 4, 2, 8
STEPS = 13


def windowed_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, window: float, scale: float) -> np.ndarray:
    """Reference: query at position p attends to keys p-window+1 .. p (GQA by head repetition). [N, T, D] each."""
    rep = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
    out = np.zeros_like(q)
    for p in range(q.shape[1]):
        lo = int(max(0, p - window + 1))
        s = q[:, p:p + 1] @ k[:, lo:p + 1].transpose(0, 2, 1) * scale
        w = np.exp(s - s.max(-1, keepdims=True))
        out[:, p] = ((w / w.sum(-1, keepdims=True)) @ v[:, lo:p + 1])[:, 0]
    return out


def run_cache(cache, q, k, v, blocks, scale):
    """Feed positions in blocks of the given sizes; attention of each block's queries over what the cache returns."""
    outs, start = [], 0
    for n in blocks:
        keys, values, mask = cache.update_and_fetch(k[:, :, start:start + n], v[:, :, start:start + n])
        outs.append(mx.fast.scaled_dot_product_attention(q[:, :, start:start + n], keys, values, scale=scale,
                                                         mask=mask))
        start += n
    return np.array(mx.concatenate(outs, axis=2))[0]


@pytest.mark.parametrize("blocks", [[1] * STEPS, [3] + [1] * (STEPS - 3), [7] + [1] * (STEPS - 7), [5, 4, 1, 3]])
@pytest.mark.parametrize("window", [4, 6, 100])
def test_rotating_cache_is_windowed_attention(blocks, window):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, HEADS, STEPS, DIM)).astype(np.float32)
    k, v = (rng.standard_normal((1, KV_HEADS, STEPS, DIM)).astype(np.float32) for _ in range(2))
    expected = windowed_attention(q[0], k[0], v[0], window, 0.3)
    got = run_cache(KVCache(window), mx.array(q), mx.array(k), mx.array(v), blocks, 0.3)
    assert np.abs(got - expected).max() < 1e-5
    full = run_cache(KVCache(None), mx.array(q), mx.array(k), mx.array(v), blocks, 0.3)
    if window >= STEPS:  # shorter than the window: identical to full attention
        assert np.abs(got - full).max() < 1e-6
    else:
        assert np.abs(got - full).max() > 1e-3


def test_full_cache_is_causal_attention():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, HEADS, STEPS, DIM)).astype(np.float32)
    k, v = (rng.standard_normal((1, KV_HEADS, STEPS, DIM)).astype(np.float32) for _ in range(2))
    got = run_cache(KVCache(None), mx.array(q), mx.array(k), mx.array(v), [4, 1, 1, 7], 0.3)
    assert np.abs(got - windowed_attention(q[0], k[0], v[0], np.inf, 0.3)).max() < 1e-5


def test_cache_grows_past_its_first_allocation():
    cache = KVCache(300)
    k = mx.ones((1, 1, 1, 2))
    for _ in range(299):
        cache.update_and_fetch(k, k)
    keys, _, _ = cache.update_and_fetch(2 * k, k)
    assert keys.shape[2] == 300 and cache.keys.shape[2] == 300
    keys, _, _ = cache.update_and_fetch(3 * k, k)  # position 300 replaces position 0 in slot 0
    assert keys.shape[2] == 300 and float(keys[0, 0, 0, 0]) == 3.0 and float(keys[0, 0, 299, 0]) == 2.0


@pytest.mark.parametrize("window", [3, 4096])
def test_stepping_equals_one_block(window):
    """Positions continue across calls: a prefill plus single steps equals one forward over the whole sequence."""
    cfg = GemmaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=HEADS,
                      num_key_value_heads=KV_HEADS, head_dim=DIM, sliding_window=window,
                      layer_types=("sliding_attention", "full_attention", "sliding_attention"))
    model = Gemma3TextModel(cfg)
    x = mx.random.normal((2, 9, 32), key=mx.random.key(0))
    whole = model(x, model.make_caches())
    caches = model.make_caches()
    parts = [model(x[:, :4], caches)] + [model(x[:, t:t + 1], caches) for t in range(4, 9)]
    assert caches[0].offset == 9
    assert np.abs(np.array(mx.concatenate(parts, axis=1)) - np.array(whole)).max() < 1e-5
