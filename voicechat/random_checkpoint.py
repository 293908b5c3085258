"""Random-weight checkpoints in the published layouts, for the demo app, the tests and the benchmarks.

    python -m voicechat.random_checkpoint DIR [--layout nested|mlx-4bit|runtime] [--dims tiny|medium|full] [--seed N]

    write_checkpoint(dir, layout="nested")    NVIDIA's release layout: nested config.json, one float32 file
    write_checkpoint(dir, layout="mlx-4bit")  the -mlx-4bit family: nested config + mlx_conversion, LLM, embedding
                                              and both vocabulary heads 4-bit (group 64), speech path bf16, 2 shards
    write_checkpoint(dir, layout="runtime")   mlx-vlm's runtime config over the same shards

Tensors use the published key names and PyTorch layouts (conv weights [out, in, k], transposed convs [in, out, k],
2-D convs [out, in, kh, kw], pointwise convs with their k=1 axis). ``dims="tiny"`` (default) is small enough for CI;
``dims="medium"`` has the release's depths at about 1/4 of its widths (the peer harness's NeMo-made medium model: CPU
benchmarks without NeMo); ``dims="full"`` has the release's real shapes (11 B parameters; for benchmarks, not CI).
Values are drawn per tensor from a seeded generator, so a checkpoint is a function of (dims, seed).

A directory it writes holds the marker file ``MARKER``; it replaces only such a directory (or an empty one), never a
folder of the user's.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from .config_formats import NANO_9B_V2_CONFIG, parse_nested, with_token_ids
from .network import DERIVED_KEYS, VoiceChatModel, derive_missing
from .tokenizer import TextTokenizer
from .tools import Tool, system_prompt

LAYOUTS = ("nested", "mlx-4bit", "runtime")
MARKER = ".voicechat-random-checkpoint"  # written into every directory this module makes
# ids as in NVIDIA's tokenizer, up to the tool-call tokens <SPECIAL_20>..<SPECIAL_22> (docs/tools.md §2)
SPECIALS = ["<unk>", "<s>", "</s>"] + [f"<SPECIAL_{i}>" for i in range(3, 23)]
CORPUS = (
    "You are a helpful assistant. Answer in a spoken, conversational style. What is the capital of France? "
    "The capital of France is Paris. Hello, how can I help you today? The weather is sunny and warm. "
    "Please tell me a short story about a dog that found its way home, and then say goodbye. Thank you! "
)
# NVIDIA's tool-call texts (docs/tools.md), so that prompts with tools, calls and results stay short on a tiny model
TOOL_CORPUS = system_prompt("", [Tool("get_weather", "The weather in a city.", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})]) + (
    ' <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>'
    ' <TOOL_RESPONSE>[{"result": 21, "error": "unknown"}]</TOOL_RESPONSE> ')
RELEASE_PATTERN = NANO_9B_V2_CONFIG["hybrid_override_pattern"]
DIMS = {
    # the same shape rules as the release (hybrid pattern with every layer type, 31 codebooks, 1764 samples per code
    # frame, 37 warm-up frames, joint_net.2, GQA-free Gemma, ...) at widths that run in milliseconds
    "tiny": dict(vocab=512, hidden=64, pattern="M-M*-M-", heads=4, kv_heads=2, head_dim=16, mlp=128,
                 mamba_heads=8, mamba_head_dim=16, state=16, groups=2, chunk=16,
                 mels=128, enc_d=64, enc_layers=2, enc_heads=4, enc_channels=32,
                 rnnt_vocab=48, pred_hidden=32, joint_hidden=32,
                 tts_hidden=64, tts_mlp=128, tts_layers=3, tts_heads=4, tts_head_dim=16, tts_pattern=3,
                 mog_mlp=128, mog_layers=3, low_rank=16, components=64, latent=64, codebook=64,
                 codec_base=16, codec_blocks=1),
    # the sizes of the peer harness's build_medium.py (its NeMo-made "medium"): the release's depths at
    # about 1/4 of its widths, the harness's 512-entry vocabulary; for CPU benchmarks without NeMo
    "medium": dict(vocab=512, hidden=1120, pattern=RELEASE_PATTERN, heads=10, kv_heads=2, head_dim=128, mlp=3920,
                   mamba_heads=32, mamba_head_dim=80, state=32, groups=2, chunk=128,
                   mels=128, enc_d=256, enc_layers=24, enc_heads=8, enc_channels=64,
                   rnnt_vocab=1024, pred_hidden=160, joint_hidden=160,
                   tts_hidden=288, tts_mlp=1152, tts_layers=28, tts_heads=4, tts_head_dim=72, tts_pattern=6,
                   mog_mlp=1152, mog_layers=3, low_rank=16, components=256, latent=128, codebook=256,
                   codec_base=96, codec_blocks=3),
    "full": dict(vocab=131072, hidden=4480, pattern=RELEASE_PATTERN, heads=40, kv_heads=8, head_dim=128, mlp=15680,
                 mamba_heads=128, mamba_head_dim=80, state=128, groups=8, chunk=128,
                 mels=128, enc_d=1024, enc_layers=24, enc_heads=8, enc_channels=256,
                 rnnt_vocab=1024, pred_hidden=640, joint_hidden=640,
                 tts_hidden=1152, tts_mlp=4608, tts_layers=28, tts_heads=16, tts_head_dim=72, tts_pattern=6,
                 mog_mlp=4608, mog_layers=3, low_rank=64, components=1024, latent=512, codebook=1024,
                 codec_base=384, codec_blocks=3),
}


# ----------------------------------------------------------------------------------------------------------------
# tokenizers and configs
# ----------------------------------------------------------------------------------------------------------------
def write_tokenizer(directory: Path, vocab_size: int) -> None:
    """Byte-level BPE with NVIDIA's special-token ids (<s>=1, </s>=2, <SPECIAL_12>=12, <SPECIAL_20..22>=20..22) and
    exactly 256 single-character tokens (the EAR-TTS char table), padded with synthetic multi-character tokens up to
    ``vocab_size``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(vocab_size, 512), special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([(CORPUS + TOOL_CORPUS) * 4], trainer=trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    while len(vocab) < vocab_size:  # word-like tokens, 60 % word-initial (Ġ prefix)
        s = "".join(rng.choice(letters, int(rng.integers(2, 9))))
        s = ("\u0120" + s) if rng.random() < 0.6 else s
        vocab.setdefault(s, len(vocab))
    tok = Tokenizer.from_str(json.dumps(spec))
    assert sum(len(t) == 1 for t in tok.get_vocab()) == 256 and tok.get_vocab_size() == vocab_size
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "pad_token": "<SPECIAL_12>", "clean_up_tokenization_spaces": False}, indent=1))
    (directory / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<SPECIAL_12>"}, indent=1))


def llm_config(d: dict) -> dict:
    """A HF ``nemotron_h`` config.json (what ``pretrained_llm`` points at)."""
    return {"model_type": "nemotron_h", "vocab_size": d["vocab"], "hidden_size": d["hidden"],
            "intermediate_size": d["mlp"], "num_hidden_layers": len(d["pattern"]),
            "hybrid_override_pattern": d["pattern"], "num_attention_heads": d["heads"],
            "num_key_value_heads": d["kv_heads"], "head_dim": d["head_dim"], "mamba_num_heads": d["mamba_heads"],
            "mamba_head_dim": d["mamba_head_dim"], "ssm_state_size": d["state"], "n_groups": d["groups"],
            "conv_kernel": 4, "chunk_size": d["chunk"], "layer_norm_epsilon": 1e-5, "use_conv_bias": True,
            "mamba_proj_bias": False, "attention_bias": False, "mlp_bias": False, "time_step_min": 0.001,
            "time_step_max": 0.1, "time_step_limit": [0.0, math.inf], "max_position_embeddings": 131072,
            # HF NemotronHConfig keys voicechat does not read, at the values NeMo's checkpoints carry (mlx-audio's
            # converter requires them, so its side-by-side can run on these checkpoints)
            "use_bias": False, "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu", "residual_in_fp32": False,
            "tie_word_embeddings": False, "expand": 2, "rescale_prenorm_residual": True, "time_step_floor": 1e-4}


def rnnt_vocabulary(n: int) -> list[str]:
    words = ["▁the", "▁what", "▁is", "▁capital", "▁of", "▁france", "▁paris", "▁hello", "▁how", "▁are", "▁you",
             ".", ",", "?", "s", "ing", "ed", "▁a", "▁to", "▁and"]
    return ["<unk>"] + [words[i - 1] if i <= len(words) else f"▁w{i}" for i in range(1, n)]


def nested_config(d: dict, llm_dir: str) -> dict:
    """NVIDIA's release config.json (docs/model.md §4.2 keys and values) at the given dimensions."""
    pre = {"sample_rate": 16000, "normalize": "NA", "window_size": 0.025, "window_stride": 0.01, "window": "hann",
           "features": d["mels"], "n_fft": 512, "log": True, "frame_splicing": 1, "dither": 1e-05, "pad_to": 0}
    enc = {"feat_in": d["mels"], "feat_out": -1, "n_layers": d["enc_layers"], "d_model": d["enc_d"],
           "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": d["enc_channels"],
           "causal_downsampling": True, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
           "n_heads": d["enc_heads"], "att_context_size": [[70, 0]], "att_context_style": "chunked_limited",
           "xscaling": False, "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9,
           "conv_norm_type": "layer_norm", "conv_context_size": "causal", "use_bias": False}
    stt = {"pretrained_llm": llm_dir, "pretrained_weights": False, "bos_token": "<s>", "eos_token": "</s>",
           "pad_token": "<SPECIAL_12>", "predict_user_text": False, "use_function_head": True,
           "duplex_user_channel_weight": 1.0, "duplex_text_channel_weight": 1.0,
           "duplex_function_channel_weight": 2.0, "source_sample_rate": 16000, "rnnt_max_symbols_per_step": 10,
           "perception": {"preprocessor": pre, "encoder": enc, "modality_adapter": {"d_model": d["enc_d"]},
                          "output_dim": d["hidden"]}}
    h = d["tts_hidden"]
    backbone = {"hidden_size": h, "intermediate_size": d["tts_mlp"], "num_hidden_layers": d["tts_layers"],
                "num_attention_heads": d["tts_heads"], "num_key_value_heads": d["tts_heads"],
                "head_dim": d["tts_head_dim"], "sliding_window": 7500, "sliding_window_pattern": d["tts_pattern"]}
    char = {"hidden_size": h, "intermediate_size": d["tts_mlp"], "num_hidden_layers": 1,
            "num_attention_heads": d["tts_heads"], "num_key_value_heads": d["tts_heads"], "head_dim": d["tts_head_dim"]}
    tts = {"use_gated_fusion_for_text_audio": True, "disable_eos_prediction": True, "use_bos_eos_emb": True,
           "use_subword_flag_emb": True, "num_delay_speech_tokens": 2, "backbone_type": "gemma3_text",
           "backbone_config": backbone, "latent_size": d["latent"], "codebook_size": d["codebook"],
           "num_quantizers": 31, "context_hidden_size": None, "exponent": 3.0, "random_target_masking": False,
           "use_audio_prompt_frozen_projection": True,
           "cas_config": {"backbone_type": "t5gemma",
                          "backbone_config": {"is_encoder_decoder": False, "encoder": char}},
           "mog_head_config": {"intermediate_size": d["mog_mlp"], "num_layers": d["mog_layers"],
                               "low_rank": d["low_rank"], "num_predictions": d["components"], "min_log_std": -4.0,
                               "eps": 1e-6}}
    codec = {"latent_size": d["latent"], "n_fft": 16, "hop_length": 4, "base_hidden_size": d["codec_base"],
             "channel_mult": [1, 2, 4], "rates": [7, 7, 9], "num_blocks": d["codec_blocks"], "kernel_size": 7,
             "groups": 1, "codebook_size": d["codebook"], "num_quantizers": 31, "wav_to_token_ratio": 1764}
    speech = {"pretrained_lm_name": llm_dir, "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<SPECIAL_12>",
              "audio_codec_run_dtype": "float32", "inference_guidance_scale": 0.2, "inference_top_p_or_k": 0.95,
              "inference_noise_scale": 0.001, "inference_force_speech_silence_on_eos": True,
              "codec_config": codec, "tts_config": tts}
    n = d["rnnt_vocab"]
    return {
        "model": {"inference_speaker_name": "Aria",
                  "stt": {"model": stt, "data": {"source_sample_rate": 16000}},
                  "speech_generation": {"model": speech, "data": {"audio_prompt_duration": 3.0, "frame_length": 0.08,
                                                                   "source_sample_rate": 16000,
                                                                   "target_sample_rate": 22050}}},
        "data": {"frame_length": 0.08, "source_sample_rate": 16000, "target_sample_rate": 22050},
        "_rnnt_merge_info": {
            "decoder_config": {"prednet": {"pred_hidden": d["pred_hidden"], "pred_rnn_layers": 2, "dropout": 0.2},
                               "vocab_size": n, "blank_as_pad": True},
            "joint_config": {"jointnet": {"encoder_hidden": d["enc_d"], "pred_hidden": d["pred_hidden"],
                                          "joint_hidden": d["joint_hidden"], "activation": "relu", "dropout": 0.2},
                             "num_classes": n, "vocabulary": rnnt_vocabulary(n)}},
    }


def runtime_config(nested: dict, llm: dict) -> dict:
    """mlx-vlm's runtime config for a nested one (the field mapping of its converter, docs/checkpoints.md §3)."""
    m = nested["model"]
    stt, speech = m["stt"]["model"], m["speech_generation"]["model"]
    per, tts, codec, merge = stt["perception"], speech["tts_config"], speech["codec_config"], nested["_rnnt_merge_info"]
    text_keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "max_position_embeddings",
                 "num_attention_heads", "num_key_value_heads", "attention_bias", "mamba_num_heads", "mamba_head_dim",
                 "mamba_proj_bias", "ssm_state_size", "conv_kernel", "n_groups", "mlp_bias", "layer_norm_epsilon",
                 "use_conv_bias", "hybrid_override_pattern", "head_dim", "time_step_limit")
    out = {
        "model_type": "nemotron_voicechat", "architectures": ["NemotronVoiceChatForConditionalGeneration"],
        "text_config": {"model_type": "nemotron_h", **{k: llm[k] for k in text_keys}},
        "audio_config": {"preprocessor": per["preprocessor"], "encoder": per["encoder"],
                         "decoder": {**merge["decoder_config"]["prednet"],
                                     "vocab_size": merge["decoder_config"]["vocab_size"], "blank_as_pad": True},
                         "joint": {**merge["joint_config"]["jointnet"],
                                   "num_classes": merge["joint_config"]["num_classes"]},
                         "output_dim": per["output_dim"], "max_symbols": 10},
        "tts_config": {**{k: tts["backbone_config"][k] for k in ("hidden_size", "intermediate_size",
                                                                 "num_hidden_layers", "num_attention_heads",
                                                                 "num_key_value_heads", "head_dim", "sliding_window")},
                       "sliding_window_pattern": tts["backbone_config"]["sliding_window_pattern"],
                       **{k: tts[k] for k in ("latent_size", "num_quantizers", "codebook_size",
                                              "num_delay_speech_tokens", "exponent", "disable_eos_prediction",
                                              "use_gated_fusion_for_text_audio", "use_subword_flag_emb",
                                              "use_bos_eos_emb", "use_audio_prompt_frozen_projection")},
                       "character_encoder": tts["cas_config"]["backbone_config"]["encoder"],
                       "mog_head": tts["mog_head_config"], "guidance_scale": speech["inference_guidance_scale"],
                       "top_p": speech["inference_top_p_or_k"], "noise_scale": speech["inference_noise_scale"],
                       "audio_prompt_duration": m["speech_generation"]["data"]["audio_prompt_duration"]},
        "codec_config": {"sample_rate": 22050, "base_channels": codec["base_hidden_size"],
                         "channel_multipliers": codec["channel_mult"], "downsample_rates": codec["rates"],
                         "blocks_per_stage": codec["num_blocks"], "block_kernel_size": codec["kernel_size"],
                         "latent_dim": codec["latent_size"], "n_fft": 16, "hop_length": 4,
                         "num_quantizers": codec["num_quantizers"], "codebook_size": codec["codebook_size"]},
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 12, "silence_token_id": 11,
        "rnnt_blank_id": merge["decoder_config"]["vocab_size"], "input_sample_rate": 16000,
        "output_sample_rate": 22050, "frame_duration": 0.08,
        "function_channel_weight": stt["duplex_function_channel_weight"], "speaker": "Aria",
        "rnnt_vocabulary": merge["joint_config"]["vocabulary"],
    }
    quant = nested.get("mlx_conversion", {}).get("quantization")
    if quant:
        out["quantization"] = out["quantization_config"] = {"group_size": quant["group_size"], "bits": quant["bits"],
                                                            **quant.get("modules", {})}
    return out


