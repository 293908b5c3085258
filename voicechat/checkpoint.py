"""Checkpoints: find them (local directory or Hugging Face Hub), read their config files and shards, and load them
strictly. (``config_formats.py`` parses what is read here.)

Every published layout keeps NVIDIA's key names (``stt_model.*`` / ``tts_model.*``) and PyTorch tensor layouts
(docs/checkpoints.md); our module tree has the same key names, so loading is: read -> sanitize (shape-gated layout
changes only) -> quantize the modules whose ``.scales`` are in the file -> one strict, shape-checked update that
reports every problem at once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from . import layouts
from .config import NANO_9B_V2, NANO_9B_V2_REVISION, ModelConfig, QuantizationConfig, QuantSpec
from .config_formats import nested_pretrained_llm, parse_config, parse_rnnt_vocab
from .errors import CheckpointError, ConfigError, ModelUnavailable

DEFAULT_MODEL = "mlx-community/NemotronLabs-VoiceChat-11B-4bit"
# Tensors in the published files that inference never reads: BatchNorm's training counter, the PRVQ variances
# (docs/model.md §2.6), and the control codes, which are fixed by the codebook size and checked by the model
# (docs/model.md §2.5).
UNUSED_KEYS = re.compile(r"(num_batches_tracked|\.prvq\._variance_list\.\d+\.variance|^tts_model\._control_codes)$")
HUB_PATTERNS = [
    "config.json",
    "model*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "rnnt_tokenizer/*",
]
SUPPORTED_CHECKPOINTS = {
    "mlx-community/NemotronLabs-VoiceChat-11B-4bit": "mlx-vlm runtime config, LLM 4-bit, speech path bf16",
    "mlx-community/NemotronLabs-VoiceChat-11B-8bit": "mlx-vlm runtime config, LLM 8-bit, speech path bf16",
    "mlx-community/NemotronLabs-VoiceChat-11B-bf16": "mlx-vlm runtime config, bf16",
    "mlx-community/NemotronLabs-VoiceChat-11B-mlx-4bit": "NVIDIA nested config + mlx_conversion, LLM 4-bit",
    "mlx-community/NemotronLabs-VoiceChat-11B-mlx-8bit": "NVIDIA nested config + mlx_conversion, LLM 8-bit",
    "mlx-community/NemotronLabs-VoiceChat-11B-mlx-bf16": "NVIDIA nested config + mlx_conversion, bf16",
    "nvidia/NVIDIA-NemotronLabs-VoiceChat-11B": "NVIDIA's release: nested config, one fp32 file (44 GB)",
}


# ----------------------------------------------------------------------------------------------------------------
# finding a checkpoint
# ----------------------------------------------------------------------------------------------------------------
def hub_download(repo_id: str, *, patterns: Optional[list] = None, revision: Optional[str] = None,
                 offline: bool = False, tqdm_class=None) -> Path:
    """``snapshot_download`` with errors turned into one line that says what to run."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    kwargs = {"tqdm_class": tqdm_class} if tqdm_class is not None else {}
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns or HUB_PATTERNS, revision=revision,
                                      local_files_only=offline, **kwargs))
    except LocalEntryNotFoundError:
        raise ModelUnavailable(
            f"{repo_id} is not in the local Hugging Face cache and the Hub cannot be reached (offline or "
            f"HF_HUB_OFFLINE=1). Download it once with `hf download {repo_id} --local-dir DIR` and pass that DIR."
        ) from None
    except (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError) as e:
        raise ModelUnavailable(f"{repo_id}: {type(e).__name__} (check the name and your access).") from None
    except HfHubHTTPError as e:
        raise ModelUnavailable(f"{repo_id}: the Hub answered with an error: {str(e).splitlines()[0]}") from None


