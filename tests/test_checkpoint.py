"""Loading: the three published layouts into one model, the NeMo-made checkpoint tensor by tensor, and one clear
error for every way a checkpoint can be broken."""

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from conftest import NEMO
import voicechat
from voicechat.checkpoint import fit_layout, read_weights, resolve_checkpoint
from voicechat.errors import CheckpointError, ConfigError, ModelUnavailable
from voicechat.random_checkpoint import LAYOUTS, write_checkpoint


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    return {layout: write_checkpoint(root / layout, layout) for layout in LAYOUTS}


def params(model) -> dict:
    return dict(tree_flatten(model.net.parameters()))


def test_three_layouts_load_into_the_same_model(layouts):
    nested, mlx4, runtime = (voicechat.load(layouts[k]) for k in LAYOUTS)
    assert nested.config.format == "nested" and runtime.config.format == "runtime" and mlx4.config.quantization
    a, b, c = params(nested), params(mlx4), params(runtime)
    assert b.keys() == c.keys()
    for name in b:  # the two quantized layouts share their shards: identical, bit for bit
        assert np.array_equal(np.asarray(b[name]), np.asarray(c[name])), name
    quantized = {n[: -len(".scales")] for n in b if n.endswith(".scales")}
    assert "stt_model.embed_tokens" in quantized and "stt_model.lm_head" in quantized
    assert any(".mixer.in_proj" in q for q in quantized) and not any(q.startswith("tts_model") for q in quantized)
    for name, w in a.items():
        base = name.rsplit(".", 1)[0]
        if base in quantized:
            continue
        stored = b[name]
        if w.dtype == mx.float32 and name.endswith((".A_log", ".D", ".dt_bias")):
            assert np.array_equal(np.asarray(w), np.asarray(stored)), name  # kept float32 in every layout
        elif mx.issubdtype(w.dtype, mx.floating):  # float32 vs the bf16 copy: equal after rounding to bf16
            assert np.array_equal(np.asarray(w.astype(mx.bfloat16).astype(mx.float32)), np.asarray(stored)), name
        else:
            assert np.array_equal(np.asarray(w), np.asarray(stored)), name
    for q in quantized:  # within one 4-bit quantization step (group range / 15) of the float weights
        w = a[q + ".weight"]
        module = dict(mlx4.net.named_modules())[q]
        deq = mx.dequantize(module.weight, module.scales, module.biases, module.group_size, module.bits)
        span = w.reshape(w.shape[0], -1, 64).max(axis=-1) - w.reshape(w.shape[0], -1, 64).min(axis=-1)
        err = mx.abs(deq - w).reshape(w.shape[0], -1, 64).max(axis=-1)
        assert mx.all(err <= span / 15).item(), q
        assert mx.mean(mx.abs(deq - w)).item() < 0.5 * mx.mean(span / 15).item(), q  # typical error: below half a step


def test_nemo_checkpoint_loads_strictly_and_equals_the_file():
    m = voicechat.load(NEMO / "tiny_model")
    file = mx.load(str(NEMO / "tiny_model" / "model.safetensors"))
    loaded = params(m)
    skipped = {"tts_model._control_codes"}
    for name, w in file.items():
        if name.endswith("num_batches_tracked") or "_variance_list" in name or name in skipped:
            continue
        assert name in loaded, name
        expected = fit_layout(name, w, loaded[name].shape).astype(loaded[name].dtype)
        assert np.array_equal(np.asarray(expected), np.asarray(loaded[name])), name
    assert len(loaded) == len([k for k in file if "num_batches" not in k and "_variance" not in k]) - 1


def test_layout_fitting_is_shape_gated_and_idempotent():
    torch_conv = mx.arange(2 * 3 * 7).reshape(2, 3, 7)  # [out, in, k]
    fitted = fit_layout("x", torch_conv, (2, 7, 3))
    assert np.array_equal(np.asarray(fitted), np.asarray(torch_conv).transpose(0, 2, 1))
    assert fit_layout("x", fitted, (2, 7, 3)) is fitted  # already fitted: untouched
    conv2d = mx.zeros((8, 1, 3, 3))
    assert fit_layout("x", conv2d, (8, 3, 3, 1)).shape == (8, 3, 3, 1)
    assert fit_layout("x", mx.zeros((5, 4, 1)), (5, 4)).shape == (5, 4)
    with pytest.raises(CheckpointError, match=r"shape \[2, 3, 7\], the model expects \[3, 3, 3\]"):
        fit_layout("x", torch_conv, (3, 3, 3))


def copy_ckpt(src, dst):
    shutil.copytree(src, dst)
    return dst