# ----------------------------------------------------------------------------------------------------------------
# random tensors
# ----------------------------------------------------------------------------------------------------------------
DERIVED = re.compile("|".join(DERIVED_KEYS))
TRANSPOSED_CONV = re.compile(r"audio_codec\.decoder\.layers\.\d+\.weight$")
CODEC_LAYER_CONV = re.compile(r"audio_codec\.(encoder|decoder)\.layers\.\d+\.weight$")
POINTWISE = re.compile(r"(pointwise_conv[12]|pwconv[12])\.weight$|audio_codec\.(encoder|decoder)\.layers\.\d+\.weight$")
OFFSET_NORMS = "tts_model.tts_model."  # Gemma-style (1 + w) norms live here: their w is drawn around 0


def fan_in(name: str, shape: tuple) -> int:
    """Inputs per output of a parameter in OUR layout: Linear [out, in], conv [out, k, in], 2-D conv
    [out, kh, kw, in], and the codec decoder's transposed convs [in, k, out]."""
    if len(shape) == 3 and TRANSPOSED_CONV.search(name):
        return shape[0]
    return int(np.prod(shape[1:])) if len(shape) > 1 else 1


def random_value(name: str, shape: tuple, key: mx.array) -> mx.array:
    """One parameter's random float32 value, scaled so activations stay O(1) through every network."""
    leaf = name.rsplit(".", 1)[-1]
    normal = mx.random.normal(shape, key=key)
    if leaf == "A_log":
        return mx.log(mx.random.uniform(1, 16, shape, key=key))
    if leaf == "D":
        return 1 + 0.1 * normal
    if leaf == "dt_bias":
        dt = mx.exp(mx.random.uniform(math.log(1e-3), math.log(1e-1), shape, key=key))
        return dt + mx.log(-mx.expm1(-dt))  # softplus^-1
    if name.endswith(("bos_emb", "null_emb")) or "audio_prompt_latents" in name:
        return normal
    if len(shape) <= 1 or leaf in ("pos_bias_u", "pos_bias_v"):
        base = 1.0 if "norm" in name and leaf == "weight" and not name.startswith(OFFSET_NORMS) else 0.0
        return base + 0.1 * normal
    if re.search(r"(embed_tokens|cont_emb|special_emb|prediction\.embed)\.weight$", name):
        return normal
    if "prvq.mus_list" in name:
        return normal / math.sqrt(shape[-1])
    return normal / math.sqrt(fan_in(name, shape))


