"""mlx-audio's converted folders, the fourth checkpoint layout, mapped to what voicechat's loader reads.

mlx-audio 0.6.2's converter (``python -m mlx_audio.sts.models.nemotron_voicechat.convert --source NEMO_DIR --output
DIR [-q]``) writes two files. Facts from its ``convert.py``, ``config.py``, ``model.py`` and the codec's ``sanitize``:

* ``config.json``: the source's nested NVIDIA config as it was, plus ``model_type: nemotron_voicechat``, an
  ``mlx_audio`` block (``llm_config``: the Nemotron-H geometry, ``char_vocab_size``, ``prepared_weights: true``) and,
  with ``-q``, ``quantization: {group_size, bits, mode}``. Keys the config leaves out take mlx-audio's defaults, which
  are the release's values, not NeMo's code defaults (``MLX_AUDIO_DEFAULTS``).
* ``model.safetensors``: the source tensors in mlx-audio's module layout (``sanitize_weights``): 3-D ``.weight``
  tensors of the speech encoder, the LLM and the codec transposed to channels-last, except the codec decoder's
  upsampling ConvTranspose1d [in, out, k] -> [out, k, in]; 4-D encoder convs [o, i, h, w] -> [o, h, w, i]; the RNNT
  LSTM as ``lstm.{n}.Wx`` / ``Wh`` / ``bias`` (the two biases summed); ``_control_codes`` -> ``control_codes``;
  ``prvq._variance_list`` -> ``prvq.variance_list``; ``audio_prompt_projection_W`` dropped. With ``-q`` the LLM's 2-D
  weights, the embedding and both vocabulary heads are pre-quantized (``weight`` uint32, ``scales``, ``biases``).

The random full-size checkpoints of the peer harness (``peer-harness/h200/gen_ckpt.py``) have the same layout.

:func:`nested_config` and :func:`nemo_weights` undo all of that, so the rest of voicechat sees an NVIDIA nested
config and NVIDIA's tensor names in PyTorch layouts. What mlx-audio recomputes at load (the mel filterbank and
window, the char-encoder flag tables) is dropped here and derived by voicechat. The speaker is always the cached
latent, as in mlx-audio; the dropped frozen projection comes back as the identity, so that a speaker WAV is embedded
as NeMo does without one.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import mlx.core as mx

# mlx-audio's own values for keys its converted config leaves out (its ModelConfig.from_dict; ConformerArgs,
# PreprocessArgs and the codec config defaults). Filled in where absent, so that voicechat runs what mlx-audio runs.
MLX_AUDIO_DEFAULTS = {
    "inference_speaker_name": "Aria",
    "stt": {"model": {
        "duplex_function_channel_weight": 2.0,
        "use_function_head": True,
        "perception": {
            "preprocessor": {"features": 128, "n_fft": 512, "window_size": 0.025, "window_stride": 0.01,
                             "window": "hann", "preemph": 0.97, "normalize": "NA", "log_zero_guard_value": 2.0**-24,
                             "pad_to": 0, "pad_value": 0.0},
            "encoder": {"feat_in": 128, "n_layers": 24, "d_model": 1024, "n_heads": 8, "ff_expansion_factor": 4,
                        "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 256,
                        "conv_kernel_size": 9, "causal_downsampling": True, "conv_context_size": "causal",
                        "conv_norm_type": "layer_norm", "self_attention_model": "rel_pos",
                        "att_context_style": "chunked_limited", "att_context_size": [70, 0], "pos_emb_max_len": 5000,
                        "use_bias": False, "xscaling": False},
        },
    }},
    "speech_generation": {"model": {
        "inference_guidance_scale": 0.2,
        "inference_top_p_or_k": 0.95,
        "inference_noise_scale": 0.001,
        "codec_config": {"latent_size": 512, "base_hidden_size": 384, "channel_mult": [1, 2, 4], "rates": [7, 7, 9],
                         "num_blocks": 3, "kernel_size": 7, "n_fft": 16, "hop_length": 4, "codebook_size": 1024,
                         "num_quantizers": 31},
        "tts_config": {"backbone_config": {"sliding_window": 7500}},
    }},
}
RNNT_DEFAULTS = {  # mlx-audio's PredictArgs / JointArgs defaults (the release's RNNT)
    "decoder_config": {"prednet": {"pred_hidden": 640, "pred_rnn_layers": 2}, "vocab_size": 1024},
    "joint_config": {"jointnet": {"joint_hidden": 640, "pred_hidden": 640}, "num_classes": 1024},
}
# Tensors mlx-audio ignores or rebuilds at load (its log-mel computes its own window and filterbank; set_tokenizer
# fills the flag tables): voicechat derives them too.
RECOMPUTED = re.compile(r"^stt_model\.perception\.preprocessor\.featurizer\.(window|fb)$|^tts_model\.tts_model\."
                        r"embed_subword\.(subword_flag_emb|bos_eos_emb)\.(is_continuation|special_flags|pad_tensor)$")
LSTM = re.compile(r"^(stt_model\.rnnt_decoder\..*\.dec_rnn\.lstm)\.(\d+)\.(Wx|Wh|bias)$")
CODEC = "tts_model.audio_codec."
JOINT_LINEAR = "stt_model.rnnt_joint.joint_net.2."  # mlx-audio's joint is always [activation, identity, Linear]
PROJECTION = "tts_model.tts_model.audio_prompt_projection_W"


def is_mlx_audio(cfg) -> bool:
    """A config.json dict that mlx-audio's converter wrote (its ``mlx_audio.prepared_weights`` mark)."""
    block = cfg.get("mlx_audio") if isinstance(cfg, dict) else None
    return isinstance(block, dict) and bool(block.get("prepared_weights"))


