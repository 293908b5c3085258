"""The LLM position (voicechat/llm/lm.py): channel fusion, prompt prefill, cached steps, heads and boosts, against
NeMo 3.0.0's greedy timeline, hand-made tensors and invariants; quantized vs dequantized weights."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tokenizers import Tokenizer

from conftest import NEMO
import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

from test_nemotron_h import GEOMETRIES, checkpoint, max_err, reference
from voicechat.checkpoint import load_into
from voicechat.config_formats import with_token_ids
from voicechat.llm import lm
from voicechat.llm.nemotron_h import NemotronH


class TinySTT(nn.Module):
    """The ``stt_model`` attributes lm.py reads (the real STT module has perception etc. besides)."""

    def __init__(self, llm_cfg, function_head: bool = False):
        super().__init__()
        self.embed_tokens = nn.Embedding(llm_cfg.vocab_size, llm_cfg.hidden_size)
        self.llm = NemotronH(llm_cfg)
        self.lm_head = nn.Linear(llm_cfg.hidden_size, llm_cfg.vocab_size, bias=False)
        self.function_head = nn.Linear(llm_cfg.hidden_size, llm_cfg.vocab_size, bias=False) if function_head else None


def model_config(name: str):
    cfg, _ = checkpoint(name)
    tok = Tokenizer.from_file(str(NEMO / name / "tokenizer.json"))
    return with_token_ids(cfg, tok.token_to_id, tok.id_to_token)


def build_stt(name: str) -> TinySTT:
    cfg, weights = checkpoint(name)
    stt = TinySTT(cfg.llm)
    for part in ("llm", "embed_tokens", "lm_head"):
        load_into(getattr(stt, part), weights, prefix=f"stt_model.{part}.")
    return stt


def previous_ids(gen_text: np.ndarray, pad: int) -> np.ndarray:
    """[1, T] ids -> the previous position's ids, pad at t = 0 (docs/model.md §1.2 D)."""
    return np.concatenate([np.full((1, 1), pad), gen_text[:, :-1]], axis=1)


def greedy_timeline(stt, cfg, prompt: mx.array, audio: mx.array) -> list[int]:
    """docs/model.md §1.2 C-F with argmax: one prompt prefill (its prediction discarded), then a step per frame."""
    state = lm.LMState(stt, cfg)
    lm.prefill(stt, cfg, state, prompt)
    ids = [cfg.pad_id] * prompt.shape[1]
    prev = mx.array([cfg.pad_id])
    for t in range(audio.shape[1]):
        text_logits, _ = lm.step(stt, cfg, state, audio[:, t], prev)
        prev = mx.argmax(text_logits, axis=-1)
        mx.eval(prev, state.arrays)
        ids.append(prev.item())
    return ids


# ----------------------------------------------------------------------------------------------------------------
# NeMo fixtures
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,run", GEOMETRIES)
def test_fusion_matches_nemo_inputs(name, run):
    ref, cfg, stt = reference(run), model_config(name), build_stt(name)
    assert cfg.pad_id == 12
    prompt = mx.array(ref["stt.prompt_tokens"])
    audio = mx.concatenate([stt.embed_tokens(prompt), mx.array(ref["stt.audio_embeds"])], axis=1)
    prev = mx.array(previous_ids(ref["stt.gen_text_full"], cfg.pad_id))
    assert max_err(lm.fuse(stt, cfg, audio, prev), ref["stt.input_embeds_final"]) < 1e-6
    # before generation NeMo's buffer holds the audio channel, plus the text channel's pad at t = 0 only
    init = ref["stt.input_embeds_init"]
    assert max_err(lm.fuse(stt, cfg, audio[:, :1], prev[:, :1]), init[:, :1]) < 1e-6
    assert max_err(cfg.user_channel_weight * audio[:, 1:], init[:, 1:]) < 1e-6


