"""Typed configuration of the whole model: one frozen dataclass per network and for a run (the 80 ms frame itself is
voicechat/frame.py's).

Every field has exactly one default, in its dataclass: what NVIDIA's code (NeMo, docs/model.md §4.2) uses when a config
leaves the key out. Reading config.json formats into these is ``config_formats.py``'s job (docs/checkpoints.md §2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from .errors import ConfigError
from .frame import FRAME_SECONDS, INPUT_SAMPLE_RATE, OUTPUT_SAMPLE_RATE
from .limits import check_generation

MAX_INPUT_SECONDS = 600.0  # longer recordings are refused (10 minutes)
MAX_LAG_SECONDS = 2.0  # a live conversation this far behind real time stops (docs/live.md; the page reads it)

NANO_9B_V2 = "nvidia/NVIDIA-Nemotron-Nano-9B-v2"
# docs/model.md §4.1: the revision NVIDIA's TRT builder pins
NANO_9B_V2_REVISION = "6533e8de2c68e4536bf7c411d7a3ce5734111476"


def _derive(config, **values) -> None:
    """Set each field that is None to its value derived from the other fields (in a frozen dataclass)."""
    for name, value in values.items():
        if getattr(config, name) is None:
            object.__setattr__(config, name, value)


# ----------------------------------------------------------------------------------------------------------------
# dataclasses
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LLMConfig:
    """Nemotron-H (docs/model.md §2.4). ``pattern``: one letter per layer, M = Mamba-2, * = attention, - = MLP."""

    vocab_size: int
    hidden_size: int
    pattern: str
    num_attention_heads: int
    intermediate_size: int
    mamba_num_heads: int
    mamba_head_dim: int
    ssm_state_size: int
    n_groups: int
    num_key_value_heads: Optional[int] = None  # None: num_attention_heads (no GQA)
    head_dim: Optional[int] = None  # None: hidden_size // num_attention_heads
    conv_kernel: int = 4
    chunk_size: int = 128
    layer_norm_epsilon: float = 1e-5
    use_conv_bias: bool = True
    mamba_proj_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    time_step_limit: tuple[float, float] = (0.0, math.inf)

    def __post_init__(self):
        _derive(self, num_key_value_heads=self.num_attention_heads,
                head_dim=self.hidden_size // self.num_attention_heads)

    @property
    def mamba_inner(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def conv_dim(self) -> int:
        return self.mamba_inner + 2 * self.n_groups * self.ssm_state_size


@dataclass(frozen=True)
class PreprocessorConfig:
    """NeMo AudioToMelSpectrogramPreprocessor (docs/model.md §2.1); defaults are NeMo's (the release uses 128 features,
    0.025 s windows and pad_to 0)."""

    sample_rate: int = INPUT_SAMPLE_RATE
    features: int = 64
    n_fft: Optional[int] = None  # None: the next power of two >= win_length (NeMo)
    window_size: float = 0.02
    window_stride: float = 0.01
    preemph: float = 0.97  # 0 = no pre-emphasis
    mag_power: float = 2.0
    log_zero_guard_value: float = 2.0**-24
    lowfreq: float = 0.0
    highfreq: Optional[float] = None
    pad_to: int = 16
    pad_value: float = 0.0

    def __post_init__(self):
        _derive(self, n_fft=2 ** math.ceil(math.log2(self.win_length)))

    @property
    def win_length(self) -> int:
        return int(self.window_size * self.sample_rate)

    @property
    def hop_length(self) -> int:
        return int(self.window_stride * self.sample_rate)


@dataclass(frozen=True)
class EncoderConfig:
    """NeMo ConformerEncoder (FastConformer, docs/model.md §2.2); defaults are NeMo's. The release sets factor 8, 256
    channels, kernel 9, layer_norm, context (70, 0) chunked_limited, no xscaling, no biases, causal downsampling."""

    feat_in: int
    n_layers: int
    d_model: int
    n_heads: int = 4
    ff_expansion_factor: int = 4
    subsampling_factor: int = 4
    subsampling_conv_channels: Optional[int] = None  # None (NeMo's -1): d_model
    conv_kernel_size: int = 31
    conv_norm_type: str = "batch_norm"  # or "layer_norm" (release)
    att_context_size: tuple[int, int] = (-1, -1)
    att_context_style: str = "regular"
    xscaling: bool = True
    use_bias: bool = True
    untie_biases: bool = True
    pos_emb_max_len: int = 5000
    causal_downsampling: bool = False

    def __post_init__(self):
        if self.subsampling_conv_channels in (None, -1):  # NeMo writes -1 for "d_model"
            object.__setattr__(self, "subsampling_conv_channels", self.d_model)


@dataclass(frozen=True)
class RNNTConfig:
    """NeMo RNNTDecoder + RNNTJoint grafted into the release (docs/model.md §2.3)."""

    vocab_size: int
    pred_hidden: int
    encoder_hidden: int
    joint_hidden: int
    pred_rnn_layers: int = 1
    joint_dropout: bool = False  # NeMo puts a Dropout at joint_net.1 when dropout > 0, so the Linear is joint_net.2
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
    """EAR-TTS's Gemma-3 text backbone (docs/model.md §2.5.2); ``layer_types``: full_attention / sliding_attention."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    layer_types: tuple[str, ...]
    num_key_value_heads: Optional[int] = None  # None: num_attention_heads
    head_dim: int = 256
    sliding_window: int = 4096
    rms_norm_eps: float = 1e-6
    query_pre_attn_scalar: float = 256.0
    rope_global_base: float = 1_000_000.0
    rope_local_base: float = 10_000.0

    def __post_init__(self):
        _derive(self, num_key_value_heads=self.num_attention_heads)