def _fill(d: dict, defaults: dict) -> None:
    """Set every key of ``defaults`` that ``d`` lacks (or has as null), recursively."""
    for key, value in defaults.items():
        if isinstance(value, dict):
            if not isinstance(d.get(key), dict):
                d[key] = {}
            _fill(d[key], value)
        elif d.get(key) is None:
            d[key] = copy.deepcopy(value)


def _rnnt_vocabulary(cfg: dict) -> list:
    return list(((cfg.get("_rnnt_merge_info") or {}).get("joint_config") or {}).get("vocabulary") or [])


def nested_config(cfg: dict) -> tuple[dict, dict]:
    """mlx-audio's config.json -> (NVIDIA's nested config with mlx-audio's defaults written out, the LLM config)."""
    nested = {k: copy.deepcopy(v) for k, v in cfg.items() if k not in ("model_type", "mlx_audio", "quantization",
                                                                      "quantization_config")}
    _fill(nested.setdefault("model", {}), MLX_AUDIO_DEFAULTS)
    stt = nested["model"]["stt"]["model"]
    tts = nested["model"]["speech_generation"]["model"]["tts_config"]
    # mlx-audio always puts the speaker's cached latent before the BOS row (session._tts_prompt)
    tts["use_audio_prompt_frozen_projection"] = True
    if _rnnt_vocabulary(cfg):
        merge = nested["_rnnt_merge_info"]
        _fill(merge, RNNT_DEFAULTS)
        merge["joint_config"]["jointnet"].setdefault("encoder_hidden", stt["perception"]["encoder"]["d_model"])
        stt["rnnt_max_symbols_per_step"] = stt.get("max_symbols", 10)  # the key mlx-audio reads
    else:  # without a vocabulary mlx-audio never runs its RNNT (session._rnnt_decode)
        nested.pop("_rnnt_merge_info", None)
    quantization = cfg.get("quantization") or cfg.get("quantization_config")
    if quantization:
        nested["mlx_conversion"] = {"quantization": quantization}
    llm = dict(cfg["mlx_audio"]["llm_config"])
    llm.setdefault("time_step_limit", [0.0, math.inf])  # mlx-audio's NemotronH default (the converter drops inf)
    return nested, llm