def resolve_checkpoint(spec: str, *, offline: bool = False, tqdm_class=None) -> Path:
    """A local directory, or a Hub repo id that is downloaded (or found in the cache); checked for completeness."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return check_complete(path)
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise ModelUnavailable(f"{spec} is neither a checkpoint directory nor a Hugging Face repo id (org/name)")
    return check_complete(hub_download(spec, offline=offline, tqdm_class=tqdm_class), repo_id=spec)


def shard_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint: those its index names, else ``model*.safetensors``."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise CheckpointError(f"{index} is not a safetensors index (no weight_map)") from None
        return [path / n for n in names]
    return sorted(path.glob("model*.safetensors"))


def check_complete(path: Path, repo_id: Optional[str] = None) -> Path:
    """``snapshot_download`` can return a partial snapshot offline: check config and every shard ourselves."""
    missing = [] if (path / "config.json").is_file() else ["config.json"]
    shards = shard_files(path)
    if not shards:
        missing.append("model.safetensors")
    missing += [s.name for s in shards if not s.is_file()]
    if missing:
        fix = f"`hf download {repo_id} --local-dir DIR`" if repo_id else "a complete copy of the checkpoint"
        raise ModelUnavailable(f"{path} is missing {', '.join(missing[:6])}; get {fix}")
    return path


# ----------------------------------------------------------------------------------------------------------------
# reading the config files
# ----------------------------------------------------------------------------------------------------------------
def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid JSON ({e})") from None


def local_llm_dir(pretrained_llm: Optional[str], checkpoint_dir: Optional[Path]) -> Optional[Path]:
    """The local directory ``pretrained_llm`` names, if there is one: absolute, relative to the checkpoint, or a folder
    of that name inside it (NeMo writes absolute paths of the machine that trained). It holds the LLM's config.json
    and may hold the text tokenizer."""
    if not pretrained_llm:
        return None
    candidates = [Path(pretrained_llm).expanduser()]
    if checkpoint_dir is not None:
        candidates += [Path(checkpoint_dir) / pretrained_llm, Path(checkpoint_dir) / Path(pretrained_llm).name]
    return next((c for c in candidates if c.is_dir()), None)


def read_llm_config(pretrained_llm: Optional[str], checkpoint_dir: Optional[Path]) -> Optional[dict]:
    """The config.json of the LLM a nested config names, when there is a local copy (None: there is not)."""
    directory = local_llm_dir(pretrained_llm, checkpoint_dir)
    if directory is None or not (directory / "config.json").is_file():
        return None
    return read_json(directory / "config.json")


def read_rnnt_vocab(checkpoint_dir: Path) -> Optional[list]:
    """``rnnt_tokenizer/vocab.json`` (docs/model.md §4.1), None when the checkpoint has none."""
    path = Path(checkpoint_dir) / "rnnt_tokenizer" / "vocab.json"
    return parse_rnnt_vocab(read_json(path), str(path)) if path.is_file() else None


def load_config(checkpoint_dir: Path) -> ModelConfig:
    """Parse ``<dir>/config.json``, with the files it refers to: the LLM's config.json (nested format) and
    ``rnnt_tokenizer/vocab.json`` when the config has no RNNT vocabulary."""
    checkpoint_dir = Path(checkpoint_dir)
    raw = read_json(checkpoint_dir / "config.json")
    llm = read_llm_config(nested_pretrained_llm(raw), checkpoint_dir)
    cfg = parse_config(raw, llm, read_rnnt_vocab(checkpoint_dir))
    rnnt = cfg.audio.rnnt
    if rnnt is not None and not rnnt.vocabulary:
        raise ConfigError(
            f"{checkpoint_dir}: the RNNT transcript head has no vocabulary (neither in config.json nor in "
            "rnnt_tokenizer/vocab.json)"
        )
    if rnnt is not None and len(rnnt.vocabulary) != rnnt.vocab_size:
        raise ConfigError(f"RNNT vocabulary has {len(rnnt.vocabulary)} pieces, the RNNT head {rnnt.vocab_size} classes")
    return cfg


def resolve_tokenizer_file(checkpoint_dir: Path, llm_dir: Optional[Path], tokenizer: Optional[str] = None,
                           offline: bool = False) -> Path:
    """The text tokenizer: an explicit path, the checkpoint's own tokenizer.json, the local LLM directory's, or
    Nano-9B-v2's at the revision NVIDIA pins (the release and the -mlx-* family ship none, docs/model.md §4.1)."""
    if tokenizer:
        p = Path(tokenizer).expanduser()
        p = p / "tokenizer.json" if p.is_dir() else p
        if not p.is_file():
            raise ModelUnavailable(f"tokenizer {tokenizer} is not a tokenizer.json file or a directory holding one")
        return p
    for d in (checkpoint_dir, llm_dir):
        if d is not None and (Path(d) / "tokenizer.json").is_file():
            return Path(d) / "tokenizer.json"
    try:
        snap = hub_download(NANO_9B_V2, patterns=["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"],
                            revision=NANO_9B_V2_REVISION, offline=offline)
    except ModelUnavailable as e:
        raise ModelUnavailable(
            f"{checkpoint_dir} ships no text tokenizer and {NANO_9B_V2}'s could not be fetched ({e}) "
            "Pass tokenizer=<path to tokenizer.json> (CLI: --tokenizer)."
        ) from None
    if not (snap / "tokenizer.json").is_file():
        raise ModelUnavailable(f"{snap} has no tokenizer.json; pass tokenizer=<path> (CLI: --tokenizer)")
    return snap / "tokenizer.json"