@pytest.mark.parametrize("name,run", GEOMETRIES)
def test_greedy_ids_match_nemo(name, run):
    ref, cfg, stt = reference(run), model_config(name), build_stt(name)
    ids = greedy_timeline(stt, cfg, mx.array(ref["stt.prompt_tokens"]), mx.array(ref["stt.audio_embeds"]))
    assert ids == ref["stt.gen_text_full"][0].tolist()


@pytest.mark.parametrize("name,run", GEOMETRIES)
def test_step_logits_match_nemo(name, run):
    """Teacher-forced through lm.step (the text ids NeMo generated fed back): logits at every audio position."""
    ref, cfg, stt = reference(run), model_config(name), build_stt(name)
    p = ref["stt.prompt_tokens"].shape[1]
    state = lm.LMState(stt, cfg)
    logits = [lm.prefill(stt, cfg, state, mx.array(ref["stt.prompt_tokens"]))[0]]
    prev = previous_ids(ref["stt.gen_text_full"], cfg.pad_id)[0]
    audio = mx.array(ref["stt.audio_embeds"])
    for t in range(audio.shape[1]):
        logits.append(lm.step(stt, cfg, state, audio[:, t], mx.array(prev[p + t:p + t + 1]))[0])
        mx.eval(logits[-1], state.arrays)
    assert max_err(mx.stack(logits, axis=1), ref["stt.text_logits_step"][:, p - 1:]) < 1e-4


# ----------------------------------------------------------------------------------------------------------------
# prefill and sessions
# ----------------------------------------------------------------------------------------------------------------
def prompt_and_audio(name: str, run: str):
    ref = reference(run)
    return mx.array(ref["stt.prompt_tokens"]), mx.array(ref["stt.audio_embeds"][:, :12])


def run_steps(stt, cfg, state, audio: mx.array) -> mx.array:
    """Text logits of one step per audio frame, each fed the previous argmax (pad first). -> [B, T, V]"""
    prev, out = mx.full((audio.shape[0],), cfg.pad_id), []
    for t in range(audio.shape[1]):
        logits, _ = lm.step(stt, cfg, state, audio[:, t], prev)
        prev = mx.argmax(logits, axis=-1)
        mx.eval(logits, prev, state.arrays)
        out.append(logits)
    return mx.stack(out, axis=1)


def test_batched_prefill_equals_per_token_prefill():
    cfg, stt = model_config("tiny_model"), build_stt("tiny_model")
    prompt, audio = prompt_and_audio("tiny_model", "greedy")
    batched = lm.LMState(stt, cfg)
    last = lm.prefill(stt, cfg, batched, prompt)[0]
    per_token = lm.LMState(stt, cfg)
    pad = mx.array([cfg.pad_id])
    for t in range(prompt.shape[1]):  # the prompt embedding on the audio channel, pad on the text channel
        last_1 = lm.step(stt, cfg, per_token, stt.embed_tokens(prompt[:, t]), pad)[0]
        mx.eval(last_1, per_token.arrays)
    assert max_err(last, last_1) < 1e-5
    assert max_err(run_steps(stt, cfg, batched, audio), run_steps(stt, cfg, per_token, audio)) < 1e-5


