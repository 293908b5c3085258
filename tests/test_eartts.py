"""EAR-TTS against NeMo 3.0.0 (tiny random checkpoints), teacher-forced on the recorded inputs, float32 CPU."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from conftest import HARNESS_RUNS, HARNESS_TTS, NEMO, ReplayNoise
import mlx.core as mx
from tokenizers import Tokenizer

from voicechat.benchmarks import count_ops
from voicechat.checkpoint import load_config, load_into, read_weights
from voicechat.errors import CheckpointError, ConfigError
from voicechat.network import DERIVED_KEYS
from voicechat.tts.eartts import (Codebook, RVQEARTTSModel, WarmupInputs, depthsum, nearest_code, prompt_samples,
                                  unmasking_schedule, warmup_inputs, warmup_waveform)
from voicechat.tts.mog import KeyNoise

pytestmark = pytest.mark.nemo  # checked against NVIDIA's NeMo on its tiny checkpoints (tests/fixtures/nemo)

TOL = 1e-4
GREEDY = HARNESS_TTS["greedy"]
RUNS = {run: (name, HARNESS_TTS[tts]) for run, (name, tts) in HARNESS_RUNS.items()}  # run -> (checkpoint, settings)


@lru_cache(maxsize=None)
def checkpoint(name: str):
    """(model, weights, config) of a fixture checkpoint."""
    cfg = load_config(NEMO / name)
    vocab = Tokenizer.from_file(str(NEMO / name / "tokenizer.json")).get_vocab(with_added_tokens=True)
    model = RVQEARTTSModel(cfg.tts, len(vocab))
    weights = read_weights(NEMO / name)
    load_into(model, weights, prefix="tts_model.tts_model.")
    model.set_text_vocab(vocab, vocab["<s>"], vocab["</s>"])
    return model, weights, cfg


@lru_cache(maxsize=None)
def reference(run: str):
    return dict(np.load(NEMO / run / "reference.npz"))


def recorded_warmup(ref) -> WarmupInputs:
    return WarmupInputs(ref["tts.init.code"][0], ref["tts.init.audio_mask"][0], ref["tts.init.subword_ids"][0],
                        ref["tts.init.subword_mask"][0])


def speaker_latent(weights):
    return weights.get("tts_model.audio_prompt_latents.Aria")


def max_err(a, b) -> float:
    return float(np.abs(np.array(a) - b).max())


# ----------------------------------------------------------------------------------------------------------------
# parity with NeMo
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("run", sorted(RUNS))
def test_warmup_and_steps_match_nemo(run):
    name, settings = RUNS[run]
    model, weights, _ = checkpoint(name)
    ref = reference(run)
    noise = ReplayNoise(ref) if "tts.noise.gumbel" in ref else KeyNoise(0)
    state, hidden = model.warmup(recorded_warmup(ref), speaker_latent(weights), noise)
    assert max_err(hidden, ref["tts.warmup.hidden_states"]) < TOL
    assert state.position == 37
    for t in range(ref["tts.step.in_code"].shape[1]):
        prev, subword = ref["tts.step.in_code"][0, t, 0], int(ref["tts.step.in_subword_ids"][0, t, 0])
        hidden = model.step_hidden(state, prev, subword)
        codes = model.generate_codes(hidden, state.noise, **settings)
        mx.eval(codes, state.arrays())
        assert max_err(hidden[:, 0], ref["tts.step.hidden_states"][:, t]) < TOL, f"step {t}"
        assert np.array_equal(np.array(codes), ref["tts.step.out_codes"][0, t, 0]), f"step {t}"
    if isinstance(noise, ReplayNoise):
        assert not noise.draws  # 5 draws of each kind per frame, all used


@pytest.mark.parametrize("run", ["greedy", "greedy_aria", "v2_greedy_aria"])
def test_warmup_inputs_from_codec_codes(run):
    _, _, cfg = checkpoint(RUNS[run][0])
    ref = reference(run)
    built = warmup_inputs(ref["codec.encode_out_codes.0"][0], 12, 2, cfg.tts.speech_pad_id)
    assert np.array_equal(built.code, ref["tts.init.code"][0])
    assert np.array_equal(built.audio_mask, ref["tts.init.audio_mask"][0])
    assert np.array_equal(built.subword_ids, ref["tts.init.subword_ids"][0])
    assert np.array_equal(built.subword_mask, ref["tts.init.subword_mask"][0])
    assert built.subword_ids.tolist() == [12] * 36 + [2]  # docs/model.md §3 row 36: not [12] * 37


@pytest.mark.parametrize("run", ["greedy", "greedy_aria"])
def test_warmup_waveform(run):
    _, _, cfg = checkpoint(RUNS[run][0])
    ref = reference(run)
    spf = cfg.codec.samples_per_frame
    n = prompt_samples(cfg.tts.audio_prompt_duration, cfg.codec.sample_rate, spf)
    assert n == 65268
    speaker = ref["tts.speaker_audio"][0] if "tts.speaker_audio" in ref else None
    wav = warmup_waveform(speaker, n, spf)
    assert np.array_equal(wav, ref["codec.encode_in_wav.0"][0, 0])


def test_warmup_waveform_repeats_a_short_prompt():
    wav = warmup_waveform(np.array([1.0, 2.0, 3.0]), 10, 2)  # 5 frames of 2 samples; the last 2 frames zeroed
    assert wav.tolist() == [0, 0, 1, 2, 3, 1, 2, 3, 0, 0, 0, 0]


@pytest.mark.parametrize("run", ["greedy_aria", "v2_greedy_aria"])
def test_speaker_latent_code_embeds(run):
    model, weights, _ = checkpoint(RUNS[run][0])
    ref = reference(run)
    embeds = model.warmup_code_embeds(recorded_warmup(ref), speaker_latent(weights))
    assert max_err(embeds[0], ref["tts.warmup.code_embeds"][0]) < TOL
    assert max_err(embeds[0], ref["tts.warmup.code_embeds"][1]) < TOL


def test_speaker_latent_shape_is_checked():
    model, weights, _ = checkpoint("tiny_model_aria")
    with pytest.raises(CheckpointError, match="speaker latent"):
        model.warmup_code_embeds(recorded_warmup(reference("greedy_aria")), speaker_latent(weights)[:, :20])


def test_eos_subword_in_warmup_matters():
    """Other ports feed [12] * 37; the recipe's last warm-up subword is EOS, and that changes the warm-up."""
    model, weights, _ = checkpoint("tiny_model_aria")
    ref = reference("greedy_aria")
    inputs = recorded_warmup(ref)
    wrong = WarmupInputs(inputs.code, inputs.audio_mask, np.full(37, 12), inputs.subword_mask)
    _, hidden = model.warmup(wrong, speaker_latent(weights))
    assert max_err(hidden[0], ref["tts.warmup.hidden_states"][0]) > 100 * TOL


