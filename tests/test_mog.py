"""MoG head sampling math (docs/model.md §2.5.7): HF top-p / top-k semantics, Gumbel-max, low-rank component mean."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mlx.core as mx

from voicechat.config import MoGConfig
from voicechat.tts.mog import KeyNoise, MoGHead, choose_component, gumbel_from_uniform, top_k_filter, top_p_filter


def kept(filtered: mx.array) -> list[bool]:
    return np.isfinite(np.array(filtered)).tolist()


LOGITS = mx.log(mx.array([0.3, 0.05, 0.5, 0.15]))  # ascending: 0.05, 0.15, 0.3, 0.5 -> cumsum .05 .2 .5 1


@pytest.mark.parametrize("p, expected", [
    (0.75, [True, False, True, False]),  # drop cumsum <= 0.25: 0.05, 0.15
    (0.4, [False, False, True, False]),  # drop cumsum <= 0.6: all but the 0.5
    (0.9, [True, False, True, True]),  # drop cumsum <= 0.1: only 0.05
    (1.0, [True, True, True, True]),
    (0.0, [False, False, True, False]),  # everything is below 1 - 0: the largest is kept anyway
])
def test_top_p_hand_cases(p, expected):
    assert kept(top_p_filter(LOGITS, p)) == expected


def test_top_p_keeps_the_largest_logit_of_a_peaked_distribution():
    logits = mx.array([[0.0, 50.0, 1.0], [3.0, 2.0, 1.0]])
    out = np.array(top_p_filter(logits, 1e-6))
    assert np.isfinite(out).tolist() == [[False, True, False], [True, False, False]]
    assert out[0, 1] == 50.0 and out[1, 0] == 3.0  # kept values are unchanged


def test_top_k():
    assert kept(top_k_filter(LOGITS, 1)) == [False, False, True, False]
    assert kept(top_k_filter(LOGITS, 2)) == [True, False, True, False]
    assert kept(top_k_filter(LOGITS, 10)) == [True, True, True, True]
    assert kept(top_k_filter(mx.array([1.0, 2.0, 2.0, 0.0]), 1)) == [False, True, True, False]  # ties kept


def test_gumbel_transform():
    u = mx.array([0.5, 0.0])
    g = np.array(gumbel_from_uniform(u))
    assert g[0] == pytest.approx(-math.log(-math.log(0.5 + 1e-8) + 1e-8), rel=1e-6)
    assert g[1] == pytest.approx(-math.log(-math.log(1e-8) + 1e-8), rel=1e-6)  # finite at u = 0


def test_choose_component_never_picks_a_filtered_entry():
    logits = mx.array([[0.0, 5.0, 1.0, 4.0]])
    noise = mx.array([[0.0, 0.0, 100.0, 0.0]])
    assert choose_component(logits, noise, top_p=None, top_k=None).item() == 2
    assert choose_component(logits, noise, top_p=None, top_k=2).item() == 1
    assert choose_component(logits, mx.array([[0.0, 0.0, 0.0, 1.5]]), top_p=None, top_k=2).item() == 3


def test_component_mean_gathers_the_full_projection():
    cfg = MoGConfig(intermediate_size=32, num_layers=1, low_rank=4, num_predictions=8)
    head = MoGHead(cfg, hidden_size=16, out_size=8)
    head.low_mat = mx.random.normal(head.low_mat.shape, key=mx.random.key(1))
    x = mx.random.normal((3, 16), key=mx.random.key(2))
    component = mx.array([5, 0, 7])
    full = np.array(head.proj_mus(x)).reshape(3, 8, 4)  # every component's low-rank mean
    low_mat = np.array(head.low_mat)
    expected = np.stack([low_mat[c] @ full[b, c] for b, c in enumerate([5, 0, 7])])
    assert np.abs(np.array(head.component_mean(x, component)) - expected).max() < 1e-5


def test_key_noise_is_reproducible_and_advances():
    a, b = KeyNoise(4), KeyNoise(4)
    g, z = a.frame(5, 8, 4)
    assert g.shape == (5, 1, 8) and z.shape == (5, 1, 4)
    g2, z2 = b.frame(5, 8, 4)
    assert np.array_equal(np.array(g), np.array(g2)) and np.array_equal(np.array(z), np.array(z2))
    assert not np.array_equal(np.array(g), np.array(a.frame(5, 8, 4)[0]))  # the key advances per frame
    assert np.all(np.isfinite(np.array(g)))