@pytest.mark.parametrize("name,run", GEOMETRIES)
def test_prefill_in_chunks_equals_one_call(name, run):
    """A long prompt goes in bounded chunks (the memory of one call grows with its square): the last logits, every
    cache tensor and then NeMo's step logits are those of the one-call prefill."""
    ref, cfg, stt = reference(run), model_config(name), build_stt(name)
    prompt = mx.array(ref["stt.prompt_tokens"])
    assert prompt.shape[1] > 3  # several chunks, the last one shorter
    whole, chunked = lm.LMState(stt, cfg), lm.LMState(stt, cfg)
    want = lm.prefill(stt, cfg, whole, prompt, chunk=prompt.shape[1])[0]
    got = lm.prefill(stt, cfg, chunked, prompt, chunk=3)[0]
    mx.eval(want, got, whole.arrays, chunked.arrays)
    assert max_err(got, want) < 1e-5
    assert len(whole.arrays) == len(chunked.arrays)
    for a, b in zip(whole.arrays, chunked.arrays):
        assert a.shape == b.shape and max_err(a, b) < 1e-5
    p = prompt.shape[1]
    prev = previous_ids(ref["stt.gen_text_full"], cfg.pad_id)[0]
    audio = mx.array(ref["stt.audio_embeds"])
    logits = [got]
    for t in range(audio.shape[1]):
        logits.append(lm.step(stt, cfg, chunked, audio[:, t], mx.array(prev[p + t:p + t + 1]))[0])
        mx.eval(logits[-1], chunked.arrays)
    assert max_err(mx.stack(logits, axis=1), ref["stt.text_logits_step"][:, p - 1:]) < 1e-4


def test_several_sessions_share_one_model():
    cfg, stt = model_config("tiny_model"), build_stt("tiny_model")
    prompt, audio = prompt_and_audio("tiny_model", "greedy")
    alone = lm.LMState(stt, cfg)
    lm.prefill(stt, cfg, alone, prompt)
    want = run_steps(stt, cfg, alone, audio)
    a, b = lm.LMState(stt, cfg), lm.LMState(stt, cfg)
    lm.prefill(stt, cfg, a, prompt)
    lm.prefill(stt, cfg, b, prompt[:, ::-1])  # another session with other contents, interleaved below
    got_a = []
    pa = pb = mx.array([cfg.pad_id])
    for t in range(audio.shape[1]):
        la, _ = lm.step(stt, cfg, a, audio[:, t], pa)
        lb, _ = lm.step(stt, cfg, b, -audio[:, t], pb)
        pa, pb = mx.argmax(la, axis=-1), mx.argmax(lb, axis=-1)
        mx.eval(la, lb, pa, pb, a.arrays, b.arrays)
        got_a.append(la)
    assert max_err(mx.stack(got_a, axis=1), want) < 1e-5
    assert max_err(lb, want[:, -1]) > 1e-2  # the other session really was different


# ----------------------------------------------------------------------------------------------------------------
# function channel and boosts (NeMo 3.0.0 has neither: hand-made tensors)
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("function_head", [True, False])
def test_fusion_formula_hand_made(function_head):
    table = np.arange(24, dtype=np.float32).reshape(6, 4) / 8.0  # 6 tokens x 4 dims
    stt = TinySTT(checkpoint("tiny_model")[0].llm, function_head)
    stt.embed_tokens = nn.Embedding(6, 4)
    stt.embed_tokens.weight = mx.array(table)
    rng = np.random.default_rng(7)
    cfg = replace(model_config("tiny_model"), text_channel_weight=1.5, user_channel_weight=0.5,
                  function_channel_weight=2.0, pad_id=5)
    audio = rng.standard_normal((2, 3, 4)).astype(np.float32)
    text, func = np.array([[0, 1, 2], [3, 4, 5]]), np.array([[2, 2, 0], [1, 5, 3]])
    got = lm.fuse(stt, cfg, mx.array(audio), mx.array(text), mx.array(func))
    want = 1.5 * table[text] + 0.5 * audio + (2.0 * table[func] if function_head else 0.0)
    assert max_err(got, want) < 1e-6
    if function_head:  # a missing previous function id is pad
        got = lm.fuse(stt, cfg, mx.array(audio), mx.array(text))
        assert max_err(got, 1.5 * table[text] + 0.5 * audio + 2.0 * table[np.full_like(text, 5)]) < 1e-6