def test_checkpoint_without_flag_buffers():
    """Published checkpoints may lack the integer buffers: load them as optional, fill them from the tokenizer."""
    cfg = load_config(NEMO / "tiny_model_aria")
    vocab = Tokenizer.from_file(str(NEMO / "tiny_model_aria" / "tokenizer.json")).get_vocab(with_added_tokens=True)
    full = read_weights(NEMO / "tiny_model_aria")
    weights = {k: v for k, v in full.items() if not k.endswith(("is_continuation", "special_flags", "pad_tensor"))}
    model = RVQEARTTSModel(cfg.tts, len(vocab))
    absent = load_into(model, weights, prefix="tts_model.tts_model.", optional=DERIVED_KEYS)
    assert len(absent) == 4
    model.set_text_vocab(vocab, vocab["<s>"], vocab["</s>"], fill_flag_tables=True)
    ref = reference("greedy_aria")
    _, hidden = model.warmup(recorded_warmup(ref), speaker_latent(full))
    assert max_err(hidden, ref["tts.warmup.hidden_states"]) < TOL
    with pytest.raises(ConfigError, match="tokenizer has 3 tokens"):
        model.set_text_vocab({"a": 0, "b": 1, "c": 2}, None, None, fill_flag_tables=True)


def test_warmup_in_pieces_of_layers_is_the_one_forward():
    """A joining conversation's set-up runs the warm-up forward a few layers a stage (voicechat/timeline/conversation.py
    ``_set_up``): each piece evaluated before the next, the caches are those of the one forward, bit for bit."""
    model, weights, _ = checkpoint("tiny_model_aria")
    inputs = recorded_warmup(reference("greedy_aria"))
    whole, _ = model.warmup(inputs, speaker_latent(weights))
    state, x = model.warmup_state(), model.warmup_input(inputs, speaker_latent(weights))
    for i in range(len(model.backbone.layers)):
        x = model.backbone.through(x, state.caches, range(i, i + 1))
        mx.eval(x, state.arrays())
    assert len(model.backbone.layers) > 1 and state.position == whole.position == 37
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(state.arrays(), whole.arrays()))


