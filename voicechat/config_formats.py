"""The parsers of every published config.json format into the dataclasses of ``config.py``.

This module only parses dicts; reading files is ``checkpoint.py``'s job. Two formats are accepted
(docs/checkpoints.md §2):

* nested: NVIDIA's release config (the resolved training YAML: ``model.stt.model``, ``model.speech_generation``,
  ``data``, ``_rnnt_merge_info``), also used by the ``-mlx-*`` family with an ``mlx_conversion.quantization`` block
  and by the NeMo harness. It does not carry the LLM geometry: ``pretrained_llm`` names a local directory (whose
  config.json the caller reads and passes in) or the Nano-9B-v2 Hub id (public geometry below).
* runtime: mlx-vlm's ``model_type: nemotron_voicechat`` config (``text_config``, ``audio_config``, ``tts_config``,
  ``codec_config``, ``quantization``).
* mlx-audio's converted folders: a nested config inside mlx-audio's own block (``voicechat/layouts.py`` maps them).

The parsers pass only the keys a config has (:func:`_present`), so each field's one default is its dataclass's. The
runtime format's own defaults for the few keys where mlx-vlm differs from NeMo are in ``RUNTIME_DEFAULTS``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Optional, Union

from . import layouts
from .config import (NANO_9B_V2, AudioConfig, CharEncoderConfig, CodecConfig, EncoderConfig, GemmaConfig, LLMConfig,
                     MoGConfig, ModelConfig, PreprocessorConfig, QuantSpec, QuantizationConfig, RNNTConfig, TTSConfig)
from .errors import ConfigError

# Public geometry of nvidia/NVIDIA-Nemotron-Nano-9B-v2 (docs/model.md §2.4, TRT _THINKER_CONFIG); used when the nested
# config names the Hub id and no local copy of its config.json is at hand.
NANO_9B_V2_CONFIG = {
    "model_type": "nemotron_h",
    "vocab_size": 131072,
    "hidden_size": 4480,
    "intermediate_size": 15680,
    "num_hidden_layers": 56,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 80,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "chunk_size": 128,
    "layer_norm_epsilon": 1e-5,
    "use_conv_bias": True,
    "mamba_proj_bias": False,
    "attention_bias": False,
    "mlp_bias": False,
    "time_step_limit": [0.0, math.inf],
}


# Where mlx-vlm's runtime format (its config classes, docs/checkpoints.md §3) means something else than NeMo for a key
# that its config.json leaves out. It carries token ids instead of token strings.
RUNTIME_DEFAULTS = {
    "tts": dict(guidance_scale=0.2, top_p=0.95, top_k=None, noise_scale=0.001, use_audio_prompt_frozen_projection=True),
    "model": dict(bos_token=None, eos_token=None, pad_token=None, bos_id=1, eos_id=2, pad_id=12,
                  function_channel_weight=2.0, speaker_name="Aria"),
}


# ----------------------------------------------------------------------------------------------------------------
# small readers
# ----------------------------------------------------------------------------------------------------------------
def _get(d: dict, path: str, default: Any = ConfigError) -> Any:
    """``d['a']['b']`` for path 'a.b'; a missing key is an error naming the path unless a default is given."""
    cur: Any = d
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur or cur[part] is None:
            if default is ConfigError:
                raise ConfigError(f"config.json has no '{path}'")
            return default
        cur = cur[part]
    return cur


def _first(d: dict, *keys: str) -> Any:
    """The value of the first of ``keys`` that ``d`` has (not null); an error naming the first key if none."""
    for key in keys:
        if d.get(key) is not None:
            return d[key]
    raise ConfigError(f"config.json has no '{keys[0]}'")


def _present(sources: Union[dict, tuple], **fields: Any) -> dict:
    """The dataclass fields that a config dict (or the first of several that has the key) sets. ``name=convert``
    reads the key ``name``; ``name=(keys, convert)`` the first of ``keys`` (a name or a tuple of names). A key that
    is absent or null is left out, so that the dataclass default applies: every field has one default, its own."""
    sources = (sources,) if isinstance(sources, dict) else sources
    out = {}
    for name, spec in fields.items():
        keys, convert = spec if isinstance(spec, tuple) else (name, spec)
        keys = (keys,) if isinstance(keys, str) else keys
        value = next((d[k] for d in sources for k in keys if d.get(k) is not None), None)
        if value is not None:
            out[name] = convert(value)
    return out


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


# ----------------------------------------------------------------------------------------------------------------
# LLM (Nemotron-H) config, from a HF nemotron_h config.json dict or the runtime text_config
# ----------------------------------------------------------------------------------------------------------------
def _time_step_limit(limit) -> tuple[float, float]:
    lo, hi = (float(v) for v in limit)
    return lo, (hi if hi < 1e30 else math.inf)  # mlx-vlm writes the infinite bound as 1e30


def parse_llm(d: dict) -> LLMConfig:
    pattern = d.get("hybrid_override_pattern")
    if isinstance(pattern, list):
        pattern = "".join(pattern)
    _require(isinstance(pattern, str) and pattern != "", "LLM config has no 'hybrid_override_pattern'")
    _require(set(pattern) <= set("M*-"), f"LLM pattern {pattern!r} has layer types other than M, * and -")
    n = d.get("num_hidden_layers")
    _require(n in (None, len(pattern)), f"LLM num_hidden_layers {n} != pattern length {len(pattern)}")
    optional = _present(d, num_key_value_heads=int, head_dim=int, conv_kernel=int, chunk_size=int,
                        layer_norm_epsilon=(("layer_norm_epsilon", "rms_norm_eps"), float), use_conv_bias=bool,
                        mamba_proj_bias=bool, attention_bias=bool, mlp_bias=bool, time_step_limit=_time_step_limit)
    if "time_step_limit" not in optional and d.get("time_step_min") is not None:
        # transformers' built-in Nemotron-H clamps at time_step_min when there is no limit (issue 4, docs/model.md §2.4)
        optional["time_step_limit"] = (float(d["time_step_min"]), math.inf)
    return LLMConfig(
        vocab_size=int(_get(d, "vocab_size")),
        hidden_size=int(_get(d, "hidden_size")),
        pattern=pattern,
        num_attention_heads=int(_get(d, "num_attention_heads")),
        intermediate_size=int(_get(d, "intermediate_size")),
        mamba_num_heads=int(_get(d, "mamba_num_heads")),
        mamba_head_dim=int(_get(d, "mamba_head_dim")),
        ssm_state_size=int(_first(d, "ssm_state_size", "mamba_state_dim")),
        n_groups=int(_first(d, "n_groups", "mamba_num_groups")),
        **optional,
    )


def nested_pretrained_llm(cfg: dict) -> Optional[str]:
    """The LLM a nested config names (``model.stt.model.pretrained_llm``); None for other formats."""
    name = _get(cfg, "model.stt.model.pretrained_llm", None) if isinstance(cfg, dict) else None
    return None if name is None else str(name)


def public_llm_config(pretrained_llm: str) -> dict:
    """The geometry of the LLM a nested config names when no local copy of its config.json was given: only
    Nano-9B-v2's is public and known here."""
    if pretrained_llm.rstrip("/") == NANO_9B_V2:
        return dict(NANO_9B_V2_CONFIG)
    raise ConfigError(
        f"the config names pretrained_llm={pretrained_llm!r}, which is neither {NANO_9B_V2} nor a directory with a "
        "config.json (absolute, or relative to the checkpoint, or a folder of that name inside it)"
    )


