"""Typed configuration of the whole model, and the parsers of every published config.json format.

Nothing else in voicechat reads raw JSON. Two formats are accepted (CHECKPOINTS.md §2):

* nested: NVIDIA's release config (the resolved training YAML: ``model.stt.model``, ``model.speech_generation``,
  ``data``, ``_rnnt_merge_info``), also used by the ``-mlx-*`` family with an ``mlx_conversion.quantization`` block
  and by the NeMo harness. It does not carry the LLM geometry: ``pretrained_llm`` names a local directory or a Hub
  id, resolved by :func:`resolve_llm_config`.
* runtime: mlx-vlm's ``model_type: nemotron_voicechat`` config (``text_config``, ``audio_config``, ``tts_config``,
  ``codec_config``, ``quantization``).
* mlx-audio's converted folders: a nested config inside mlx-audio's own block (``voicechat/layouts.py`` maps them).

Defaults are NeMo's code defaults (SPEC §4.2) where a key is absent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from . import layouts
from .errors import ConfigError

NANO_9B_V2 = "nvidia/NVIDIA-Nemotron-Nano-9B-v2"
NANO_9B_V2_REVISION = "6533e8de2c68e4536bf7c411d7a3ce5734111476"  # SPEC §4.1: the revision NVIDIA's TRT builder pins

# Public geometry of nvidia/NVIDIA-Nemotron-Nano-9B-v2 (SPEC §2.4, TRT _THINKER_CONFIG); used when the nested
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


# ----------------------------------------------------------------------------------------------------------------
# dataclasses
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LLMConfig:
    """Nemotron-H (SPEC §2.4). ``pattern``: one letter per layer, M = Mamba-2, * = attention, - = MLP."""

    vocab_size: int
    hidden_size: int
    pattern: str
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    mamba_num_heads: int
    mamba_head_dim: int
    ssm_state_size: int
    n_groups: int
    conv_kernel: int = 4
    chunk_size: int = 128
    layer_norm_epsilon: float = 1e-5
    use_conv_bias: bool = True
    mamba_proj_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    time_step_limit: tuple[float, float] = (0.0, math.inf)

    @property
    def mamba_inner(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def conv_dim(self) -> int:
        return self.mamba_inner + 2 * self.n_groups * self.ssm_state_size


@dataclass(frozen=True)
class PreprocessorConfig:
    """NeMo AudioToMelSpectrogramPreprocessor (SPEC §2.1)."""

    sample_rate: int = 16000
    features: int = 128
    n_fft: int = 512
    window_size: float = 0.025
    window_stride: float = 0.01
    preemph: float = 0.97
    mag_power: float = 2.0
    log_zero_guard_value: float = 2.0**-24
    lowfreq: float = 0.0
    highfreq: Optional[float] = None
    pad_to: int = 0
    pad_value: float = 0.0

    @property
    def win_length(self) -> int:
        return int(self.window_size * self.sample_rate)

    @property
    def hop_length(self) -> int:
        return int(self.window_stride * self.sample_rate)


@dataclass(frozen=True)
class EncoderConfig:
    """NeMo ConformerEncoder (FastConformer, SPEC §2.2)."""

    feat_in: int
    n_layers: int
    d_model: int
    n_heads: int
    ff_expansion_factor: int = 4
    subsampling_factor: int = 8
    subsampling_conv_channels: int = 256
    conv_kernel_size: int = 9
    conv_norm_type: str = "layer_norm"  # "layer_norm" (release) or "batch_norm" (NeMo harness)
    att_context_size: tuple[int, int] = (70, 0)
    att_context_style: str = "chunked_limited"
    xscaling: bool = False
    use_bias: bool = False
    untie_biases: bool = True
    pos_emb_max_len: int = 5000
    causal_downsampling: bool = True


@dataclass(frozen=True)
class RNNTConfig:
    """NeMo RNNTDecoder + RNNTJoint grafted into the release (SPEC §2.3)."""

    vocab_size: int
    pred_hidden: int
    pred_rnn_layers: int
    encoder_hidden: int
    joint_hidden: int
    joint_dropout: bool  # NeMo puts a Dropout at joint_net.1 when dropout > 0, so the Linear is joint_net.2
    max_symbols: int = 10
    vocabulary: tuple[str, ...] = ()

    @property
    def blank_id(self) -> int:
        return self.vocab_size


@dataclass(frozen=True)
class AudioConfig:
    preprocessor: PreprocessorConfig
    encoder: EncoderConfig
    output_dim: int
    rnnt: Optional[RNNTConfig] = None


@dataclass(frozen=True)
class GemmaConfig:
    """Gemma-3 text backbone of EAR-TTS (SPEC §2.5.2). ``layer_types``: 'full_attention' / 'sliding_attention'."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    layer_types: tuple[str, ...]
    sliding_window: int = 4096
    rms_norm_eps: float = 1e-6
    query_pre_attn_scalar: float = 256.0
    rope_global_base: float = 1_000_000.0
    rope_local_base: float = 10_000.0