def test_heads_read_the_same_normed_hidden_and_prompt_pads_function_channel():
    cfg = replace(model_config("tiny_model"), function_channel_weight=2.0)
    stt = build_stt("tiny_model")
    stt.function_head = nn.Linear(cfg.llm.hidden_size, cfg.llm.vocab_size, bias=False)
    prompt, audio = prompt_and_audio("tiny_model", "greedy")
    state = lm.LMState(stt, cfg)
    text, func = lm.prefill(stt, cfg, state, prompt)
    pad = stt.embed_tokens(mx.full(prompt.shape, cfg.pad_id))
    hidden = stt.llm(stt.embed_tokens(prompt) + pad + 2.0 * pad)[:, -1]  # weights 1 / 1 / 2
    assert max_err(text, hidden @ stt.lm_head.weight.T) < 1e-5
    assert max_err(func, hidden @ stt.function_head.weight.T) < 1e-5

    prev_text, prev_func = mx.array([7]), mx.array([9])
    text, func = lm.step(stt, cfg, state, audio[:, 0], prev_text, prev_func)
    fused = audio[:, :1] + stt.embed_tokens(prev_text)[:, None] + 2.0 * stt.embed_tokens(prev_func)[:, None]
    hidden = stt.llm(mx.concatenate([stt.embed_tokens(prompt) + pad + 2.0 * pad, fused], axis=1))[:, -1]
    assert max_err(text, hidden @ stt.lm_head.weight.T) < 1e-5
    assert max_err(func, hidden @ stt.function_head.weight.T) < 1e-5


@pytest.mark.parametrize("eos_id", [2, 12])  # 12: eos == pad, the two boosts add up (docs/model.md §3 row 1)
def test_text_logit_boosts(eos_id):
    plain_cfg, stt = model_config("tiny_model"), build_stt("tiny_model")
    cfg = replace(plain_cfg, pad_boost=2.0, bos_boost=-1.0, eos_boost=0.5, eos_id=eos_id)
    prompt, audio = prompt_and_audio("tiny_model", "greedy")
    outs = []
    for c in (plain_cfg, cfg):
        state = lm.LMState(stt, c)
        lm.prefill(stt, c, state, prompt)
        outs.append(lm.step(stt, c, state, audio[:, 0], mx.array([c.pad_id]))[0])
    want = np.zeros(cfg.llm.vocab_size)
    for tid, boost in ((12, 2.0), (1, -1.0), (eos_id, 0.5)):
        want[tid] += boost
    assert max_err(outs[1] - outs[0], want[None]) < 1e-5


# ----------------------------------------------------------------------------------------------------------------
# quantized
# ----------------------------------------------------------------------------------------------------------------
def dequantized_copy(quantized: nn.Module, name: str) -> TinySTT:
    """A float TinySTT whose Linear / Embedding weights are the dequantized weights of ``quantized``."""
    stt = build_stt(name)
    weights = {f"{path}.weight": mx.dequantize(m.weight, m.scales, m.biases, m.group_size, m.bits)
               for path, m in quantized.named_modules() if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))}
    stt.update(tree_unflatten(list(weights.items())))
    return stt


@pytest.mark.parametrize("bits,group", [(4, 32), (4, 64), (8, 64)])
def test_quantized_matches_dequantized_float(bits, group):
    cfg = model_config("tiny_model")
    prompt, audio = prompt_and_audio("tiny_model", "greedy")
    quantized = build_stt("tiny_model")
    nn.quantize(quantized, group_size=group, bits=bits)
    n_quantized = sum(isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)) for _, m in quantized.named_modules())
    assert n_quantized == 4 + 2 + 4 + 2 + 2  # 2 Mamba x (in, out), 2 MLP x (up, down), 4 attention, embedding, head
    results = []
    for stt in (quantized, dequantized_copy(quantized, "tiny_model"), build_stt("tiny_model")):
        state = lm.LMState(stt, cfg)
        first = lm.prefill(stt, cfg, state, prompt)[0]
        results.append(mx.concatenate([first[:, None], run_steps(stt, cfg, state, audio)], axis=1))
    q, dq, fp = results
    assert max_err(q, dq) < 1e-4
    assert max_err(q, fp) > 1e-3  # quantization really changed the weights