def edit_weights(directory, change):
    weights = dict(mx.load(str(directory / "model.safetensors")))
    change(weights)
    mx.save_safetensors(str(directory / "model.safetensors"), weights)


def test_missing_unexpected_and_misshapen_tensors_are_reported_together(layouts, tmp_path):
    d = copy_ckpt(layouts["nested"], tmp_path / "c")

    def damage(w):
        del w["stt_model.lm_head.weight"]
        w["stt_model.extra.weight"] = mx.zeros((2, 2)) + 1
        w["tts_model.tts_model.bos_emb"] = mx.ones((3,))

    edit_weights(d, damage)
    with pytest.raises(CheckpointError) as e:
        voicechat.load(d)
    msg = str(e.value)
    assert "missing stt_model.lm_head.weight" in msg
    assert "unexpected stt_model.extra.weight" in msg
    assert "tts_model.tts_model.bos_emb has shape [3], the model expects [64]" in msg


@pytest.mark.parametrize("value, words", [(0.0, "all zeros"), (float("nan"), "NaN")])
def test_damaged_tensors_are_named(layouts, tmp_path, value, words):
    d = copy_ckpt(layouts["nested"], tmp_path / "c")
    edit_weights(d, lambda w: w.__setitem__("stt_model.function_head.weight",
                                            mx.full(w["stt_model.function_head.weight"].shape, value)))
    with pytest.raises(CheckpointError, match=f"stt_model.function_head.weight (is|has) .*{words}"):
        voicechat.load(d)


def test_missing_shard(layouts, tmp_path):
    d = copy_ckpt(layouts["mlx-4bit"], tmp_path / "c")
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelUnavailable, match="missing model-00002-of-00002.safetensors"):
        voicechat.load(d)


def test_unknown_config_format(layouts, tmp_path):
    d = copy_ckpt(layouts["nested"], tmp_path / "c")
    (d / "config.json").write_text(json.dumps({"model_type": "whisper"}))
    with pytest.raises(ConfigError, match="no known NemotronLabs-VoiceChat format"):
        voicechat.load(d)


def test_llm_geometry_is_cross_checked_against_the_weights(layouts, tmp_path):
    d = copy_ckpt(layouts["nested"], tmp_path / "c")
    llm = json.loads((d / "llm" / "config.json").read_text())
    llm["hybrid_override_pattern"] = llm["hybrid_override_pattern"] + "-"
    llm["num_hidden_layers"] += 1
    (d / "llm" / "config.json").write_text(json.dumps(llm))
    with pytest.raises(ConfigError, match="7 LLM layers in the weights, 8 in its pattern"):
        voicechat.load(d)


def test_hub_id_while_offline_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelUnavailable, match="hf download org/missing-model --local-dir DIR"):
        resolve_checkpoint("org/missing-model", offline=True)


def test_not_a_checkpoint_path(tmp_path):
    with pytest.raises(ModelUnavailable, match="neither a checkpoint directory nor a Hugging Face repo id"):
        voicechat.load(tmp_path / "no" / "such" / "dir")
    with pytest.raises(ModelUnavailable, match="missing config.json"):
        voicechat.load(tmp_path)


def test_checkpoint_without_text_tokenizer_takes_an_explicit_one(layouts, tmp_path):
    d = copy_ckpt(layouts["nested"], tmp_path / "c")
    tok = tmp_path / "tok.json"
    shutil.move(d / "tokenizer.json", tok)
    with pytest.raises(ModelUnavailable, match="ships no text tokenizer"):
        voicechat.load(d, offline=True)
    assert voicechat.load(d, tokenizer=str(tok), offline=True).tokenizer.vocab_size == 512


def test_read_weights_reports_an_unreadable_shard(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        read_weights(tmp_path)


def test_derived_buffers_are_computed_when_absent(layouts, tmp_path):
    """Published layouts may omit the mel filterbank, the flag tables, the TTS codebook copy and the silence frame:
    the model derives them, to the same values the full checkpoint stores."""
    full = voicechat.load(layouts["nested"])
    d = copy_ckpt(layouts["nested"], tmp_path / "c")
    dropped = ["stt_model.perception.preprocessor.featurizer.fb", "stt_model.perception.preprocessor.featurizer.window",
               "tts_model.tts_model.rvq_embs", "tts_model.codec_silence_tokens",
               "tts_model.tts_model.embed_subword.subword_flag_emb.is_continuation",
               "tts_model.tts_model.embed_subword.bos_eos_emb.special_flags"]
    edit_weights(d, lambda w: [w.pop(k) for k in dropped])
    derived = voicechat.load(d)
    a, b = params(full), params(derived)
    for name in dropped:
        assert np.allclose(np.asarray(a[name]), np.asarray(b[name]), atol=1e-6), name