# ----------------------------------------------------------------------------------------------------------------
# speech input path
# ----------------------------------------------------------------------------------------------------------------
def _log_zero_guard(value) -> float:
    if isinstance(value, str):  # NeMo also accepts "tiny" / "eps" (float32 limits)
        import numpy as np

        return float({"tiny": np.finfo(np.float32).tiny, "eps": np.finfo(np.float32).eps}[value])
    return float(value)


def parse_preprocessor(d: dict) -> PreprocessorConfig:
    # Only NeMo's inference path of this model is implemented; other settings would silently change the features.
    _require(str(d.get("normalize", "NA")) in ("NA", "None"),
             f"preprocessor normalize={d.get('normalize')!r} is not supported (only 'NA')")
    _require(d.get("log", True) is True, "preprocessor log=false is not supported")
    _require(d.get("window", "hann") == "hann",
             f"preprocessor window={d.get('window')!r} is not supported (only 'hann')")
    _require(int(d.get("frame_splicing", 1)) == 1, "preprocessor frame_splicing != 1 is not supported")
    _require(not d.get("exact_pad", False), "preprocessor exact_pad=true is not supported")
    _require(d.get("log_zero_guard_type", "add") == "add", "preprocessor log_zero_guard_type must be 'add'")
    _require(d.get("mel_norm", "slaney") == "slaney", "preprocessor mel_norm must be 'slaney'")
    fields = _present(d, sample_rate=int, features=int, n_fft=int, window_size=float, window_stride=float,
                      preemph=float, mag_power=float, log_zero_guard_value=_log_zero_guard, lowfreq=float,
                      highfreq=float, pad_to=int, pad_value=float)
    if "preemph" in d and d["preemph"] is None:  # NeMo: null = no pre-emphasis
        fields["preemph"] = 0.0
    return PreprocessorConfig(**fields)


