"""Character-aware subword encoder ``embed_subword`` of EAR-TTS (docs/model.md §2.5.3).

A subword id becomes the ids of its characters (the text tokenizer's single-character tokens), a T5Gemma encoder
runs over them, the masked mean over real characters is projected to the TTS width, and two small flag embeddings
(continuation subword; BOS / EOS) are added at every position.

Keys (under ``tts_model.tts_model.embed_subword.``): ``embed_tokens``, ``proj_embedding``,
``backbone.encoder.{layers.N..., norm}``, ``subword_flag_emb.{cont_emb, is_continuation, pad_tensor}``,
``bos_eos_emb.{special_emb, special_flags, pad_tensor}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

import mlx.core as mx
import mlx.nn as nn

from ..config import CharEncoderConfig
from ..errors import ConfigError
from ..layers import Linear
from .layers import GatedMLP, RMSNorm, merge_heads, rope, split_heads

# docs/model.md §2.5.3: single-character tokens of the Nemotron tokenizer (TRT asserts 256); +1 pad row
CHAR_VOCAB_SIZE = 256
WORD_START_PREFIXES = ("Ġ", "▁", "<")  # docs/model.md §2.5.3: tokens starting with these are not continuations


# ----------------------------------------------------------------------------------------------------------------
# tables derived from the text tokenizer
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CharTable:
    """NeMo ``build_vocabs``: subword id -> ids of its characters found in the char vocabulary.

    Subwords without any such character are absent (they encode to zero); the extra subword ``pad_subword``
    (= vocabulary size) maps to the single padding char ``num_chars``."""

    chars: dict
    num_chars: int
    pad_subword: int

    @classmethod
    def from_vocab(cls, vocab: dict[str, int], expected: int = CHAR_VOCAB_SIZE) -> "CharTable":
        singles = sorted((i, tok) for tok, i in vocab.items() if len(tok) == 1)
        if len(singles) != expected:
            raise ConfigError(
                f"the text tokenizer has {len(singles)} single-character tokens; the TTS character encoder needs "
                f"exactly {expected} (+1 padding row in embed_tokens): is this the model's tokenizer?"
            )
        char_id = {tok: c for c, (_, tok) in enumerate(singles)}
        chars = {i: ids for tok, i in vocab.items() if (ids := tuple(char_id[c] for c in tok if c in char_id))}
        chars[len(vocab)] = (expected,)
        return cls(chars, expected, len(vocab))

    def lookup(self, subword_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Padded char ids [N, L] (pad = ``num_chars``; L >= 1 so an all-empty batch still has a column) and
        lengths [N]."""
        seqs = [self.chars.get(int(i), ()) for i in subword_ids]
        lengths = np.array([len(s) for s in seqs], dtype=np.int32)
        ids = np.full((len(seqs), max(1, int(lengths.max(initial=0)))), self.num_chars, dtype=np.int32)
        for row, s in enumerate(seqs):
            ids[row, : len(s)] = s
        return ids, lengths

    def device_table(self, size: int) -> tuple[mx.array, mx.array]:
        """The whole table on the device, so a subword id computed there is spelled there: char ids
        [size + 1, longest] (pad = ``num_chars``) and lengths [size + 1]; ids without characters have length 0 and
        row ``size`` (reached by any id >= size) too."""
        ids, lengths = self.lookup(range(size + 1))
        lengths[size] = 0
        return mx.array(ids), mx.array(lengths)


def flag_tables(vocab: dict[str, int], bos_id: Optional[int], eos_id: Optional[int]) -> dict:
    """The integer buffers of the two flag embeddings, computed as NeMo's constructors do (docs/model.md §2.5.3), as an
    update for ``CharAwareSubwordEncoder``.

    ``subword_flag_emb``: ``is_continuation`` [V+1] (1 unless the token starts with Ġ, ▁ or <; 0 for the extra pad id
    V), ``pad_tensor`` = V. ``bos_eos_emb``: NeMo's vocab size is the largest id M = V-1 (not M+1), so
    ``special_flags`` [M+1] covers ids 0..M-1 (1 = bos, 2 = eos, else 0) plus 0 for the pad id M, ``pad_tensor`` = M.
    """
    size = len(vocab)
    tokens = {i: tok for tok, i in vocab.items()}
    if sorted(tokens) != list(range(size)):
        raise ConfigError(f"the text tokenizer's ids are not 0..{size - 1} without gaps")
    continuation = [0 if tokens[i].startswith(WORD_START_PREFIXES) else 1 for i in range(size)] + [0]
    largest = size - 1
    special = [1 if i == bos_id else 2 if i == eos_id else 0 for i in range(largest)] + [0]
    return {
        "subword_flag_emb": {"is_continuation": mx.array(continuation, dtype=mx.int32),
                             "pad_tensor": mx.array(size, dtype=mx.int32)},
        "bos_eos_emb": {"special_flags": mx.array(special, dtype=mx.int32),
                        "pad_tensor": mx.array(largest, dtype=mx.int32)},
    }