def is_torch_conv(name: str, ndim: int) -> bool:
    return ndim >= 3 and ("conv" in name or CODEC_LAYER_CONV.search(name) is not None)


def to_torch_layout(name: str, w: mx.array) -> mx.array:
    """Inverse of the loader's shape-gated fitting: our layout -> the published PyTorch one."""
    if w.ndim == 4 and is_torch_conv(name, 4):
        return w.transpose(0, 3, 1, 2)
    if w.ndim == 3 and is_torch_conv(name, 3):
        return w.swapaxes(1, 2)
    if w.ndim == 2 and POINTWISE.search(name):
        return w[..., None]
    return w


def random_tensors(model: VoiceChatModel, tokenizer: TextTokenizer, cfg, seed: int) -> Iterator[tuple[str, mx.array]]:
    """(name, evaluated float32 tensor in our layout) for every parameter, one at a time (a full-size model never
    sits in memory in float32), then the buffers the model derives (``model.DERIVED_KEYS``), as the model derives
    them from those values; integer buffers as int64, like NeMo's files."""
    built = dict(tree_flatten(model.parameters()))
    codec = {}
    for i, name in enumerate(sorted(built)):
        if DERIVED.search(name):
            continue
        value = random_value(name, tuple(built[name].shape), mx.random.key(seed * 1_000_003 + i))
        mx.eval(value)
        if name.startswith("tts_model.audio_codec."):
            codec[name[len("tts_model.audio_codec."):]] = value
        yield name, value
    model.tts_model.audio_codec.update(tree_unflatten(list(codec.items())))  # rvq_embs and silence codes come from it
    derived = sorted(name for name in built if DERIVED.search(name))
    derive_missing(model, cfg, tokenizer, set(derived))
    values = dict(tree_flatten(model.parameters()))
    for name in derived:
        value = values[name]
        yield name, value if mx.issubdtype(value.dtype, mx.floating) else value.astype(mx.int64)