def _context_size(ctx) -> tuple[int, int]:
    if ctx and isinstance(ctx[0], (list, tuple)):  # several contexts: NeMo uses the first at inference
        ctx = ctx[0]
    return int(ctx[0]), int(ctx[1])


def parse_encoder(d: dict) -> EncoderConfig:
    _require(d.get("subsampling", "striding") == "dw_striding",
             f"encoder subsampling={d.get('subsampling')!r} is not supported (only dw_striding)")
    _require(d.get("self_attention_model", "rel_pos") == "rel_pos", "only rel_pos self-attention is supported")
    cfg = EncoderConfig(
        feat_in=int(_get(d, "feat_in")),
        n_layers=int(_get(d, "n_layers")),
        d_model=int(_get(d, "d_model")),
        **_present(d, n_heads=int, ff_expansion_factor=int, subsampling_factor=int, subsampling_conv_channels=int,
                   conv_kernel_size=int, conv_norm_type=str, att_context_size=_context_size, att_context_style=str,
                   xscaling=bool, use_bias=bool, untie_biases=bool, pos_emb_max_len=int, causal_downsampling=bool),
    )
    _require(d.get("conv_context_size") in ("causal", [8, 0], (8, 0)) or cfg.conv_kernel_size == 1,
             f"encoder conv_context_size={d.get('conv_context_size')!r} is not supported (only 'causal')")
    _require(cfg.conv_norm_type in ("layer_norm", "batch_norm"),
             f"encoder conv_norm_type={cfg.conv_norm_type!r} is not supported")
    return cfg


def parse_rnnt(decoder: dict, joint: dict, vocabulary: list, max_symbols: Optional[int] = None) -> RNNTConfig:
    """NeMo's RNNTDecoder / RNNTJoint configs; ``max_symbols``: None for the dataclass default."""
    prednet = decoder.get("prednet", decoder)
    jointnet = joint.get("jointnet", joint)
    vocab_size = int(decoder.get("vocab_size", joint.get("num_classes", len(vocabulary))))
    _require(int(joint.get("num_classes", vocab_size)) == vocab_size,
             f"RNNT joint num_classes {joint.get('num_classes')} != decoder vocab_size {vocab_size}")
    return RNNTConfig(
        vocab_size=vocab_size,
        pred_hidden=int(_get(prednet, "pred_hidden")),
        encoder_hidden=int(_get(jointnet, "encoder_hidden")),
        joint_hidden=int(_get(jointnet, "joint_hidden")),
        vocabulary=tuple(vocabulary),
        **_present(prednet, pred_rnn_layers=int),
        **_present(jointnet, joint_dropout=("dropout", lambda p: float(p) > 0.0)),
        **({} if max_symbols is None else {"max_symbols": int(max_symbols)}),
    )


