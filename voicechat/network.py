"""The network: the module tree of the whole model (it IS the checkpoint key tree) and ``load_parts``, the one way
to build it.

    stt_model.perception.*        FastConformer + projection            stt/perception.py
    stt_model.llm.*               Nemotron-H                            llm/nemotron_h.py
    stt_model.{embed_tokens, lm_head, function_head}
    stt_model.rnnt_{decoder,joint}.*   transcript head (release only)   stt/rnnt.py
    tts_model.tts_model.*         EAR-TTS                               tts/eartts.py
    tts_model.audio_codec.*       codec                                 codec/rvqvae.py
    tts_model.{codec_silence_tokens, audio_prompt_latents.<name>}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from . import compute
import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from .checkpoint import (integrity_problems, load_config, load_into, local_llm_dir, quantize_modules, read_weights,
                         resolve_checkpoint, resolve_tokenizer_file)
from .config import ModelConfig
from .config_formats import with_token_ids
from .errors import CheckpointError, ConfigError
from .layers import Linear
from .llm.nemotron_h import NemotronH
from .stt.perception import Perception
from .stt.rnnt import RNNTDecoder, RNNTJoint
from .tokenizer import TextTokenizer
from .codec.rvqvae import AudioCodec
from .tts.eartts import RVQEARTTSModel

SPEAKER_KEY = re.compile(r"^tts_model\.audio_prompt_latents\.([^.]+)$")

# Buffers that some published layouts omit and the model derives itself (docs/model.md §4.5): the mel filterbank and
# window, the char-encoder flag tables (from the tokenizer), the TTS copy of the codebooks, and the codec silence frame.
# The one list of them: loading (``build``), the random checkpoints and the tests use it.
DERIVED_KEYS = (
    r"^stt_model\.perception\.preprocessor\.featurizer\.(window|fb)$",
    r"^tts_model\.tts_model\.embed_subword\.(subword_flag_emb|bos_eos_emb)\.(is_continuation|special_flags|pad_tensor)$",
    r"^tts_model\.tts_model\.rvq_embs$",
    r"^tts_model\.codec_silence_tokens$",
)


class STTModel(nn.Module):
    """``stt_model.*``: hears the user and decides the text and function tokens."""

    def __init__(self, cfg: ModelConfig, function_head: bool):
        super().__init__()
        h, v = cfg.llm.hidden_size, cfg.llm.vocab_size
        self.perception = Perception(cfg.audio)
        self.llm = NemotronH(cfg.llm)
        self.embed_tokens = nn.Embedding(v, h)
        self.lm_head = Linear(h, v, bias=False)
        self.function_head = Linear(h, v, bias=False) if function_head else None
        if cfg.audio.rnnt is not None:
            self.rnnt_decoder = RNNTDecoder(cfg.audio.rnnt)
            self.rnnt_joint = RNNTJoint(cfg.audio.rnnt)


class TTSModel(nn.Module):
    """``tts_model.*``: turns each text token into a frame of codec codes, and codes into a waveform."""

    def __init__(self, cfg: ModelConfig, text_vocab_size: int, speakers: tuple[str, ...]):
        super().__init__()
        self.tts_model = RVQEARTTSModel(cfg.tts, text_vocab_size)
        self.audio_codec = AudioCodec(cfg.codec)
        self.codec_silence_tokens = mx.zeros((cfg.codec.num_quantizers,), dtype=mx.int32)
        frames = prompt_frames(cfg)
        self.audio_prompt_latents = {s: mx.zeros((1, frames, cfg.tts.backbone.hidden_size)) for s in speakers}


def prompt_frames(cfg: ModelConfig) -> int:
    """Speaker prompt warm-up frames, int((duration * rate // 1764) * 1764) samples (37; docs/model.md §2.5.9)."""
    spf = cfg.codec.samples_per_frame
    return int((cfg.tts.audio_prompt_duration * cfg.codec.sample_rate // spf) * spf) // spf


class VoiceChatModel(nn.Module):
    def __init__(self, cfg: ModelConfig, text_vocab_size: int, function_head: bool, speakers: tuple[str, ...]):
        super().__init__()
        self.stt_model = STTModel(cfg, function_head)
        self.tts_model = TTSModel(cfg, text_vocab_size, speakers)


# ----------------------------------------------------------------------------------------------------------------
# building from a checkpoint
# ----------------------------------------------------------------------------------------------------------------
def check_llm_geometry(cfg: ModelConfig, weights: dict) -> None:
    """The nested format takes the LLM geometry from elsewhere (docs/model.md §4.2): check it against the tensors first,
    so a mismatch is named as such rather than as a list of shape errors."""
    layers = {int(m.group(1)) for k in weights if (m := re.match(r"stt_model\.llm\.layers\.(\d+)\.", k))}
    emb = weights.get("stt_model.embed_tokens.scales", weights.get("stt_model.embed_tokens.weight"))
    problems = []
    if layers and max(layers) + 1 != len(cfg.llm.pattern):
        problems.append(f"{max(layers) + 1} LLM layers in the weights, {len(cfg.llm.pattern)} in its pattern")
    if emb is not None and emb.shape[0] != cfg.llm.vocab_size:
        problems.append(f"embedding of {emb.shape[0]} tokens, vocab_size {cfg.llm.vocab_size}")
    if "stt_model.embed_tokens.weight" in weights and "stt_model.embed_tokens.scales" not in weights:
        if weights["stt_model.embed_tokens.weight"].shape[1] != cfg.llm.hidden_size:
            problems.append(f"embedding width {weights['stt_model.embed_tokens.weight'].shape[1]}, "
                            f"hidden_size {cfg.llm.hidden_size}")
    if problems:
        raise ConfigError(f"the LLM geometry ({cfg.pretrained_llm or 'text_config'}) does not match the weights: "
                          + "; ".join(problems))


def has_function_head(cfg: ModelConfig, weights: dict) -> bool:
    """NeMo 3.0.0 checkpoints have no function head; the release and the MLX conversions do (docs/model.md §6.1)."""
    present = any(k.startswith("stt_model.function_head.") for k in weights)
    return present if cfg.use_function_head is None else cfg.use_function_head


def keep_float32(name: str) -> bool:
    """Rank-1 Mamba parameters stay float32 on every device (docs/model.md §4.5: dt_bias reaches 33.5), and so do the
    log-mel window and filterbank: the preprocessor runs in float32 (docs/model.md §2.1)."""
    return name.endswith((".A_log", ".D", ".dt_bias", ".featurizer.window", ".featurizer.fb"))


def build(cfg: ModelConfig, tokenizer: TextTokenizer, weights: dict,
          dtype: Optional[mx.Dtype] = None) -> VoiceChatModel:
    """Construct the module tree for ``weights``, quantize what they quantize, load strictly, derive what is absent."""
    problems = integrity_problems(weights)
    if problems:
        raise CheckpointError("the checkpoint is damaged: " + "; ".join(problems[:8])
                              + (f" (and {len(problems) - 8} more)" if len(problems) > 8 else "")
                              + ". Download it again.")
    check_llm_geometry(cfg, weights)
    control = weights.get("tts_model._control_codes")
    if control is not None and tuple(control.tolist()) != cfg.tts.control_codes:
        raise CheckpointError(f"tts_model._control_codes is {control.tolist()}, expected {list(cfg.tts.control_codes)}")
    speakers = tuple(sorted(m.group(1) for k in weights if (m := SPEAKER_KEY.match(k))))
    if cfg.speaker_name and cfg.speaker_name not in speakers:
        raise CheckpointError(f"config.json names the speaker {cfg.speaker_name!r}, but the checkpoint has no "
                              f"tts_model.audio_prompt_latents.{cfg.speaker_name}")
    model = VoiceChatModel(cfg, tokenizer.vocab_size, has_function_head(cfg, weights), speakers)
    quantize_modules(model, weights, cfg.quantization)
    dtype = dtype or compute.speech_dtype()
    missing = load_into(model, weights, optional=DERIVED_KEYS,
                        dtype_for=lambda name, w: mx.float32 if keep_float32(name) else dtype)
    derive_missing(model, cfg, tokenizer, set(missing))
    mx.eval(model.parameters())
    prepare(model)
    return model


def prepare(model: nn.Module) -> None:
    """Compute, once, what inference derives from the loaded weights (modules with a ``prepare`` method: offset norm
    weights, fused projections, the codebooks' search arrays), so that none of it runs per frame or inside a compiled
    function."""
    for _, module in model.named_modules():
        if hasattr(module, "prepare"):
            mx.eval(module.prepare())


def derive_missing(model: VoiceChatModel, cfg: ModelConfig, tokenizer: TextTokenizer, missing: set[str]) -> None:
    tts = model.tts_model
    tts.tts_model.set_text_vocab(tokenizer.vocab, cfg.bos_id, cfg.eos_id,
                                 fill_flag_tables=any(".embed_subword." in k for k in missing))
    if "tts_model.tts_model.rvq_embs" in missing:
        tts.tts_model.rvq_embs = mx.stack(list(tts.audio_codec.prvq.mus_list)).astype(tts.tts_model.rvq_embs.dtype)
    if "tts_model.codec_silence_tokens" in missing:
        tts.codec_silence_tokens = tts.audio_codec.silence_codes().astype(mx.int32)


def parameter_count(model: nn.Module) -> int:
    return sum(v.size for _, v in tree_flatten(model.parameters()))


def load_parts(path_or_repo: str, tokenizer: Optional[str] = None, dtype: Optional[mx.Dtype] = None,
               offline: bool = False,
               download_progress=None) -> tuple[ModelConfig, TextTokenizer, VoiceChatModel, Path]:
    """Resolve, parse, tokenize and build: everything ``voicechat.load`` needs."""
    directory = resolve_checkpoint(str(path_or_repo), offline=offline, tqdm_class=download_progress)
    cfg = load_config(directory)
    llm_dir = local_llm_dir(cfg.pretrained_llm, directory)
    tok = TextTokenizer(resolve_tokenizer_file(directory, llm_dir, tokenizer, offline))
    cfg = with_token_ids(cfg, tok.token_to_id, tok.id_to_token)
    if tok.vocab_size > cfg.llm.vocab_size:
        raise ConfigError(f"the text tokenizer has {tok.vocab_size} tokens, the LLM only {cfg.llm.vocab_size}")
    model = build(cfg, tok, read_weights(directory), dtype)
    return cfg, tok, model, directory


def speaker_reference_path(cfg: ModelConfig, directory: Path) -> Optional[Path]:
    """The speaker WAV a NeMo config names (absolute, relative to the checkpoint, or by name inside it)."""
    if not cfg.speaker_reference:
        return None
    ref = Path(cfg.speaker_reference)
    for p in (ref, directory / ref, directory / ref.name):
        if p.is_file():
            return p
    raise ConfigError(f"config.json names the speaker reference {cfg.speaker_reference}, which does not exist")