@dataclass(frozen=True)
class CharEncoderConfig:
    """T5Gemma encoder used as the char-aware subword encoder (docs/model.md §2.5.3)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_hidden_layers: int = 1
    num_key_value_heads: Optional[int] = None  # None: num_attention_heads
    head_dim: int = 256
    rms_norm_eps: float = 1e-6
    query_pre_attn_scalar: float = 256.0
    rope_base: float = 10_000.0
    attn_logit_softcapping: float = 50.0

    def __post_init__(self):
        _derive(self, num_key_value_heads=self.num_attention_heads)


@dataclass(frozen=True)
class MoGConfig:
    """Mixture-of-Gaussians head (docs/model.md §2.5.7)."""

    intermediate_size: int
    num_layers: int
    low_rank: int
    num_predictions: int
    min_log_std: float = -4.0
    eps: float = 1e-6


@dataclass(frozen=True)
class TTSConfig:
    """EAR-TTS (docs/model.md §2.5) plus the checkpoint's sampling defaults (docs/model.md §1.2 H)."""

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
    def speech_pad_id(self) -> int:  # docs/model.md §2.5: _control_codes = [bos, eos, pad] = [K+2, K+1, K]
        return self.codebook_size

    @property
    def control_codes(self) -> tuple[int, int, int]:
        k = self.codebook_size
        return (k + 2, k + 1, k)


@dataclass(frozen=True)
class CodecConfig:
    """RVQ-VAE codec (docs/model.md §2.6)."""

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
    sample_rate: int = OUTPUT_SAMPLE_RATE

    @property
    def samples_per_frame(self) -> int:
        return self.hop_length * math.prod(self.rates)


@dataclass(frozen=True)
class QuantSpec:
    group_size: int = 64  # MLX's defaults
    bits: int = 4
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
    # text tokens: strings (nested format) and/or ids (runtime format); config_formats.with_token_ids fills both
    bos_token: Optional[str] = "<s>"
    eos_token: Optional[str] = "</s>"
    pad_token: Optional[str] = "<SPECIAL_12>"
    bos_id: Optional[int] = None
    eos_id: Optional[int] = None
    pad_id: Optional[int] = None
    input_sample_rate: int = INPUT_SAMPLE_RATE
    output_sample_rate: int = OUTPUT_SAMPLE_RATE
    frame_length: float = FRAME_SECONDS
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

    def __post_init__(self):
        # a checkpoint's frame states the one every room counts in (voicechat/frame.py), never another
        if not math.isclose(self.frame_length, FRAME_SECONDS):
            raise ConfigError(f"this checkpoint's frame is {self.frame_length:g} s; voicechat runs NVIDIA's "
                              f"{FRAME_SECONDS:g} s timeline")

    @property
    def samples_per_input_frame(self) -> int:
        return round(self.frame_length * self.input_sample_rate)


@dataclass(frozen=True)
class GenerationConfig:
    """Per-call settings of ``Model.generate`` (None = the checkpoint's value)."""

    # NVIDIA's offline semantics: a fixed length, the prompt frames and frame 0 kept (docs/model.md §1.2 I)
    reference: bool = False
    extra_seconds: Optional[float] = None  # fixed silence appended to the input; None = until the answer ends
    max_extra_seconds: float = 10.0
    max_input_seconds: float = MAX_INPUT_SECONDS
    text_temperature: float = 0.0  # 0 = greedy (NeMo); NVIDIA's wrapper uses 0.3 / 0.5 / 1.1
    text_top_p: float = 1.0
    text_repetition_penalty: float = 1.0
    tts_guidance_scale: Optional[float] = None
    tts_top_p: Optional[float] = None
    tts_top_k: Optional[int] = None
    tts_noise_scale: Optional[float] = None
    turn_markers: bool = False  # NVIDIA's <|t|> / <$t$> markers in the assistant text (docs/model.md §1.3)

    def __post_init__(self):
        check_generation(self)

    @property
    def fixed_length(self) -> bool:
        """Exactly ``extra_seconds`` of silence after the recording (none in reference mode without it); otherwise
        silence until the answer has ended, at most ``max_extra_seconds``."""
        return self.reference or self.extra_seconds is not None

    def silence_samples(self, sample_rate: int) -> int:
        """Samples of silence a run appends after the recording (their bound when not :attr:`fixed_length`)."""
        seconds = (self.extra_seconds or 0.0) if self.fixed_length else self.max_extra_seconds
        return round(seconds * sample_rate)


NVIDIA_SAMPLING = dict(text_temperature=0.3, text_top_p=0.5, text_repetition_penalty=1.1)