@dataclass(frozen=True)
class CharEncoderConfig:
    """T5Gemma encoder used as the char-aware subword encoder (SPEC §2.5.3)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    query_pre_attn_scalar: float = 256.0
    rope_base: float = 10_000.0
    attn_logit_softcapping: float = 50.0


@dataclass(frozen=True)
class MoGConfig:
    """Mixture-of-Gaussians head (SPEC §2.5.7)."""

    intermediate_size: int
    num_layers: int
    low_rank: int
    num_predictions: int
    min_log_std: float = -4.0
    eps: float = 1e-6


@dataclass(frozen=True)
class TTSConfig:
    """EAR-TTS (SPEC §2.5) plus the checkpoint's sampling defaults (SPEC §1.2 H)."""

    backbone: GemmaConfig
    char_encoder: CharEncoderConfig
    mog: MoGConfig
    latent_size: int
    codebook_size: int
    num_quantizers: int
    exponent: float = 3.0
    num_iterations: int = 8
    use_gated_fusion: bool = True
    use_subword_flag_emb: bool = True
    use_bos_eos_emb: bool = True
    use_audio_prompt_frozen_projection: bool = False
    guidance_scale: float = 0.5
    top_p: Optional[float] = 0.8  # NeMo's `inference_top_p_or_k`: a float means top-p ...
    top_k: Optional[int] = None  # ... an int means top-k
    noise_scale: float = 0.8
    force_silence_on_eos: bool = True
    audio_prompt_duration: float = 3.0

    @property
    def speech_pad_id(self) -> int:  # SPEC §2.5: _control_codes = [bos, eos, pad] = [K+2, K+1, K]
        return self.codebook_size

    @property
    def control_codes(self) -> tuple[int, int, int]:
        k = self.codebook_size
        return (k + 2, k + 1, k)


@dataclass(frozen=True)
class CodecConfig:
    """RVQ-VAE codec (SPEC §2.6)."""

    latent_size: int = 512
    n_fft: int = 16
    hop_length: int = 4
    base_hidden_size: int = 384
    channel_mult: tuple[int, ...] = (1, 2, 4)
    rates: tuple[int, ...] = (7, 7, 9)
    num_blocks: int = 3
    kernel_size: int = 7
    codebook_size: int = 1024
    num_quantizers: int = 31
    sample_rate: int = 22050

    @property
    def samples_per_frame(self) -> int:
        return self.hop_length * math.prod(self.rates)


@dataclass(frozen=True)
class QuantSpec:
    group_size: int
    bits: int
    mode: str = "affine"


@dataclass(frozen=True)
class QuantizationConfig:
    """MLX quantization: a default spec and per-module overrides (None = module kept unquantized)."""

    default: QuantSpec
    modules: dict = field(default_factory=dict)  # module path -> QuantSpec | None

    def spec_for(self, path: str) -> Optional[QuantSpec]:
        return self.modules.get(path, self.default)


@dataclass(frozen=True)
class ModelConfig:
    llm: LLMConfig
    audio: AudioConfig
    tts: TTSConfig
    codec: CodecConfig
    # text tokens: strings (nested format) and/or ids (runtime format); resolve_token_ids fills both
    bos_token: Optional[str] = "<s>"
    eos_token: Optional[str] = "</s>"
    pad_token: Optional[str] = "<SPECIAL_12>"
    bos_id: Optional[int] = None
    eos_id: Optional[int] = None
    pad_id: Optional[int] = None
    input_sample_rate: int = 16000
    output_sample_rate: int = 22050
    frame_length: float = 0.08
    text_channel_weight: float = 1.0
    user_channel_weight: float = 1.0
    function_channel_weight: float = 1.0
    use_function_head: Optional[bool] = None  # None: decided by the weights (NeMo 3.0.0 has no function head)
    pad_boost: float = 0.0
    bos_boost: float = 0.0
    eos_boost: float = 0.0
    speaker_name: Optional[str] = None
    speaker_reference: Optional[str] = None
    pretrained_llm: Optional[str] = None
    quantization: Optional[QuantizationConfig] = None
    format: str = "nested"

    @property
    def samples_per_input_frame(self) -> int:
        return round(self.frame_length * self.input_sample_rate)