# ----------------------------------------------------------------------------------------------------------------
# reading and checking tensors
# ----------------------------------------------------------------------------------------------------------------
def read_weights(path: Path) -> dict[str, mx.array]:
    """All tensors of a checkpoint directory (lazy ``mx.load``; the safetensors numpy reader cannot read bf16)."""
    weights: dict[str, mx.array] = {}
    for shard in shard_files(Path(path)):
        if not shard.is_file():
            raise CheckpointError(f"shard {shard.name} named in the index is missing from {path}")
        try:
            part = mx.load(str(shard))
        except Exception as e:  # mlx raises a bare RuntimeError/ValueError for a broken file
            raise CheckpointError(f"{shard} is not a readable safetensors file ({e})") from None
        dup = set(part) & set(weights)
        if dup:
            raise CheckpointError(f"{shard.name} repeats tensors of another shard, e.g. {sorted(dup)[0]}")
        weights.update(part)
    if not weights:
        raise CheckpointError(f"{path} holds no safetensors weights")
    return layouts.as_nemo_layout(Path(path), weights)  # mlx-audio's converted folders (the fourth layout)


def integrity_problems(weights: dict[str, mx.array]) -> list[str]:
    """Tensors that cannot be right: non-finite values anywhere, or an all-zero weight matrix (a broken download of
    the release gave 21 all-zero tensors and a model that only says PAD, docs/checkpoints.md §5)."""
    problems = []
    for name, w in weights.items():
        if not mx.issubdtype(w.dtype, mx.floating):
            continue
        if not mx.all(mx.isfinite(w)).item():
            problems.append(f"{name} has NaN or infinite values")
        elif w.ndim >= 2 and w.size > 1 and not mx.any(w != 0).item():
            problems.append(f"{name} is all zeros")
    return problems


# ----------------------------------------------------------------------------------------------------------------
# layouts
# ----------------------------------------------------------------------------------------------------------------
def _layout_candidates(w: mx.array) -> Iterable[tuple[str, Callable[[mx.array], mx.array]]]:
    """PyTorch -> our layouts, by rank (docs/checkpoints.md §2, docs/model.md §4.5). 3-D: Conv1d [out, in, k] ->
    [out, k, in] (mlx conv) and ConvTranspose1d [in, out, k] -> [in, k, out] (matmul form); 4-D: Conv2d
    [out, in, kh, kw] -> [out, kh, kw, in]; a trailing k=1 axis dropped for pointwise convs computed as matmuls."""
    if w.ndim == 3:
        yield "swap last two axes", lambda a: a.swapaxes(1, 2)
    if w.ndim == 4:
        yield "conv2d to channels-last", lambda a: a.transpose(0, 2, 3, 1)
    if w.ndim >= 2 and w.shape[-1] == 1:
        yield "drop the k=1 axis", lambda a: a.reshape(a.shape[:-1])


def fit_layout(name: str, w: mx.array, expected: tuple) -> mx.array:
    """Return ``w`` in the expected shape, transforming only when its shape says it is in a PyTorch layout, so that
    fitting an already fitted tensor is a no-op."""
    if tuple(w.shape) == tuple(expected):
        return w
    fits = [f for _, f in _layout_candidates(w) if tuple(f(mx.zeros(w.shape, dtype=mx.bool_)).shape) == tuple(expected)]
    if len(fits) != 1:
        raise CheckpointError(f"{name} has shape {list(w.shape)}, the model expects {list(expected)}")
    return fits[0](w)


# ----------------------------------------------------------------------------------------------------------------
# quantization
# ----------------------------------------------------------------------------------------------------------------
def quantized_paths(weights: dict) -> set[str]:
    return {k[: -len(".scales")] for k in weights if k.endswith(".scales")}