# ----------------------------------------------------------------------------------------------------------------
# T5Gemma encoder (HF ``T5GemmaEncoder`` without its embedding table)
# ----------------------------------------------------------------------------------------------------------------
def softcap(scores: mx.array, cap: float) -> mx.array:
    return mx.tanh(scores / cap) * cap


class T5GemmaSelfAttention(nn.Module):
    """Bidirectional GQA attention over a subword's characters: RoPE (no q/k norms), scores scaled by
    ``query_pre_attn_scalar^-0.5`` then soft-capped, padded keys masked. The encoder layer's sliding window (4096)
    is longer than any subword, so it never masks anything."""

    def __init__(self, cfg: CharEncoderConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.scale = cfg.query_pre_attn_scalar ** -0.5
        self.cap = cfg.attn_logit_softcapping
        self.rope_base = cfg.rope_base
        self.q_proj = Linear(h, self.num_heads * d, bias=False)
        self.k_proj = Linear(h, self.num_kv_heads * d, bias=False)
        self.v_proj = Linear(h, self.num_kv_heads * d, bias=False)
        self.o_proj = Linear(self.num_heads * d, h, bias=False)

    def __call__(self, x: mx.array, key_mask: mx.array) -> mx.array:
        # [N, L, H], key_mask [N, L] -> [N, L, H]
        repeat = self.num_heads // self.num_kv_heads
        q = rope(split_heads(self.q_proj(x), self.num_heads), self.rope_base)
        k = mx.repeat(rope(split_heads(self.k_proj(x), self.num_kv_heads), self.rope_base), repeat, axis=1)
        v = mx.repeat(split_heads(self.v_proj(x), self.num_kv_heads), repeat, axis=1)
        scores = softcap((q @ k.swapaxes(-1, -2)) * self.scale, self.cap)
        # HF adds the dtype's lowest value (not -inf), so a subword without characters stays finite
        scores = mx.where(key_mask[:, None, None, :], scores, mx.finfo(scores.dtype).min)
        probs = mx.softmax(scores.astype(mx.float32), axis=-1).astype(v.dtype)
        return self.o_proj(merge_heads(probs @ v))


class T5GemmaEncoderLayer(nn.Module):
    def __init__(self, cfg: CharEncoderConfig):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.self_attn = T5GemmaSelfAttention(cfg)
        self.mlp = GatedMLP(h, cfg.intermediate_size)
        self.pre_self_attn_layernorm = RMSNorm(h, eps)
        self.post_self_attn_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        self.post_feedforward_layernorm = RMSNorm(h, eps)

    def __call__(self, x: mx.array, key_mask: mx.array) -> mx.array:
        x = x + self.post_self_attn_layernorm(self.self_attn(self.pre_self_attn_layernorm(x), key_mask))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class T5GemmaEncoder(nn.Module):
    def __init__(self, cfg: CharEncoderConfig):
        super().__init__()
        self.layers = [T5GemmaEncoderLayer(cfg) for _ in range(cfg.num_hidden_layers)]
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def __call__(self, embeds: mx.array, key_mask: mx.array) -> mx.array:
        # [N, L, H] -> [N, L, H]; T5Gemma scales its inputs by sqrt(hidden) even when given embeddings
        x = embeds * mx.array(math.sqrt(embeds.shape[-1]), dtype=embeds.dtype)
        for layer in self.layers:
            x = layer(x, key_mask)
        return self.norm(x)


class T5GemmaBackbone(nn.Module):
    """Holds the encoder under the key NeMo's ``AutoModelForTextEncoding`` gives it (``backbone.encoder``)."""

    def __init__(self, cfg: CharEncoderConfig):
        super().__init__()
        self.encoder = T5GemmaEncoder(cfg)


# ----------------------------------------------------------------------------------------------------------------
# flag embeddings and the whole encoder
# ----------------------------------------------------------------------------------------------------------------
class SubwordFlagEmbedding(nn.Module):
    """Adds ``cont_emb[is_continuation[id]]``; ids at or past ``pad_tensor`` (= V) read the pad entry."""

    def __init__(self, text_vocab_size: int, dim: int):
        super().__init__()
        self.cont_emb = nn.Embedding(2, dim)
        self.is_continuation = mx.zeros((text_vocab_size + 1,), dtype=mx.int32)
        self.pad_tensor = mx.array(text_vocab_size, dtype=mx.int32)

    def __call__(self, embeds: mx.array, ids: mx.array) -> mx.array:
        return embeds + self.cont_emb(self.is_continuation[mx.minimum(ids, self.pad_tensor)])


class BOSEOSEmbedding(nn.Module):
    """Adds ``special_emb[special_flags[id]]`` (0 regular, 1 bos, 2 eos); ids at or past ``pad_tensor`` (= V-1, so
    the last token id too) read the pad entry."""

    def __init__(self, text_vocab_size: int, dim: int):
        super().__init__()
        self.special_emb = nn.Embedding(3, dim)
        self.special_flags = mx.zeros((text_vocab_size,), dtype=mx.int32)
        self.pad_tensor = mx.array(text_vocab_size - 1, dtype=mx.int32)

    def __call__(self, embeds: mx.array, ids: mx.array) -> mx.array:
        return embeds + self.special_emb(self.special_flags[mx.minimum(ids, self.pad_tensor)])


class CharAwareSubwordEncoder(nn.Module):
    """Subword ids -> TTS-width embeddings. Needs ``char_table`` (from the text tokenizer) before use."""

    def __init__(self, cfg: CharEncoderConfig, out_size: int, text_vocab_size: int, use_subword_flag_emb: bool = True,
                 use_bos_eos_emb: bool = True):
        super().__init__()
        self.text_vocab_size = text_vocab_size
        if (use_subword_flag_emb or use_bos_eos_emb) and cfg.hidden_size != out_size:
            # NeMo sizes the flag tables with the encoder width and adds them to TTS-width embeddings
            raise ConfigError(f"TTS char encoder hidden_size {cfg.hidden_size} != TTS hidden_size {out_size}; "
                              "NeMo's flag embeddings require them equal")
        self.embed_tokens = nn.Embedding(CHAR_VOCAB_SIZE + 1, cfg.hidden_size)
        self.proj_embedding = Linear(cfg.hidden_size, out_size, bias=False)
        self.backbone = T5GemmaBackbone(cfg)
        if use_subword_flag_emb:
            self.subword_flag_emb = SubwordFlagEmbedding(text_vocab_size, cfg.hidden_size)
        if use_bos_eos_emb:
            self.bos_eos_emb = BOSEOSEmbedding(text_vocab_size, cfg.hidden_size)
        self.char_table: Optional[CharTable] = None

    def encode_chars(self, char_ids: mx.array, lengths: mx.array) -> mx.array:
        """[N, L] char ids, [N] lengths -> [N, out]: masked mean of the encoder output, then ``proj_embedding``."""
        mask = mx.arange(char_ids.shape[1]) < lengths[:, None]
        hidden = self.backbone.encoder(self.embed_tokens(char_ids), mask)
        total = (hidden * mask[..., None].astype(hidden.dtype)).sum(axis=1)
        mean = total / mx.maximum(lengths, 1)[:, None].astype(hidden.dtype)
        return self.proj_embedding(mean)

    def __call__(self, subword_ids, subword_mask) -> mx.array:
        """Ids and mask [B, T] (host or device; at least one True) -> [B, T, out]: encoded subwords where the mask is
        True, zero elsewhere, then the flag embeddings at every position. The ids are spelled on the device (all
        subwords padded to the longest token), so an id the LLM computed there needs no trip to the host."""
        if self.char_table is None:
            raise RuntimeError("CharAwareSubwordEncoder has no char table "
                               "(set_char_table(CharTable.from_vocab(vocab)))")
        ids = mx.array(subword_ids).astype(mx.int32)
        mask = mx.array(subword_mask).astype(mx.bool_)
        table, lengths = self.spelling()
        rows = mx.minimum(ids, table.shape[0] - 1).reshape(-1)
        encoded = self.encode_chars(table[rows], lengths[rows]).reshape(*ids.shape, -1)
        embeds = mx.where(mask[..., None], encoded, 0.0)
        if "subword_flag_emb" in self:
            embeds = self.subword_flag_emb(embeds, ids)
        if "bos_eos_emb" in self:
            embeds = self.bos_eos_emb(embeds, ids)
        return embeds

    def set_char_table(self, table: CharTable) -> None:
        """Attach the char table of the text tokenizer, with its device copy (built here, outside any compiled
        function)."""
        self.char_table = table
        self._spelling = table.device_table(self.text_vocab_size)
        mx.eval(self._spelling)

    def spelling(self) -> tuple[mx.array, mx.array]:
        return self._spelling