@dataclass(frozen=True)
class GenerationConfig:
    """Per-call settings of ``Model.generate`` (None = the checkpoint's value)."""

    reference: bool = False  # NVIDIA's offline semantics: fixed length, prompt frames and frame 0 kept (SPEC §1.2 I)
    extra_seconds: Optional[float] = None  # fixed silence appended to the input; None = until the answer ends
    max_extra_seconds: float = 10.0
    max_input_seconds: float = 600.0  # longer recordings are refused
    text_temperature: float = 0.0  # 0 = greedy (NeMo); NVIDIA's wrapper uses 0.3 / 0.5 / 1.1
    text_top_p: float = 1.0
    text_repetition_penalty: float = 1.0
    tts_guidance_scale: Optional[float] = None
    tts_top_p: Optional[float] = None
    tts_top_k: Optional[int] = None
    tts_noise_scale: Optional[float] = None
    turn_markers: bool = False  # NVIDIA's <|t|> / <$t$> markers in the assistant text (SPEC §1.3)


NVIDIA_SAMPLING = dict(text_temperature=0.3, text_top_p=0.5, text_repetition_penalty=1.1)


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


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e})") from None


# ----------------------------------------------------------------------------------------------------------------
# LLM (Nemotron-H) config, from a HF nemotron_h config.json dict or the runtime text_config
# ----------------------------------------------------------------------------------------------------------------
def parse_llm(d: dict) -> LLMConfig:
    pattern = d.get("hybrid_override_pattern")
    if isinstance(pattern, list):
        pattern = "".join(pattern)
    _require(isinstance(pattern, str) and pattern != "", "LLM config has no 'hybrid_override_pattern'")
    _require(set(pattern) <= set("M*-"), f"LLM pattern {pattern!r} has layer types other than M, * and -")
    n = d.get("num_hidden_layers")
    _require(n in (None, len(pattern)), f"LLM num_hidden_layers {n} != pattern length {len(pattern)}")
    limit = d.get("time_step_limit")
    if limit is None:  # transformers' built-in Nemotron-H clamps at time_step_min (issue 4, SPEC §2.4)
        limit = (float(d.get("time_step_min", 0.0)), math.inf)
    lo, hi = (float(v) for v in limit)
    heads = int(_get(d, "num_attention_heads"))
    return LLMConfig(
        vocab_size=int(_get(d, "vocab_size")),
        hidden_size=int(_get(d, "hidden_size")),
        pattern=pattern,
        num_attention_heads=heads,
        num_key_value_heads=int(d.get("num_key_value_heads", heads)),
        head_dim=int(d.get("head_dim") or int(d["hidden_size"]) // heads),
        intermediate_size=int(_get(d, "intermediate_size")),
        mamba_num_heads=int(_get(d, "mamba_num_heads")),
        mamba_head_dim=int(_get(d, "mamba_head_dim")),
        ssm_state_size=int(d.get("ssm_state_size", d.get("mamba_state_dim", 0)) or _get(d, "ssm_state_size")),
        n_groups=int(d.get("n_groups", d.get("mamba_num_groups", 0)) or _get(d, "n_groups")),
        conv_kernel=int(d.get("conv_kernel", 4)),
        chunk_size=int(d.get("chunk_size", 128)),
        layer_norm_epsilon=float(d.get("layer_norm_epsilon", d.get("rms_norm_eps", 1e-5))),
        use_conv_bias=bool(d.get("use_conv_bias", True)),
        mamba_proj_bias=bool(d.get("mamba_proj_bias", False)),
        attention_bias=bool(d.get("attention_bias", False)),
        mlp_bias=bool(d.get("mlp_bias", False)),
        time_step_limit=(lo, hi if hi < 1e30 else math.inf),
    )


def resolve_llm_config(pretrained_llm: str, checkpoint_dir: Optional[Path]) -> dict:
    """The nemotron_h config dict that ``pretrained_llm`` names: a local directory (absolute, relative to the
    checkpoint, or a folder of that name inside it; NeMo writes absolute paths of the machine that trained), else the
    public geometry of the Nano-9B-v2 Hub id."""
    candidates = [Path(pretrained_llm).expanduser()]
    if checkpoint_dir is not None:
        candidates += [Path(checkpoint_dir) / pretrained_llm, Path(checkpoint_dir) / Path(pretrained_llm).name]
    for c in candidates:
        if (c / "config.json").is_file():
            return read_json(c / "config.json")
    if pretrained_llm.rstrip("/") == NANO_9B_V2:
        return dict(NANO_9B_V2_CONFIG)
    raise ConfigError(
        f"the LLM config names pretrained_llm={pretrained_llm!r}, which is neither {NANO_9B_V2} nor a directory "
        f"with a config.json (looked in {', '.join(str(c) for c in candidates)})"
    )


def local_llm_dir(pretrained_llm: Optional[str], checkpoint_dir: Optional[Path]) -> Optional[Path]:
    """The local directory ``pretrained_llm`` names, if there is one (it may hold the text tokenizer)."""
    if not pretrained_llm:
        return None
    candidates = [Path(pretrained_llm).expanduser()]
    if checkpoint_dir is not None:
        candidates += [Path(checkpoint_dir) / pretrained_llm, Path(checkpoint_dir) / Path(pretrained_llm).name]
    return next((c for c in candidates if c.is_dir()), None)


# ----------------------------------------------------------------------------------------------------------------
# speech input path
# ----------------------------------------------------------------------------------------------------------------
def parse_preprocessor(d: dict) -> PreprocessorConfig:
    # Only NeMo's inference path of this model is implemented; other settings would silently change the features.
    _require(str(d.get("normalize", "NA")) in ("NA", "None"), f"preprocessor normalize={d.get('normalize')!r} is not supported (only 'NA')")
    _require(d.get("log", True) is True, "preprocessor log=false is not supported")
    _require(d.get("window", "hann") == "hann", f"preprocessor window={d.get('window')!r} is not supported (only 'hann')")
    _require(int(d.get("frame_splicing", 1)) == 1, "preprocessor frame_splicing != 1 is not supported")
    _require(not d.get("exact_pad", False), "preprocessor exact_pad=true is not supported")
    _require(d.get("log_zero_guard_type", "add") == "add", "preprocessor log_zero_guard_type must be 'add'")
    _require(d.get("mel_norm", "slaney") == "slaney", "preprocessor mel_norm must be 'slaney'")
    guard = d.get("log_zero_guard_value", 2.0**-24)
    if isinstance(guard, str):  # NeMo also accepts "tiny" / "eps" (float32 limits)
        import numpy as np

        guard = {"tiny": float(np.finfo(np.float32).tiny), "eps": float(np.finfo(np.float32).eps)}[guard]
    return PreprocessorConfig(
        sample_rate=int(d.get("sample_rate", 16000)),
        features=int(d.get("features", 64)),
        n_fft=int(d.get("n_fft") or 2 ** math.ceil(math.log2(d.get("window_size", 0.02) * d.get("sample_rate", 16000)))),
        window_size=float(d.get("window_size", 0.02)),
        window_stride=float(d.get("window_stride", 0.01)),
        preemph=float(d.get("preemph", 0.97) or 0.0),
        mag_power=float(d.get("mag_power", 2.0)),
        log_zero_guard_value=float(guard),
        lowfreq=float(d.get("lowfreq", 0.0)),
        highfreq=None if d.get("highfreq") is None else float(d["highfreq"]),
        pad_to=int(d.get("pad_to", 16)),
        pad_value=float(d.get("pad_value", 0.0)),
    )


def parse_encoder(d: dict) -> EncoderConfig:
    _require(d.get("subsampling", "striding") == "dw_striding", f"encoder subsampling={d.get('subsampling')!r} is not supported (only dw_striding)")
    _require(d.get("self_attention_model", "rel_pos") == "rel_pos", "only rel_pos self-attention is supported")
    _require(d.get("conv_context_size") in ("causal", [8, 0], (8, 0)) or d.get("conv_kernel_size", 31) == 1,
             f"encoder conv_context_size={d.get('conv_context_size')!r} is not supported (only 'causal')")
    norm = d.get("conv_norm_type", "batch_norm")
    _require(norm in ("layer_norm", "batch_norm"), f"encoder conv_norm_type={norm!r} is not supported")
    ctx = d.get("att_context_size", [-1, -1])
    if ctx and isinstance(ctx[0], (list, tuple)):  # several contexts: NeMo uses the first at inference
        ctx = ctx[0]
    d_model = int(_get(d, "d_model"))
    channels = int(d.get("subsampling_conv_channels", -1))
    return EncoderConfig(
        feat_in=int(_get(d, "feat_in")),
        n_layers=int(_get(d, "n_layers")),
        d_model=d_model,
        n_heads=int(d.get("n_heads", 4)),
        ff_expansion_factor=int(d.get("ff_expansion_factor", 4)),
        subsampling_factor=int(d.get("subsampling_factor", 4)),
        subsampling_conv_channels=d_model if channels == -1 else channels,
        conv_kernel_size=int(d.get("conv_kernel_size", 31)),
        conv_norm_type=norm,
        att_context_size=(int(ctx[0]), int(ctx[1])),
        att_context_style=str(d.get("att_context_style", "regular")),
        xscaling=bool(d.get("xscaling", True)),
        use_bias=bool(d.get("use_bias", True)),
        untie_biases=bool(d.get("untie_biases", True)),
        pos_emb_max_len=int(d.get("pos_emb_max_len", 5000)),
        causal_downsampling=bool(d.get("causal_downsampling", False)),
    )


def parse_rnnt(decoder: dict, joint: dict, vocabulary: list, max_symbols: int) -> RNNTConfig:
    prednet = decoder.get("prednet", decoder)
    jointnet = joint.get("jointnet", joint)
    vocab_size = int(decoder.get("vocab_size", joint.get("num_classes", len(vocabulary))))
    _require(int(joint.get("num_classes", vocab_size)) == vocab_size,
             f"RNNT joint num_classes {joint.get('num_classes')} != decoder vocab_size {vocab_size}")
    return RNNTConfig(
        vocab_size=vocab_size,
        pred_hidden=int(prednet["pred_hidden"]),
        pred_rnn_layers=int(prednet.get("pred_rnn_layers", 1)),
        encoder_hidden=int(jointnet["encoder_hidden"]),
        joint_hidden=int(jointnet["joint_hidden"]),
        joint_dropout=float(jointnet.get("dropout", 0.0) or 0.0) > 0.0,
        max_symbols=int(max_symbols),
        vocabulary=tuple(vocabulary),
    )


# ----------------------------------------------------------------------------------------------------------------
# speech output path
# ----------------------------------------------------------------------------------------------------------------
def gemma_layer_types(n_layers: int, pattern: int) -> tuple[str, ...]:
    """Gemma-3 rule: layer i is global iff (i + 1) % pattern == 0 (SPEC §2.5.2)."""
    return tuple("full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers))


def parse_gemma(d: dict) -> GemmaConfig:
    n = int(_get(d, "num_hidden_layers"))
    types = d.get("layer_types") or gemma_layer_types(n, int(d.get("sliding_window_pattern", 6)))
    _require(len(types) == n, f"TTS backbone layer_types has {len(types)} entries for {n} layers")
    _require(d.get("rope_scaling") is None, "TTS backbone rope_scaling is not supported")
    heads = int(_get(d, "num_attention_heads"))
    return GemmaConfig(
        hidden_size=int(_get(d, "hidden_size")),
        intermediate_size=int(_get(d, "intermediate_size")),
        num_hidden_layers=n,
        num_attention_heads=heads,
        num_key_value_heads=int(d.get("num_key_value_heads", heads)),
        head_dim=int(d.get("head_dim", 256)),
        layer_types=tuple(types),
        sliding_window=int(d.get("sliding_window", 4096)),
        rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
        query_pre_attn_scalar=float(d.get("query_pre_attn_scalar", 256)),
        rope_global_base=float(d.get("rope_theta", d.get("rope_global_base_freq", 1_000_000.0))),
        rope_local_base=float(d.get("rope_local_base_freq", 10_000.0)),
    )


def parse_char_encoder(d: dict) -> CharEncoderConfig:
    heads = int(_get(d, "num_attention_heads"))
    return CharEncoderConfig(
        hidden_size=int(_get(d, "hidden_size")),
        intermediate_size=int(_get(d, "intermediate_size")),
        num_hidden_layers=int(d.get("num_hidden_layers", 1)),
        num_attention_heads=heads,
        num_key_value_heads=int(d.get("num_key_value_heads", heads)),
        head_dim=int(d.get("head_dim", 256)),
        rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
        query_pre_attn_scalar=float(d.get("query_pre_attn_scalar", 256)),
        rope_base=float(d.get("rope_theta", 10_000.0)),
        attn_logit_softcapping=float(d.get("attn_logit_softcapping", 50.0)),
    )


def parse_mog(d: dict) -> MoGConfig:
    return MoGConfig(
        intermediate_size=int(_get(d, "intermediate_size")),
        num_layers=int(_get(d, "num_layers")),
        low_rank=int(_get(d, "low_rank")),
        num_predictions=int(_get(d, "num_predictions")),
        min_log_std=float(d.get("min_log_std", -4.0)),
        eps=float(d.get("eps", 1e-6)),
    )


def tts_structure(tts: dict, backbone: dict, char_encoder: dict, mog: dict, frozen_projection: bool) -> dict:
    """The EAR-TTS architecture fields both formats share (``frozen_projection``: the format's default for
    ``use_audio_prompt_frozen_projection``)."""
    return dict(
        backbone=parse_gemma(backbone),
        char_encoder=parse_char_encoder(char_encoder),
        mog=parse_mog(mog),
        latent_size=int(_get(tts, "latent_size")),
        codebook_size=int(_get(tts, "codebook_size")),
        num_quantizers=int(_get(tts, "num_quantizers")),
        exponent=float(tts.get("exponent", 3.0)),
        use_gated_fusion=bool(tts.get("use_gated_fusion_for_text_audio", True)),
        use_subword_flag_emb=bool(tts.get("use_subword_flag_emb", True)),
        use_bos_eos_emb=bool(tts.get("use_bos_eos_emb", True)),
        use_audio_prompt_frozen_projection=bool(tts.get("use_audio_prompt_frozen_projection", frozen_projection)),
    )


def split_top_p_or_k(value: Any) -> tuple[Optional[float], Optional[int]]:
    """NeMo's ``inference_top_p_or_k``: an int is top-k, a float top-p (SPEC §2.5.7)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"inference_top_p_or_k={value!r} is neither an int (top-k) nor a float (top-p)")
    return (None, value) if isinstance(value, int) else (float(value), None)


# ----------------------------------------------------------------------------------------------------------------
# quantization
# ----------------------------------------------------------------------------------------------------------------
def parse_quantization(d: Optional[dict]) -> Optional[QuantizationConfig]:
    """Runtime form ``{group_size, bits, mode?, <path>: {...} | false}`` or nested form ``{..., modules: {...}}``."""
    if not d:
        return None
    default = QuantSpec(int(d.get("group_size", 64)), int(d.get("bits", 4)), str(d.get("mode", "affine")))
    entries = dict(d.get("modules", {}))
    entries.update({k: v for k, v in d.items() if k not in ("group_size", "bits", "mode", "modules")})
    modules = {}
    for path, spec in entries.items():
        if spec is False or spec is None:
            modules[path] = None
        elif isinstance(spec, dict):
            modules[path] = QuantSpec(int(spec.get("group_size", default.group_size)),
                                      int(spec.get("bits", default.bits)), str(spec.get("mode", default.mode)))
        else:
            raise ConfigError(f"quantization entry {path!r} is {spec!r}, expected an object or false")
    for spec in [default, *[s for s in modules.values() if s]]:
        _require(spec.mode == "affine", f"quantization mode {spec.mode!r} is not supported (only affine)")
        _require(spec.bits in (2, 3, 4, 5, 6, 8), f"quantization bits={spec.bits} is not supported")
    return QuantizationConfig(default, modules)


# ----------------------------------------------------------------------------------------------------------------
# the two formats
# ----------------------------------------------------------------------------------------------------------------
def parse_nested(cfg: dict, checkpoint_dir: Optional[Path] = None, rnnt_vocab: Optional[list] = None,
                 llm_config: Optional[dict] = None) -> ModelConfig:
    """NVIDIA's nested config (release, ``-mlx-*`` family, NeMo harness). ``llm_config``: the LLM geometry when the
    config carries it (mlx-audio's folders); else ``pretrained_llm`` names it."""
    stt = _get(cfg, "model.stt.model")
    speech = _get(cfg, "model.speech_generation.model")
    speech_data = _get(cfg, "model.speech_generation.data", {})
    data = cfg.get("data", {})
    perception = _get(stt, "perception")
    _require(not stt.get("predict_user_text", False), "predict_user_text=true (ASR head) is not supported")
    pretrained_llm = str(_get(stt, "pretrained_llm"))
    llm = parse_llm(llm_config or resolve_llm_config(pretrained_llm, checkpoint_dir))
    output_dim = int(perception.get("output_dim", llm.hidden_size))
    _require(output_dim == llm.hidden_size, f"perception output_dim {output_dim} != LLM hidden_size {llm.hidden_size}")

    rnnt = None
    merge = cfg.get("_rnnt_merge_info")
    if merge:
        vocab = list(_get(merge, "joint_config.vocabulary", []) or rnnt_vocab or [])
        rnnt = parse_rnnt(_get(merge, "decoder_config"), _get(merge, "joint_config"), vocab,
                          stt.get("rnnt_max_symbols_per_step", 10))

    tts = _get(speech, "tts_config")
    _require(tts.get("context_hidden_size") is None, "tts_config.context_hidden_size is not supported (must be null)")
    _require(not tts.get("random_target_masking", False), "tts_config.random_target_masking is not supported")
    top_p, top_k = split_top_p_or_k(speech.get("inference_top_p_or_k", 0.8))
    codec = _get(speech, "codec_config")
    model = cfg["model"]
    return ModelConfig(
        llm=llm,
        audio=AudioConfig(parse_preprocessor(_get(perception, "preprocessor")), parse_encoder(_get(perception, "encoder")),
                          output_dim, rnnt),
        tts=TTSConfig(
            **tts_structure(tts, _get(tts, "backbone_config"), _get(tts, "cas_config.backbone_config.encoder"),
                            _get(tts, "mog_head_config"), frozen_projection=False),
            guidance_scale=float(speech.get("inference_guidance_scale", 0.5)),
            top_p=top_p,
            top_k=top_k,
            noise_scale=float(speech.get("inference_noise_scale", 0.8)),
            force_silence_on_eos=bool(speech.get("inference_force_speech_silence_on_eos", True)),
            audio_prompt_duration=float(speech_data.get("audio_prompt_duration", 3.0)),
        ),
        codec=parse_codec_nested(codec, int(speech_data.get("target_sample_rate", data.get("target_sample_rate", 22050)))),
        bos_token=stt.get("bos_token", "<s>"),
        eos_token=stt.get("eos_token", "</s>"),
        pad_token=stt.get("pad_token", "<SPECIAL_12>"),
        input_sample_rate=int(data.get("source_sample_rate", stt.get("source_sample_rate", 16000))),
        output_sample_rate=int(data.get("target_sample_rate", 22050)),
        frame_length=float(data.get("frame_length", 0.08)),
        text_channel_weight=float(stt.get("duplex_text_channel_weight", 1.0)),
        user_channel_weight=float(stt.get("duplex_user_channel_weight", 1.0)),
        function_channel_weight=float(stt.get("duplex_function_channel_weight", 1.0)),
        use_function_head=stt.get("use_function_head"),
        pad_boost=float(stt.get("inference_pad_boost", 0.0) or 0.0),
        bos_boost=float(stt.get("inference_bos_boost", 0.0) or 0.0),
        eos_boost=float(stt.get("inference_eos_boost", 0.0) or 0.0),
        speaker_name=model.get("inference_speaker_name"),
        speaker_reference=model.get("inference_speaker_reference"),
        pretrained_llm=pretrained_llm,
        quantization=parse_quantization(_get(cfg, "mlx_conversion.quantization", None)),
        format="nested",
    )


def parse_codec_nested(d: dict, sample_rate: int) -> CodecConfig:
    _require(int(d.get("groups", 1)) == 1, "codec groups != 1 is not supported")
    c = CodecConfig(
        latent_size=int(_get(d, "latent_size")),
        n_fft=int(d.get("n_fft", 16)),
        hop_length=int(d.get("hop_length", 4)),
        base_hidden_size=int(_get(d, "base_hidden_size")),
        channel_mult=tuple(int(v) for v in d.get("channel_mult", (1, 2, 4))),
        rates=tuple(int(v) for v in d.get("rates", (7, 7, 9))),
        num_blocks=int(d.get("num_blocks", 3)),
        kernel_size=int(d.get("kernel_size", 7)),
        codebook_size=int(_get(d, "codebook_size")),
        num_quantizers=int(_get(d, "num_quantizers")),
        sample_rate=sample_rate,
    )
    ratio = d.get("wav_to_token_ratio")
    _require(ratio in (None, c.samples_per_frame),
             f"codec wav_to_token_ratio {ratio} != hop_length x prod(rates) = {c.samples_per_frame}")
    return c


def parse_runtime(cfg: dict) -> ModelConfig:
    """mlx-vlm's runtime config (``model_type: nemotron_voicechat``, CHECKPOINTS.md §2.3)."""
    audio = _get(cfg, "audio_config")
    tts = _get(cfg, "tts_config")
    codec = _get(cfg, "codec_config")
    llm = parse_llm(_get(cfg, "text_config"))
    rnnt = None
    if audio.get("decoder") and audio.get("joint"):
        rnnt = parse_rnnt(audio["decoder"], audio["joint"], list(cfg.get("rnnt_vocabulary") or []),
                          audio.get("max_symbols", 10))
        blank = cfg.get("rnnt_blank_id")
        _require(blank in (None, rnnt.blank_id) or not rnnt.vocabulary,
                 f"rnnt_blank_id {blank} != RNNT vocabulary size {rnnt.vocab_size}")
    top = tts.get("top_p", tts.get("top_p_or_k", 0.95))
    top_p, top_k = split_top_p_or_k(top)
    c = CodecConfig(
        latent_size=int(codec.get("latent_dim", 512)),
        n_fft=int(codec.get("n_fft", 16)),
        hop_length=int(codec.get("hop_length", 4)),
        base_hidden_size=int(codec.get("base_channels", 384)),
        channel_mult=tuple(codec.get("channel_multipliers", (1, 2, 4))),
        rates=tuple(codec.get("downsample_rates", (7, 7, 9))),
        num_blocks=int(codec.get("blocks_per_stage", 3)),
        kernel_size=int(codec.get("block_kernel_size", 7)),
        codebook_size=int(codec.get("codebook_size", 1024)),
        num_quantizers=int(codec.get("num_quantizers", 31)),
        sample_rate=int(codec.get("sample_rate", cfg.get("output_sample_rate", 22050))),
    )
    return ModelConfig(
        llm=llm,
        audio=AudioConfig(parse_preprocessor(_get(audio, "preprocessor")), parse_encoder(_get(audio, "encoder")),
                          int(audio.get("output_dim", llm.hidden_size)), rnnt),
        tts=TTSConfig(
            **tts_structure(tts, tts, _get(tts, "character_encoder"), _get(tts, "mog_head"), frozen_projection=True),
            num_iterations=int(tts.get("num_iterations", 8)),
            guidance_scale=float(tts.get("guidance_scale", 0.2)),
            top_p=top_p,
            top_k=top_k,
            noise_scale=float(tts.get("noise_scale", 0.001)),
            audio_prompt_duration=float(tts.get("audio_prompt_duration", 3.0)),
        ),
        codec=c,
        bos_token=None,
        eos_token=None,
        pad_token=None,
        bos_id=int(cfg.get("bos_token_id", 1)),
        eos_id=int(cfg.get("eos_token_id", 2)),
        pad_id=int(cfg.get("pad_token_id", 12)),
        input_sample_rate=int(cfg.get("input_sample_rate", 16000)),
        output_sample_rate=int(cfg.get("output_sample_rate", 22050)),
        frame_length=float(cfg.get("frame_duration", 0.08)),
        function_channel_weight=float(cfg.get("function_channel_weight", 2.0)),
        use_function_head=None,
        speaker_name=cfg.get("speaker", "Aria"),
        quantization=parse_quantization(cfg.get("quantization") or cfg.get("quantization_config")),
        format="runtime",
    )


def parse_config(cfg: dict, checkpoint_dir: Optional[Path] = None, rnnt_vocab: Optional[list] = None) -> ModelConfig:
    """Detect the format of a config.json dict and parse it."""
    if not isinstance(cfg, dict):
        raise ConfigError("config.json is not a JSON object")
    if layouts.is_mlx_audio(cfg):  # mlx-audio's converted folders: its own block around a nested config
        nested, llm = layouts.nested_config(cfg)
        return replace(parse_nested(nested, checkpoint_dir, rnnt_vocab, llm), format="mlx-audio")
    if cfg.get("model_type") == "nemotron_voicechat":
        return parse_runtime(cfg)
    if isinstance(cfg.get("model"), dict) and "stt" in cfg["model"] and "speech_generation" in cfg["model"]:
        return parse_nested(cfg, checkpoint_dir, rnnt_vocab)
    keys = ", ".join(sorted(cfg)[:8])
    raise ConfigError(
        "config.json is in no known NemotronLabs-VoiceChat format (expected NVIDIA's nested config with "
        f"model.stt / model.speech_generation, or mlx-vlm's model_type 'nemotron_voicechat'); its keys: {keys}"
    )


def load_config(checkpoint_dir: Path) -> ModelConfig:
    """Parse ``<dir>/config.json`` (and ``rnnt_tokenizer/vocab.json`` when the config has no RNNT vocabulary)."""
    checkpoint_dir = Path(checkpoint_dir)
    raw = read_json(checkpoint_dir / "config.json")
    cfg = parse_config(raw, checkpoint_dir, read_rnnt_vocab(checkpoint_dir))
    rnnt = cfg.audio.rnnt
    if rnnt is not None and not rnnt.vocabulary:
        raise ConfigError(
            f"{checkpoint_dir}: the RNNT transcript head has no vocabulary (neither in config.json nor in "
            "rnnt_tokenizer/vocab.json)"
        )
    if rnnt is not None and len(rnnt.vocabulary) != rnnt.vocab_size:
        raise ConfigError(f"RNNT vocabulary has {len(rnnt.vocabulary)} pieces, the RNNT head {rnnt.vocab_size} classes")
    return cfg


def read_rnnt_vocab(checkpoint_dir: Path) -> Optional[list]:
    """``rnnt_tokenizer/vocab.json``: a list of pieces, or a piece -> id map with contiguous ids (SPEC §4.1)."""
    path = Path(checkpoint_dir) / "rnnt_tokenizer" / "vocab.json"
    if not path.is_file():
        return None
    v = read_json(path)
    if isinstance(v, list):
        return [str(p) for p in v]
    if isinstance(v, dict):
        ids = sorted(v.values())
        _require(ids == list(range(len(ids))), f"{path}: piece ids are not contiguous 0..{len(ids) - 1}")
        by_id = {i: p for p, i in v.items()}
        return [by_id[i] for i in range(len(ids))]
    raise ConfigError(f"{path} is neither a list of pieces nor a piece -> id map")


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