def _stage_starts(cfg: dict) -> set[int]:
    """Indices of the codec decoder's upsampling ConvTranspose1d layers: the first layer of each stage."""
    codec = cfg["model"]["speech_generation"]["model"].get("codec_config", {})
    width = int(codec.get("num_blocks", 3)) + 1
    return set(range(0, width * len(codec.get("rates", (7, 7, 9))), width))


def _codec_weight(key: str, w: mx.array, stage_starts: set[int]) -> mx.array:
    parts = key[len(CODEC):].split(".")
    if parts[0] == "decoder" and int(parts[2]) in stage_starts and "dwconv" not in parts:
        return w.transpose(2, 0, 1)  # ConvTranspose1d: mlx-audio [out, k, in] -> PyTorch [in, out, k]
    return w.swapaxes(1, 2)


def _joint_linear(cfg: dict) -> str:
    """NeMo's name of the RNNT joint's output Linear: index 2 behind a Dropout (dropout > 0), else index 1."""
    jointnet = cfg["_rnnt_merge_info"]["joint_config"].get("jointnet", {})
    return f"stt_model.rnnt_joint.joint_net.{2 if float(jointnet.get('dropout') or 0.0) > 0 else 1}."


def _nemo_tensors(key: str, w: mx.array, stage_starts: set[int]) -> list[tuple[str, mx.array]]:
    """One mlx-audio tensor -> its NVIDIA name(s) and PyTorch layout (the RNNT joint is renamed by the caller)."""
    if m := LSTM.match(key):
        stem, n, kind = m.groups()
        if kind == "bias":  # only the sum of torch's two biases enters the gates
            return [(f"{stem}.bias_ih_l{n}", w), (f"{stem}.bias_hh_l{n}", mx.zeros_like(w))]
        return [(f"{stem}.{'weight_ih' if kind == 'Wx' else 'weight_hh'}_l{n}", w)]
    if key == "tts_model.control_codes":
        return [("tts_model._control_codes", w)]
    if key.startswith(CODEC):
        key = key.replace(".prvq.variance_list.", ".prvq._variance_list.")
        return [(key, _codec_weight(key, w, stage_starts) if w.ndim == 3 and key.endswith(".weight") else w)]
    if key.startswith("stt_model.perception.") and w.ndim == 4:
        return [(key, w.transpose(0, 3, 1, 2))]
    if key.startswith(("stt_model.perception.", "stt_model.llm.")) and w.ndim == 3 and key.endswith(".weight"):
        return [(key, w.swapaxes(1, 2))]
    return [(key, w)]


def nemo_weights(weights: dict, cfg: dict) -> dict:
    """mlx-audio's tensors -> NVIDIA's names and PyTorch layouts (``cfg``: the folder's config.json dict)."""
    stage_starts = _stage_starts(cfg)
    joint = _joint_linear(cfg) if _rnnt_vocabulary(cfg) else None
    out = {}
    for key, w in weights.items():
        if RECOMPUTED.search(key) or (key.startswith("stt_model.rnnt_") and joint is None):
            continue
        if key.startswith(JOINT_LINEAR):
            key = joint + key[len(JOINT_LINEAR):]
        out.update(_nemo_tensors(key, w, stage_starts))
    if PROJECTION not in out:  # dropped by the converter: used only for a speaker WAV, see the module docstring
        width = out["tts_model.tts_model.bos_emb"].shape[0]
        out[PROJECTION] = mx.eye(width, dtype=out["tts_model.tts_model.bos_emb"].dtype)
    return out


def as_nemo_layout(directory: Path, weights: dict) -> dict:
    """The weights of a checkpoint folder in NVIDIA's layout: mapped if mlx-audio's converter wrote the folder."""
    config = Path(directory) / "config.json"
    cfg = json.loads(config.read_text()) if config.is_file() else None
    return nemo_weights(weights, cfg) if is_mlx_audio(cfg) else weights
