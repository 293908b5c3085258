"""The STT language-model position: fuse the input channels, run Nemotron-H, read the heads (docs/model.md §1.2 C-F).

Functions over a duck-typed ``stt`` object with ``embed_tokens`` (nn.Embedding / nn.QuantizedEmbedding), ``llm``
(:class:`~voicechat.llm.nemotron_h.NemotronH`), ``lm_head`` and ``function_head`` (None when the checkpoint has none,
NeMo 3.0.0's layout); the :class:`~voicechat.config.ModelConfig` (token ids resolved) is passed explicitly.
Per-session state is an :class:`LMState`. Nothing on the per-position path syncs with the host: the loop
evaluates a position's logits together with ``state.arrays`` and samples the text channel itself.
"""

from __future__ import annotations

from typing import Optional

from .. import compute
import mlx.core as mx

from ..config import ModelConfig
from ..errors import ConfigError


def _token_id(cfg: ModelConfig, name: str) -> int:
    tid = getattr(cfg, f"{name}_id")
    if tid is None:
        raise ConfigError(f"the {name} token id is not resolved; "
                          "build the ModelConfig with config_formats.with_token_ids")
    return tid


def text_logit_bias(cfg: ModelConfig) -> Optional[mx.array]:
    """[V] offsets added to the text logits: ``inference_{pad,bos,eos}_boost`` at their ids (docs/model.md §1.2 F, added
    one after another, so they accumulate when two ids coincide); None when no boost is set."""
    boosts = [(name, value) for name, value in (("pad", cfg.pad_boost), ("bos", cfg.bos_boost), ("eos", cfg.eos_boost))
              if value]
    if not boosts:
        return None
    ids = mx.array([_token_id(cfg, name) for name, _ in boosts])
    bias = mx.zeros((cfg.llm.vocab_size,)).at[ids].add(mx.array([value for _, value in boosts]))
    mx.eval(bias)
    return bias


class LMState:
    """One session (or, with ``rows``, a group's conversations, one per row): the Nemotron-H cache and the
    text-logit boosts (modules stay stateless)."""

    def __init__(self, stt, cfg: ModelConfig, rows: Optional[int] = None):
        self.cache = stt.llm.make_cache(rows)
        self.text_bias = text_logit_bias(cfg)
        self.pad_id = _token_id(cfg, "pad")

    @property
    def arrays(self) -> list[mx.array]:
        """What to evaluate together with a position's logits."""
        return self.cache.state


def _weighted(weight: float, x: mx.array) -> mx.array:
    return x if weight == 1.0 else weight * x


def fuse(stt, cfg: ModelConfig, audio: mx.array, prev_text: mx.array,
         prev_function: Optional[mx.array] = None) -> mx.array:
    """``w_text*E(text[t-1]) + w_user*audio[t] + w_func*E(func[t-1])`` (docs/model.md §1.2 D/F, BR's AddFusion); no
    function term when ``stt.function_head`` is None (NeMo 3.0.0). ``prev_function`` None means pad.

    audio [B, L, hidden], prev ids [B, L] -> [B, L, hidden]"""
    x = _weighted(cfg.text_channel_weight, stt.embed_tokens(prev_text)) + _weighted(cfg.user_channel_weight, audio)
    if stt.function_head is not None:
        if prev_function is None:
            prev_function = mx.full(prev_text.shape, _token_id(cfg, "pad"), prev_text.dtype)
        x = x + _weighted(cfg.function_channel_weight, stt.embed_tokens(prev_function))
    return x


def read_heads(stt, state: LMState, hidden: mx.array) -> tuple[mx.array, Optional[mx.array]]:
    """Both heads on the same normed hidden state (docs/model.md §2.4); text logits get the boosts.
    hidden [..., hidden] -> text_logits [..., V], function_logits [..., V] | None"""
    text = stt.lm_head(hidden)
    if state.text_bias is not None:
        text = text + state.text_bias
    function = stt.function_head(hidden) if stt.function_head is not None else None
    return text, function


PREFILL_CHUNK = 512  # prompt positions per LLM call: bounds a long prompt's memory (docs/limits.md §1)


def prefill(stt, cfg: ModelConfig, state: LMState, prompt_ids: mx.array,
            chunk: int = PREFILL_CHUNK) -> tuple[mx.array, Optional[mx.array]]:
    """The system prompt (docs/model.md §1.2 C-E): prompt embeddings on the audio channel (times the user weight), pad
    on the text and function channels at every prompt position. Returns the last position's (text_logits [B, V],
    function_logits [B, V] | None); prompt positions predict nothing, so the loop's next previous-token ids are pad.

    The positions go in calls of at most ``chunk``, each evaluated before the next: the cache carries them across
    calls as it carries a conversation's steps, so the result is the one-call prefill's (to float rounding), and a
    prompt's memory is bounded by the chunk rather than growing with its square.

    prompt_ids [B, P]"""
    pad = mx.full(prompt_ids[:, :chunk].shape, state.pad_id, prompt_ids.dtype)
    for start in range(0, prompt_ids.shape[1], chunk):
        ids = prompt_ids[:, start:start + chunk]
        hidden = stt.llm(fuse(stt, cfg, stt.embed_tokens(ids), pad[:, :ids.shape[1]], pad[:, :ids.shape[1]]),
                         state.cache)
        if start + chunk < prompt_ids.shape[1]:
            mx.eval(state.arrays)
    return read_heads(stt, state, hidden[:, -1])


def step(stt, cfg: ModelConfig, state: LMState, audio: mx.array, prev_text: mx.array,
         prev_function: Optional[mx.array] = None, active=None) -> tuple[mx.array, Optional[mx.array]]:
    """One timeline position (docs/model.md §1.2 F): fuse, one cached LLM step, both heads. ``active`` [B] bool
    (numpy; None: all): the rows of a group whose state advances.

    audio [B, hidden], prev_text / prev_function [B] -> text_logits [B, V], function_logits [B, V] | None"""
    prev_function = None if prev_function is None else prev_function[:, None]
    hidden = stt.llm(fuse(stt, cfg, audio[:, None], prev_text[:, None], prev_function), state.cache, active)
    return read_heads(stt, state, compute.entry(hidden, 0, axis=1))