def parse_rnnt_vocab(value: Any, source: str) -> list[str]:
    """An RNNT vocabulary: a list of pieces, or a piece -> id map with contiguous ids (docs/model.md §4.1)."""
    if isinstance(value, list):
        return [str(p) for p in value]
    if isinstance(value, dict):
        ids = sorted(value.values())
        _require(ids == list(range(len(ids))), f"{source}: piece ids are not contiguous 0..{len(ids) - 1}")
        by_id = {i: p for p, i in value.items()}
        return [by_id[i] for i in range(len(ids))]
    raise ConfigError(f"{source} is neither a list of pieces nor a piece -> id map")


# ----------------------------------------------------------------------------------------------------------------
# speech output path
# ----------------------------------------------------------------------------------------------------------------
def gemma_layer_types(n_layers: int, pattern: int) -> tuple[str, ...]:
    """Gemma-3 rule: layer i is global iff (i + 1) % pattern == 0 (docs/model.md §2.5.2)."""
    return tuple("full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers))


def parse_gemma(d: dict) -> GemmaConfig:
    n = int(_get(d, "num_hidden_layers"))
    types = d.get("layer_types") or gemma_layer_types(n, int(d.get("sliding_window_pattern", 6)))  # Gemma-3's 6
    _require(len(types) == n, f"TTS backbone layer_types has {len(types)} entries for {n} layers")
    _require(d.get("rope_scaling") is None, "TTS backbone rope_scaling is not supported")
    return GemmaConfig(
        hidden_size=int(_get(d, "hidden_size")),
        intermediate_size=int(_get(d, "intermediate_size")),
        num_hidden_layers=n,
        num_attention_heads=int(_get(d, "num_attention_heads")),
        layer_types=tuple(types),
        **_present(d, num_key_value_heads=int, head_dim=int, sliding_window=int, rms_norm_eps=float,
                   query_pre_attn_scalar=float, rope_global_base=(("rope_theta", "rope_global_base_freq"), float),
                   rope_local_base=("rope_local_base_freq", float)),
    )


def parse_char_encoder(d: dict) -> CharEncoderConfig:
    return CharEncoderConfig(
        hidden_size=int(_get(d, "hidden_size")),
        intermediate_size=int(_get(d, "intermediate_size")),
        num_attention_heads=int(_get(d, "num_attention_heads")),
        **_present(d, num_hidden_layers=int, num_key_value_heads=int, head_dim=int, rms_norm_eps=float,
                   query_pre_attn_scalar=float, rope_base=("rope_theta", float), attn_logit_softcapping=float),
    )


def parse_mog(d: dict) -> MoGConfig:
    return MoGConfig(
        intermediate_size=int(_get(d, "intermediate_size")),
        num_layers=int(_get(d, "num_layers")),
        low_rank=int(_get(d, "low_rank")),
        num_predictions=int(_get(d, "num_predictions")),
        **_present(d, min_log_std=float, eps=float),
    )


def tts_structure(tts: dict, backbone: dict, char_encoder: dict, mog: dict) -> dict:
    """The EAR-TTS architecture fields both formats share."""
    return dict(
        backbone=parse_gemma(backbone),
        char_encoder=parse_char_encoder(char_encoder),
        mog=parse_mog(mog),
        latent_size=int(_get(tts, "latent_size")),
        codebook_size=int(_get(tts, "codebook_size")),
        num_quantizers=int(_get(tts, "num_quantizers")),
        **_present(tts, exponent=float, use_gated_fusion=("use_gated_fusion_for_text_audio", bool),
                   use_subword_flag_emb=bool, use_bos_eos_emb=bool, use_audio_prompt_frozen_projection=bool),
    )


def split_top_p_or_k(value: Any) -> tuple[Optional[float], Optional[int]]:
    """NeMo's ``inference_top_p_or_k``: an int is top-k, a float top-p (docs/model.md §2.5.7)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"inference_top_p_or_k={value!r} is neither an int (top-k) nor a float (top-p)")
    return (None, value) if isinstance(value, int) else (float(value), None)


def _top_p_or_k(d: dict, *keys: str) -> dict:
    """``top_p`` and ``top_k`` from the first of ``keys`` that ``d`` has; {} when it has none."""
    value = next((d[k] for k in keys if d.get(k) is not None), None)
    return {} if value is None else dict(zip(("top_p", "top_k"), split_top_p_or_k(value)))


# ----------------------------------------------------------------------------------------------------------------
# quantization
# ----------------------------------------------------------------------------------------------------------------
def parse_quantization(d: Optional[dict]) -> Optional[QuantizationConfig]:
    """Runtime form ``{group_size, bits, mode?, <path>: {...} | false}`` or nested form ``{..., modules: {...}}``."""
    if not d:
        return None
    spec_keys = dict(group_size=int, bits=int, mode=str)
    default = QuantSpec(**_present(d, **spec_keys))
    entries = dict(d.get("modules", {}))
    entries.update({k: v for k, v in d.items() if k not in ("group_size", "bits", "mode", "modules")})
    modules = {}
    for path, spec in entries.items():
        if spec is False or spec is None:
            modules[path] = None
        elif isinstance(spec, dict):
            modules[path] = replace(default, **_present(spec, **spec_keys))
        else:
            raise ConfigError(f"quantization entry {path!r} is {spec!r}, expected an object or false")
    for spec in [default, *[s for s in modules.values() if s]]:
        _require(spec.mode == "affine", f"quantization mode {spec.mode!r} is not supported (only affine)")
        _require(spec.bits in (2, 3, 4, 5, 6, 8), f"quantization bits={spec.bits} is not supported")
    return QuantizationConfig(default, modules)


# ----------------------------------------------------------------------------------------------------------------
# the two formats
# ----------------------------------------------------------------------------------------------------------------
def parse_nested(cfg: dict, llm_config: Optional[dict] = None, rnnt_vocab: Optional[list] = None) -> ModelConfig:
    """NVIDIA's nested config (release, ``-mlx-*`` family, NeMo harness). ``llm_config``: the config.json dict of
    the LLM that ``pretrained_llm`` names (None: the public Nano-9B-v2 geometry, if it names that)."""
    stt = _get(cfg, "model.stt.model")
    speech = _get(cfg, "model.speech_generation.model")
    speech_data = _get(cfg, "model.speech_generation.data", {})
    data = cfg.get("data", {})
    perception = _get(stt, "perception")
    _require(not stt.get("predict_user_text", False), "predict_user_text=true (ASR head) is not supported")
    pretrained_llm = str(_get(stt, "pretrained_llm"))
    llm = parse_llm(llm_config if llm_config is not None else public_llm_config(pretrained_llm))
    output_dim = int(perception.get("output_dim", llm.hidden_size))
    _require(output_dim == llm.hidden_size, f"perception output_dim {output_dim} != LLM hidden_size {llm.hidden_size}")

    rnnt = None
    merge = cfg.get("_rnnt_merge_info")
    if merge:
        vocab = list(_get(merge, "joint_config.vocabulary", []) or rnnt_vocab or [])
        rnnt = parse_rnnt(_get(merge, "decoder_config"), _get(merge, "joint_config"), vocab,
                          stt.get("rnnt_max_symbols_per_step"))

    tts = _get(speech, "tts_config")
    _require(tts.get("context_hidden_size") is None, "tts_config.context_hidden_size is not supported (must be null)")
    _require(not tts.get("random_target_masking", False), "tts_config.random_target_masking is not supported")
    model = cfg["model"]
    return ModelConfig(
        llm=llm,
        audio=AudioConfig(parse_preprocessor(_get(perception, "preprocessor")),
                          parse_encoder(_get(perception, "encoder")), output_dim, rnnt),
        tts=TTSConfig(
            **tts_structure(tts, _get(tts, "backbone_config"), _get(tts, "cas_config.backbone_config.encoder"),
                            _get(tts, "mog_head_config")),
            **_present(speech, guidance_scale=("inference_guidance_scale", float),
                       noise_scale=("inference_noise_scale", float),
                       force_silence_on_eos=("inference_force_speech_silence_on_eos", bool)),
            **_top_p_or_k(speech, "inference_top_p_or_k"),
            **_present(speech_data, audio_prompt_duration=float),
        ),
        codec=parse_codec_nested(_get(speech, "codec_config"), (speech_data, data)),
        pretrained_llm=pretrained_llm,
        quantization=parse_quantization(_get(cfg, "mlx_conversion.quantization", None)),
        format="nested",
        **_present(stt, bos_token=str, eos_token=str, pad_token=str,
                   text_channel_weight=("duplex_text_channel_weight", float),
                   user_channel_weight=("duplex_user_channel_weight", float),
                   function_channel_weight=("duplex_function_channel_weight", float),
                   use_function_head=bool, pad_boost=("inference_pad_boost", float),
                   bos_boost=("inference_bos_boost", float), eos_boost=("inference_eos_boost", float)),
        **_present((data, stt), input_sample_rate=("source_sample_rate", int)),
        **_present(data, output_sample_rate=("target_sample_rate", int), frame_length=float),
        **_present(model, speaker_name=("inference_speaker_name", str),
                   speaker_reference=("inference_speaker_reference", str)),
    )


def parse_codec_nested(d: dict, data: tuple) -> CodecConfig:
    """The codec_config block; the output rate comes from the first of the ``data`` blocks that has one."""
    _require(int(d.get("groups", 1)) == 1, "codec groups != 1 is not supported")
    c = CodecConfig(
        latent_size=int(_get(d, "latent_size")),
        base_hidden_size=int(_get(d, "base_hidden_size")),
        codebook_size=int(_get(d, "codebook_size")),
        num_quantizers=int(_get(d, "num_quantizers")),
        **_present(d, n_fft=int, hop_length=int, channel_mult=_ints, rates=_ints, num_blocks=int, kernel_size=int),
        **_present(data, sample_rate=("target_sample_rate", int)),
    )
    ratio = d.get("wav_to_token_ratio")
    _require(ratio in (None, c.samples_per_frame),
             f"codec wav_to_token_ratio {ratio} != hop_length x prod(rates) = {c.samples_per_frame}")
    return c


def parse_runtime(cfg: dict) -> ModelConfig:
    """mlx-vlm's runtime config (``model_type: nemotron_voicechat``, docs/checkpoints.md §3)."""
    audio = _get(cfg, "audio_config")
    tts = _get(cfg, "tts_config")
    codec = _get(cfg, "codec_config")
    llm = parse_llm(_get(cfg, "text_config"))
    rnnt = None
    if audio.get("decoder") and audio.get("joint"):
        rnnt = parse_rnnt(audio["decoder"], audio["joint"], list(cfg.get("rnnt_vocabulary") or []),
                          audio.get("max_symbols"))
        blank = cfg.get("rnnt_blank_id")
        _require(blank in (None, rnnt.blank_id) or not rnnt.vocabulary,
                 f"rnnt_blank_id {blank} != RNNT vocabulary size {rnnt.vocab_size}")
    return ModelConfig(
        llm=llm,
        audio=AudioConfig(parse_preprocessor(_get(audio, "preprocessor")), parse_encoder(_get(audio, "encoder")),
                          int(audio.get("output_dim", llm.hidden_size)), rnnt),
        tts=TTSConfig(**{
            **RUNTIME_DEFAULTS["tts"],
            **tts_structure(tts, tts, _get(tts, "character_encoder"), _get(tts, "mog_head")),
            **_present(tts, num_iterations=int, guidance_scale=float, noise_scale=float, audio_prompt_duration=float),
            **_top_p_or_k(tts, "top_p", "top_p_or_k"),
        }),
        codec=CodecConfig(
            **_present(codec, latent_size=("latent_dim", int), n_fft=int, hop_length=int,
                       base_hidden_size=("base_channels", int), channel_mult=("channel_multipliers", _ints),
                       rates=("downsample_rates", _ints), num_blocks=("blocks_per_stage", int),
                       kernel_size=("block_kernel_size", int), codebook_size=int, num_quantizers=int),
            **_present((codec, cfg), sample_rate=(("sample_rate", "output_sample_rate"), int)),
        ),
        quantization=parse_quantization(cfg.get("quantization") or cfg.get("quantization_config")),
        format="runtime",
        **{**RUNTIME_DEFAULTS["model"],
           **_present(cfg, bos_id=("bos_token_id", int), eos_id=("eos_token_id", int), pad_id=("pad_token_id", int),
                      input_sample_rate=int, output_sample_rate=int, frame_length=("frame_duration", float),
                      function_channel_weight=float, speaker_name=("speaker", str))},
    )


def parse_config(cfg: dict, llm_config: Optional[dict] = None, rnnt_vocab: Optional[list] = None) -> ModelConfig:
    """Detect the format of a config.json dict and parse it. ``llm_config`` and ``rnnt_vocab``: what a nested
    config refers to (the LLM's config.json dict, the RNNT vocabulary file's pieces), when there is such a file."""
    if not isinstance(cfg, dict):
        raise ConfigError("config.json is not a JSON object")
    if layouts.is_mlx_audio(cfg):  # mlx-audio's converted folders: its own block around a nested config
        nested, llm = layouts.nested_config(cfg)
        return replace(parse_nested(nested, llm, rnnt_vocab), format="mlx-audio")
    if cfg.get("model_type") == "nemotron_voicechat":
        return parse_runtime(cfg)
    if isinstance(cfg.get("model"), dict) and "stt" in cfg["model"] and "speech_generation" in cfg["model"]:
        return parse_nested(cfg, llm_config, rnnt_vocab)
    keys = ", ".join(sorted(cfg)[:8])
    raise ConfigError(
        "config.json is in no known NemotronLabs-VoiceChat format (expected NVIDIA's nested config with "
        f"model.stt / model.speech_generation, or mlx-vlm's model_type 'nemotron_voicechat'); its keys: {keys}"
    )


def with_token_ids(cfg: ModelConfig, token_to_id, id_to_token) -> ModelConfig:
    """Fill the missing one of (token string, id) for bos / eos / pad from the tokenizer, and check both agree."""
    out = {}
    for name in ("bos", "eos", "pad"):
        tok, tid = getattr(cfg, f"{name}_token"), getattr(cfg, f"{name}_id")
        if tok is not None:
            found = token_to_id(tok)
            _require(found is not None, f"the text tokenizer has no {name} token {tok!r}")
            _require(tid in (None, found), f"{name} token {tok!r} is id {found} in the tokenizer, config says {tid}")
            tid = found
        else:
            tok = id_to_token(tid)
        out[f"{name}_token"], out[f"{name}_id"] = tok, tid
    return replace(cfg, **out)