# ----------------------------------------------------------------------------------------------------------------
# layouts on disk
# ----------------------------------------------------------------------------------------------------------------
LLM_QUANTIZED = re.compile(r"^stt_model\.(llm\.layers\.\d+\.mixer\.(in_proj|out_proj|q_proj|k_proj|v_proj|o_proj"
                           r"|up_proj|down_proj)|embed_tokens|lm_head|function_head)\.weight$")


def mlx_4bit(name: str, w: mx.array, group_size: int = 64, bits: int = 4) -> dict[str, mx.array]:
    """The -mlx-4bit recipe (seed 004) for one tensor: LLM projections, embedding and vocabulary heads quantized (MLX
    affine, bf16 scales), other floats bf16 except the rank-1 Mamba tensors, integers unchanged."""
    if LLM_QUANTIZED.match(name) and w.shape[-1] % group_size == 0:
        q, s, b = mx.quantize(w, group_size=group_size, bits=bits)
        base = name[: -len(".weight")]
        return {name: q, base + ".scales": s.astype(mx.bfloat16), base + ".biases": b.astype(mx.bfloat16)}
    if mx.issubdtype(w.dtype, mx.floating) and not name.endswith(("A_log", ".D", "dt_bias")):
        return {name: w.astype(mx.bfloat16)}
    return {name: w}