def test_warmup_leaves_caches_evaluated():
    model, weights, _ = checkpoint("tiny_model_aria")
    state, _ = model.warmup(recorded_warmup(reference("greedy_aria")), speaker_latent(weights))
    assert count_ops(*state.arrays()) == 0


# ----------------------------------------------------------------------------------------------------------------
# pieces
# ----------------------------------------------------------------------------------------------------------------
def test_unmasking_schedule():
    assert unmasking_schedule(31, 8, 3.0) == (0, 0, 0, 1, 1, 3, 4, 22)
    assert sum(unmasking_schedule(31, 8, 3.0)) == 31


def test_depthsum_ignores_pad_index():
    books = mx.array(np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2))  # Q=2, K=3, D=2
    code = mx.array([[0, 2], [3, 1], [3, 3]])
    assert np.array(depthsum(books, code)).tolist() == [[0 + 10, 1 + 11], [8, 9], [0, 0]]


def test_nearest_code_is_the_closest_vector_of_each_codebook():
    """The search over the load-time views picks, for each codebook, the vector at the smallest Euclidean distance
    (numpy float64 brute force), and reads the codebook it was split from."""
    rng = np.random.default_rng(0)
    books = rng.standard_normal((31, 64, 16)).astype(np.float32)
    split = Codebook.split(mx.array(books))
    mx.eval([b.arrays() for b in split])
    for q in (0, 7, 30):
        for z in rng.standard_normal((20, 1, 16)).astype(np.float32):
            expected = np.argmin(((books[q].astype(np.float64) - z.astype(np.float64)) ** 2).sum(-1))
            assert nearest_code(split[q], mx.array(z)).tolist() == [expected]
        np.testing.assert_array_equal(np.array(split[q].vectors), books[q])


def test_session_with_key_noise_is_reproducible():
    """Default settings (top-p 0.8, noise 0.8) from the config; same seed, same codes; codes are codebook indices."""
    model, weights, cfg = checkpoint("tiny_model_aria")
    ref = reference("greedy_aria")
    runs = []
    for seed in (7, 7, 8):
        state, _ = model.warmup(recorded_warmup(ref), speaker_latent(weights), KeyNoise(seed))
        codes = [model.step(state, ref["tts.step.in_code"][0, t, 0], 12) for t in range(3)]
        runs.append(np.array(mx.stack(codes)))
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    assert runs[0].min() >= 0 and runs[0].max() < cfg.tts.codebook_size


def test_settings_default_to_the_config():
    model, weights, cfg = checkpoint("tiny_model_aria")
    ref = reference("greedy_aria")
    results = []
    for settings in ({}, dict(guidance_scale=cfg.tts.guidance_scale, top_p=cfg.tts.top_p,
                              noise_scale=cfg.tts.noise_scale)):
        state, _ = model.warmup(recorded_warmup(ref), speaker_latent(weights), KeyNoise(3))
        results.append(np.array(model.step(state, ref["tts.step.in_code"][0, 0, 0], 12, **settings)))
    assert np.array_equal(results[0], results[1])