def infer_quant_spec(weights: dict, path: str) -> QuantSpec:
    """Bits and group size of a quantized module from its packed weight and scales (MLX affine layout)."""
    w, s = weights[f"{path}.weight"], weights[f"{path}.scales"]
    for bits in (4, 8, 2, 3, 5, 6):
        in_dims = w.shape[-1] * 32 // bits
        if in_dims % s.shape[-1] == 0:
            group = in_dims // s.shape[-1]
            if group in (32, 64, 128):
                return QuantSpec(group, bits)
    raise CheckpointError(f"{path} is quantized in a layout voicechat cannot read (weight {w.shape}, scales {s.shape})")


def quantize_modules(model: nn.Module, weights: dict, qcfg: Optional[QuantizationConfig], prefix: str = "") -> None:
    """Swap every Linear / Embedding whose ``.scales`` the checkpoint has for its quantized form, with the bits and
    group size the config names (checked against the tensors)."""
    paths = {p[len(prefix):] for p in quantized_paths(weights) if p.startswith(prefix)}
    if not paths:
        return
    problems = []
    specs = {}
    for p in paths:
        found = infer_quant_spec(weights, prefix + p)
        named = qcfg.spec_for(prefix + p) if qcfg else None
        if named is not None and (named.bits, named.group_size) != (found.bits, found.group_size):
            # the packed shapes admit several (bits, group) pairs; take the config's if it fits them
            in_dims = weights[f"{prefix}{p}.weight"].shape[-1] * 32 // named.bits
            if in_dims // named.group_size != weights[f"{prefix}{p}.scales"].shape[-1]:
                problems.append(f"{prefix}{p}: config says {named.bits}-bit group {named.group_size}, "
                                "tensors do not fit")
                continue
            found = named
        specs[p] = found
    if problems:
        raise CheckpointError("quantization mismatch: " + "; ".join(sorted(problems)))

    def predicate(path: str, module: nn.Module):
        spec = specs.get(path)
        if spec is None or not hasattr(module, "to_quantized"):
            return False
        return {"group_size": spec.group_size, "bits": spec.bits}

    nn.quantize(model, class_predicate=predicate)
    have = {k for k, m in model.named_modules() if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))}
    unknown = sorted(paths - have)
    if unknown:
        raise CheckpointError(f"quantized tensors for modules the model cannot quantize: {', '.join(unknown[:5])}")


# ----------------------------------------------------------------------------------------------------------------
# strict loading
# ----------------------------------------------------------------------------------------------------------------
def load_into(model: nn.Module, weights: dict[str, mx.array], prefix: str = "", optional: Iterable[str] = (),
              dtype_for: Optional[Callable[[str, mx.array], mx.Dtype]] = None) -> list[str]:
    """Load the tensors under ``prefix`` into ``model`` in one strict step.

    Missing keys (except those matching an ``optional`` regex: buffers the model derives itself), unexpected keys and
    shape mismatches are collected and raised together; ``UNUSED_KEYS`` are skipped. ``dtype_for(name, array)`` picks
    each float tensor's dtype. Returns the names of the optional keys that the checkpoint did not have.
    """
    sub = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix) and not UNUSED_KEYS.search(k)}
    expected = dict(tree_flatten(model.parameters()))
    optional_re = [re.compile(p) for p in optional]
    problems, fitted = [], {}
    for name, w in sub.items():
        if name not in expected:
            problems.append(f"unexpected {prefix}{name} {list(w.shape)}")
            continue
        try:
            w = fit_layout(prefix + name, w, expected[name].shape)
        except CheckpointError as e:
            problems.append(str(e))
            continue
        target = expected[name].dtype
        if mx.issubdtype(w.dtype, mx.floating) and mx.issubdtype(target, mx.floating):
            w = w.astype(dtype_for(prefix + name, w) if dtype_for else target)
        elif w.dtype != target:
            w = w.astype(target)
        fitted[name] = w
    absent = [n for n in expected if n not in sub]
    skipped = [n for n in absent if any(r.search(prefix + n) for r in optional_re)]
    problems += [f"missing {prefix}{n} {list(expected[n].shape)}" for n in absent if n not in skipped]
    if problems:
        shown = sorted(problems)
        more = f" (and {len(shown) - 12} more)" if len(shown) > 12 else ""
        raise CheckpointError(f"{len(shown)} problem(s) loading the weights: " + "; ".join(shown[:12]) + more)
    model.update(tree_unflatten(list(fitted.items())))
    return [prefix + n for n in skipped]