def save_shards(weights: dict[str, mx.array], directory: Path, shards: int) -> None:
    names = sorted(weights)
    per = math.ceil(len(names) / shards)
    weight_map = {}
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        mx.save_safetensors(str(directory / fname), {k: weights[k] for k in part}, metadata={"format": "mlx"})
        weight_map.update({k: fname for k in part})
    index = {"metadata": {}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


def prepare_directory(directory: Path) -> None:
    """Make ``directory`` an empty folder marked as ours. An existing one is emptied only if it is empty already or
    holds our marker (a checkpoint written here before); anything else is the user's and is refused."""
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{directory} is a file, not a folder; choose a folder for the checkpoint")
    if directory.is_dir() and any(directory.iterdir()):
        if not (directory / MARKER).is_file():
            raise FileExistsError(f"{directory} is not empty and holds no random checkpoint; choose a new or empty "
                                  "folder (it is never overwritten)")
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("Written by voicechat.random_checkpoint; it may replace this folder.\n")


def write_configs(directory: Path, d: dict) -> tuple[dict, dict, TextTokenizer, object]:
    """The LLM's config and the tokenizer of dims ``d`` written into ``directory`` (an empty folder): -> (the LLM's
    config, the nested config, the tokenizer, the parsed config: what the shapes of a model of these dims follow)."""
    (directory / "llm").mkdir()
    llm = llm_config(d)
    (directory / "llm" / "config.json").write_text(json.dumps(llm, indent=1))
    write_tokenizer(directory, d["vocab"])
    nested = nested_config(d, "llm")
    tokenizer = TextTokenizer(directory / "tokenizer.json")
    return llm, nested, tokenizer, with_token_ids(parse_nested(nested, llm), tokenizer.token_to_id,
                                                  tokenizer.id_to_token)


def write_checkpoint(directory, layout: str = "nested", dims: str = "tiny", seed: int = 0) -> Path:
    """Write a random-weight checkpoint that ``voicechat.load`` accepts into ``directory`` (new, empty, or one this
    function wrote before); returns it."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}")
    d = DIMS[dims]
    directory = Path(directory)
    prepare_directory(directory)
    llm, nested, tokenizer, cfg = write_configs(directory, d)
    model = VoiceChatModel(cfg, tokenizer.vocab_size, function_head=True, speakers=("Aria",))
    weights = {}
    for name, w in random_tensors(model, tokenizer, cfg, seed):
        if dims != "tiny" and name.endswith("rnnt_joint.joint_net.2.bias"):
            # random joints emit up to 10 symbols per frame; real speech is mostly blank (the peer baseline's recipe)
            w = w.at[-1].add(30.0)
        w = to_torch_layout(name, w)
        part = {name: w} if layout == "nested" else mlx_4bit(name, w)
        mx.eval(*part.values())
        weights.update(part)
    weights["tts_model._control_codes"] = mx.array(cfg.tts.control_codes, dtype=mx.int64)
    (directory / "rnnt_tokenizer").mkdir()
    vocabulary = json.dumps(rnnt_vocabulary(d["rnnt_vocab"]), ensure_ascii=False)
    (directory / "rnnt_tokenizer" / "vocab.json").write_text(vocabulary)
    if layout == "nested":
        mx.save_safetensors(str(directory / "model.safetensors"), weights)
        (directory / "config.json").write_text(json.dumps(nested, indent=1))
        return directory
    nested["mlx_conversion"] = {"quantization": {"group_size": 64, "bits": 4,
                                                 "modules": {"stt_model.embed_tokens": {"group_size": 64, "bits": 4}}}}
    save_shards(weights, directory, shards=2)
    config = nested if layout == "mlx-4bit" else runtime_config(nested, llm)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory


def write_tiny_checkpoint(directory, seed: int = 0) -> Path:
    """The demo app's model: tiny, random, in the release's nested layout."""
    return write_checkpoint(directory, "nested", "tiny", seed)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m voicechat.random_checkpoint",
                                description="Write a random-weight NemotronLabs-VoiceChat checkpoint.")
    p.add_argument("directory", help="a new or empty folder (or one this command wrote before)")
    p.add_argument("--layout", choices=LAYOUTS, default="nested")
    p.add_argument("--dims", choices=sorted(DIMS), default="tiny")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        print(write_checkpoint(a.directory, a.layout, a.dims, a.seed))
    except FileExistsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
