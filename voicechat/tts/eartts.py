"""EAR-TTS speech generator ``RVQEARTTSModel`` (``tts_model.tts_model.*``, docs/model.md §2.5): warm-up, frame step.

One session (batch 1) runs the backbone on two rows, [conditional; unconditional] (classifier-free guidance):
the conditioning of row 1 is ``null_emb`` everywhere. A step embeds the previous frame's 31 codes and the current
text subword, runs the backbone one position further, then draws 31 new codes with the MoG head in the unmasking
schedule (docs/model.md §2.5.8). The loop (not this module) decides which subword and which previous code feed a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Optional

import numpy as np

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..config import TTSConfig
from ..errors import CheckpointError, ConfigError
from ..layers import Linear
from .gemma3 import Gemma3TextModel
from .layers import RMSNorm
from .mog import Filters, KeyNoise, MoGHead, NoiseSource
from .subword import CharAwareSubwordEncoder, CharTable, flag_tables

# NeMo builds the fusion as GatedProjectedSumRMSNorm(H, H, H, num_quantizers): the 4th positional argument is
# `final_norm`, so `num_codebooks` keeps its default 31 and the audio embedding is always divided by 31
# (docs/model.md §2.5.4).
FUSION_AUDIO_DIVISOR = 31
# docs/model.md §2.5.9: text prompt [eos] only (no TTS system prompt), one frame of silence
WARMUP_LEADING_TEXT_FRAMES = 1
WARMUP_SILENT_TAIL_FRAMES = 2  # docs/model.md §2.5.9: last 2 prompt frames zeroed


# ----------------------------------------------------------------------------------------------------------------
# small math
# ----------------------------------------------------------------------------------------------------------------
def unmasking_schedule(num_quantizers: int, num_iterations: int, exponent: float) -> tuple[int, ...]:
    """Codebooks decided per iteration: masked counts ceil((1 - r^e)^(1/e) * Q) for r = i / n, in float32 as NeMo;
    each iteration decides the difference to the next count (docs/model.md §2.5.8). Release: [0,0,0,1,1,3,4,22]."""
    rates = np.linspace(0.0, 1.0, num_iterations + 1, dtype=np.float32)[:-1]
    e = np.float32(exponent)
    masked = np.ceil((np.float32(1.0) - rates**e) ** (np.float32(1.0) / e) * np.float32(num_quantizers)).astype(int)
    return tuple(int(k) for k in masked - np.append(masked[1:], 0))


def depthsum(codebooks: mx.array, code: mx.array) -> mx.array:
    """Sum over codebooks q of ``codebooks[q][code_q]``; code K (speech pad / not yet decided) adds zero
    (docs/model.md §2.5.4). codebooks [Q, K, D], code [..., Q] -> [..., D]"""
    num_q, size = codebooks.shape[:2]
    picked = codebooks[mx.arange(num_q), mx.minimum(code, size - 1)]  # [..., Q, D]
    return (picked * (code < size)[..., None].astype(picked.dtype)).sum(axis=-2)


@dataclass(frozen=True)
class Codebook:
    """One codebook as the nearest-vector search reads it, made once at load (evaluated views of arrays computed
    once): in the frame, slicing the stacked codebooks, transposing, scaling a product and broadcasting the norms are
    graph nodes per codebook, 31 times per MoG decision (on a CPU each node costs microseconds: docs/platform.md §4)."""

    vectors: mx.array  # E [K, D]
    doubled_t: mx.array  # (2 E)^T [D, K], a transposed view: z.(2 E[v]) is exactly 2 (z.E[v]) (a power of two scales
    # without rounding), and the matmul reads E transposed as before
    sqnorms: mx.array  # ||E[v]||^2 [1, K]

    @staticmethod
    def split(codebooks: mx.array) -> list["Codebook"]:
        """[Q, K, D] -> Q codebooks."""
        doubled_t, sqnorms = (2 * codebooks).swapaxes(1, 2), (codebooks * codebooks).sum(axis=-1, keepdims=True)
        return [Codebook(*(compute.entry(a, q) for a in (codebooks, doubled_t)), compute.entry(sqnorms, q).T)
                for q in range(codebooks.shape[0])]

    def arrays(self) -> list[mx.array]:
        return [self.vectors, self.doubled_t, self.sqnorms]


def nearest_code(book: Codebook, z: mx.array) -> mx.array:
    """argmin_v ||E[v]||^2 - 2 z.E[v]: [n, D] -> [n], a row per conversation (each its own product on the CPU)"""
    return mx.argmin(book.sqnorms - compute.row_product(z, book.doubled_t), axis=-1)


# ----------------------------------------------------------------------------------------------------------------
# warm-up inputs (DuplexEARTTS.set_init_inputs, docs/model.md §2.5.9)
# ----------------------------------------------------------------------------------------------------------------
def prompt_samples(duration: float, sample_rate: int, samples_per_frame: int) -> int:
    """Samples of the speaker prompt: whole frames of ``duration`` seconds (3 s at 22.05 kHz -> 37 frames, 65268)."""
    return int((duration * sample_rate // samples_per_frame) * samples_per_frame)


def warmup_waveform(speaker_audio: Optional[np.ndarray], num_samples: int, samples_per_frame: int) -> np.ndarray:
    """The codec input of the warm-up: one silent frame, then the prompt (the speaker audio cropped, or repeated
    when shorter; zeros for a cached speaker latent) with its last 2 frames zeroed: [(1 + frames) * spf]."""
    prompt = np.zeros(num_samples, dtype=np.float32)
    if speaker_audio is not None and len(speaker_audio) > 0:
        audio = np.asarray(speaker_audio, dtype=np.float32)
        prompt[:] = np.tile(audio, -(-num_samples // len(audio)))[:num_samples]
    prompt[-WARMUP_SILENT_TAIL_FRAMES * samples_per_frame:] = 0.0
    return np.concatenate([np.zeros(WARMUP_LEADING_TEXT_FRAMES * samples_per_frame, dtype=np.float32), prompt])


@dataclass(frozen=True)
class WarmupInputs:
    """Per-frame inputs of the warm-up forward (host arrays, T frames)."""

    code: np.ndarray  # [T, Q] int
    audio_mask: np.ndarray  # [T] bool: True from the BOS frame on
    subword_ids: np.ndarray  # [T] int
    subword_mask: np.ndarray  # [T] bool


def warmup_inputs(prompt_codes: np.ndarray, text_pad_id: int, text_eos_id: int, speech_pad_id: int) -> WarmupInputs:
    """From the codec codes [T+1, Q] of ``warmup_waveform``: text [eos] + [pad]*(T-1) + [eos] shifted left by one,
    codes with frame 0 and the BOS frame set to the speech pad, everything cut to T frames. For T = 37:
    subword ids [pad]*36 + [eos], subword mask True at 35, 36, audio mask True at 36 only."""
    codes = np.array(prompt_codes, dtype=np.int64)
    n = codes.shape[0]  # T + 1
    frames = n - WARMUP_LEADING_TEXT_FRAMES
    text = np.array([text_eos_id] * WARMUP_LEADING_TEXT_FRAMES + [text_pad_id] * (frames - 1) + [text_eos_id])
    non_prompt = np.zeros(n, dtype=bool)
    non_prompt[-2:] = True  # the last prompt frame carries BOS
    subword_mask = np.zeros(n, dtype=bool)
    subword_mask[-3:] = True
    codes[0] = speech_pad_id
    codes[int(np.argmax(non_prompt))] = speech_pad_id
    shifted_text = np.append(text[1:], 0)
    return WarmupInputs(codes[:-1], non_prompt[:-1], shifted_text[:-1], subword_mask[:-1])


# ----------------------------------------------------------------------------------------------------------------
# modules
# ----------------------------------------------------------------------------------------------------------------
class GatedProjectedSumRMSNorm(nn.Module):
    """``final_norm(sigmoid(r) * (g * audio_proj(a / 31) + (1 - g) * text_proj(t)))``, g = sigmoid(gate)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.audio_proj = Linear(hidden_size, hidden_size)
        self.text_proj = Linear(hidden_size, hidden_size)
        self.gate = mx.zeros((hidden_size,))
        self.residual_scale = mx.array(0.0)
        self.final_norm = RMSNorm(hidden_size)

    def __call__(self, audio: mx.array, text: mx.array) -> mx.array:
        a = self.audio_proj(audio / FUSION_AUDIO_DIVISOR)
        t = self.text_proj(text)
        g = mx.sigmoid(self.gate)
        return self.final_norm(mx.sigmoid(self.residual_scale) * (g * a + (1.0 - g) * t))


@dataclass(frozen=True)
class TTSSettings:
    """One conversation's code sampling: classifier-free guidance scale, top-p or top-k (at most one), noise scale."""

    guidance_scale: float
    top_p: Optional[float]
    top_k: Optional[int]
    noise_scale: float


@dataclass
class TTSState:
    """One session's TTS state: the backbone caches of both CFG rows (positions continue across steps) and its
    random source. Evaluate ``arrays()`` with a step's codes to keep the graph short."""

    caches: list
    noise: NoiseSource

    @property
    def position(self) -> int:
        return self.caches[0].offset

    def arrays(self) -> list[mx.array]:
        keys = [self.noise.key] if isinstance(self.noise, KeyNoise) else []
        return [a for c in self.caches for a in c.arrays()] + keys


class RVQEARTTSModel(nn.Module):
    """``tts_model.tts_model``. ``text_vocab_size``: number of text token ids (sizes the flag tables)."""

    def __init__(self, cfg: TTSConfig, text_vocab_size: int):
        super().__init__()
        h, latent = cfg.backbone.hidden_size, cfg.latent_size
        self.cfg = cfg
        self.schedule = unmasking_schedule(cfg.num_quantizers, cfg.num_iterations, cfg.exponent)
        self.backbone = Gemma3TextModel(cfg.backbone)
        self.bos_emb = mx.zeros((h,))
        self.null_emb = mx.zeros((h,))
        self.embed_code = Linear(latent, h, bias=False)
        self.embed_subword = CharAwareSubwordEncoder(cfg.char_encoder, h, text_vocab_size, cfg.use_subword_flag_emb,
                                                     cfg.use_bos_eos_emb)
        if cfg.use_gated_fusion:
            self.gated_fusion_audio_text = GatedProjectedSumRMSNorm(h)
        if cfg.use_audio_prompt_frozen_projection:
            self.audio_prompt_projection_W = mx.zeros((h, h))
        self.mog_head = MoGHead(cfg.mog, h, latent)
        self.rvq_embs = mx.zeros((cfg.num_quantizers, cfg.codebook_size, latent))
        self._codebooks = compute.Derived()
        self._compiled = compute.CompiledFunctions()

    # -- text side ---------------------------------------------------------------------------------------------
    def set_text_vocab(self, vocab: dict[str, int], bos_id: Optional[int], eos_id: Optional[int],
                       fill_flag_tables: bool = False) -> None:
        """Attach the char table of the text tokenizer; with ``fill_flag_tables`` also compute the flag buffers
        (for checkpoints that do not carry them: load with ``optional=model.DERIVED_KEYS``)."""
        size = self.embed_subword.text_vocab_size
        if fill_flag_tables and len(vocab) != size:
            raise ConfigError(f"the text tokenizer has {len(vocab)} tokens, the TTS flag tables {size}")
        self.embed_subword.set_char_table(CharTable.from_vocab(vocab))
        if fill_flag_tables:
            tables = flag_tables(vocab, bos_id, eos_id)
            self.embed_subword.update({k: v for k, v in tables.items() if k in self.embed_subword})

    def conditioning(self, subword_ids, subword_mask: np.ndarray) -> mx.array:
        """[1, T] ids (host or device) and host mask -> [2, T, H]: row 0 the subword embeddings (zero when no mask is
        True: NeMo then skips the encoder and the flags), row 1 ``null_emb``
        (docs/model.md §2.5.3 ``_prepare_conditioning``)."""
        h = self.null_emb.shape[0]
        if np.any(subword_mask):
            cond = self.embed_subword(subword_ids, subword_mask)
        else:
            cond = mx.zeros((*np.shape(subword_mask), h), dtype=self.null_emb.dtype)
        return mx.concatenate([cond, mx.broadcast_to(self.null_emb, cond.shape).astype(cond.dtype)])

    def fuse(self, code_embeds: mx.array, cond: mx.array) -> mx.array:
        """Audio [1, T, H] (shared by both CFG rows) and conditioning [2, T, H] -> backbone input [2, T, H]."""
        if "gated_fusion_audio_text" in self:
            return self.gated_fusion_audio_text(code_embeds, cond)
        return code_embeds + cond

    # -- warm-up -----------------------------------------------------------------------------------------------
    @property
    def reads_latent(self) -> bool:
        """Whether the warm-up reads a speaker latent (``use_audio_prompt_frozen_projection``): without it, a latent
        changes nothing of the warm-up (docs/model.md §2.5.5)."""
        return "audio_prompt_projection_W" in self

    def warmup_code_embeds(self, inputs: WarmupInputs, latent: Optional[mx.array] = None) -> mx.array:
        """docs/model.md §2.5.5: embed the codes shifted right by one frame (frame 0 gets code 0, not the pad); before
        the BOS frame use the speaker latent (or, without one, the frozen projection of the code embeddings) when
        ``use_audio_prompt_frozen_projection``; add ``bos_emb`` at the BOS frame. -> [1, T, H]"""
        code = np.asarray(inputs.code)
        shifted = np.concatenate([np.zeros_like(code[:1]), code[:-1]])
        embeds = self.embed_code(depthsum(self.rvq_embs, mx.array(shifted.astype(np.int32))))  # [T, H]
        audio_mask = np.asarray(inputs.audio_mask, dtype=bool)
        bos = audio_mask & ~np.append(False, audio_mask[:-1])
        before_bos = np.cumsum(bos) == 0
        if self.reads_latent:
            if latent is None:
                prompt = embeds @ self.audio_prompt_projection_W
            elif latent.size != embeds.size:
                raise CheckpointError(f"speaker latent has shape {list(latent.shape)}, the warm-up needs "
                                      f"{list(embeds.shape)} ({len(code)} frames of the TTS width)")
            else:
                prompt = latent.reshape(embeds.shape).astype(embeds.dtype)
            embeds = mx.where(mx.array(before_bos)[:, None], prompt, embeds)
        embeds = embeds + mx.array(bos)[:, None].astype(embeds.dtype) * self.bos_emb
        return embeds[None]

    def warmup_conditioning(self, inputs: WarmupInputs) -> mx.array:
        """The warm-up's conditioning [2, T, H]: its subword ids and mask are the same for every speaker
        (:func:`warmup_inputs`), so a caller may keep it."""
        return self.conditioning(np.asarray(inputs.subword_ids)[None], np.asarray(inputs.subword_mask)[None])

    def warmup(self, inputs: WarmupInputs, latent: Optional[mx.array] = None,
               noise: Optional[NoiseSource] = None, cond: Optional[mx.array] = None) -> tuple[TTSState, mx.array]:
        """Run the warm-up forward on fresh caches and evaluate them (the speaker lives only in the caches).
        ``latent``: the cached speaker latent [1, T, H] (used only with ``use_audio_prompt_frozen_projection``, as
        NeMo). ``noise``: the session's random source (default: key 0). ``cond``: :meth:`warmup_conditioning`'s,
        when the caller keeps it. Returns (state, hidden [2, T, H])."""
        state = self.warmup_state(noise)
        x = self.warmup_input(inputs, latent, cond)
        hidden = self.backbone.norm(self.backbone.through(x, state.caches, range(len(self.backbone.layers))))
        mx.eval(hidden, state.arrays())
        return state, hidden

    def warmup_state(self, noise: Optional[NoiseSource] = None) -> TTSState:
        """Fresh caches for the warm-up and the session's random source (default: key 0)."""
        return TTSState(self.backbone.make_caches(), noise if noise is not None else KeyNoise(0))

    def warmup_input(self, inputs: WarmupInputs, latent: Optional[mx.array] = None,
                     cond: Optional[mx.array] = None) -> mx.array:
        """The warm-up forward's backbone input [2, T, H] (``latent`` and ``cond`` as :meth:`warmup` takes them)."""
        return self.fuse(self.warmup_code_embeds(inputs, latent), self.warmup_conditioning(inputs) if cond is None
                         else cond)

    # -- one frame ---------------------------------------------------------------------------------------------
    def step_hidden(self, state: TTSState, prev_code, subword_id, active: Optional[np.ndarray] = None) -> mx.array:
        """docs/model.md §2.5.6: backbone output [2R, 1, H] ([conditional rows; unconditional rows]) for one frame of
        R conversations from their previous codes [R, Q] (or [Q]) and current subwords [R] (or one); host values
        or device arrays: nothing here waits for the host. ``active``: the rows whose caches advance (a group's)."""
        code = mx.array(prev_code).astype(mx.int32)
        x = self._compiled.get("step inputs", self.step_inputs)(code.reshape(-1, code.shape[-1]),
                                                                mx.array(subword_id).astype(mx.int32).reshape(-1))
        return self.backbone.step(x, state.caches, None if active is None else np.concatenate([active, active]))

    def step_inputs(self, prev_code: mx.array, subword_id: mx.array) -> mx.array:
        """The backbone input of one step: the previous codes' embedding fused with the subword's conditioning, both
        CFG rows of each conversation. [R, Q], [R] -> [2R, 1, H]"""
        code_embeds = self.embed_code(depthsum(self.rvq_embs, prev_code[:, None]))  # [R, 1, H]
        cond = self.conditioning(subword_id[:, None], np.ones((subword_id.shape[0], 1), dtype=bool))
        return self.fuse(mx.concatenate([code_embeds, code_embeds]), cond)

    def resolved(self, guidance_scale: Optional[float] = None, top_p: Optional[float] = None,
                 top_k: Optional[int] = None, noise_scale: Optional[float] = None) -> "TTSSettings":
        """Settings with the config's defaults for those not given (a top-k wins over a top-p)."""
        cfg = self.cfg
        if top_p is None and top_k is None:
            top_p, top_k = cfg.top_p, cfg.top_k
        return TTSSettings(cfg.guidance_scale if guidance_scale is None else guidance_scale,
                           None if top_k is not None else top_p, top_k,
                           cfg.noise_scale if noise_scale is None else noise_scale)

    def generate_codes(self, hidden: mx.array, noise: NoiseSource, guidance_scale: Optional[float] = None,
                       top_p: Optional[float] = None, top_k: Optional[int] = None,
                       noise_scale: Optional[float] = None) -> mx.array:
        """docs/model.md §2.5.8 ``generate_step`` for one conversation: hidden [2, 1, H] -> codes [Q] (int32, on
        device); settings default to the config's (:meth:`generate_rows` does the work)."""
        iterations = sum(1 for k in self.schedule if k > 0)
        gumbels, normals = noise.frame(iterations, self.mog_head.num_predictions, self.rvq_embs.shape[-1])
        settings = [self.resolved(guidance_scale, top_p, top_k, noise_scale)]
        return self.generate_rows(hidden, gumbels, normals, settings)[0]

    def generate_rows(self, hidden: mx.array, gumbels: mx.array, normals: mx.array,
                      settings: list["TTSSettings"]) -> mx.array:
        """``generate_step`` for R conversations at once, each with its own settings (resolved) and draws:
        hidden [2R, 1, H], gumbels [n, R, components], normals [n, R, latent] -> codes [R, Q]. The frame's random
        draws come first (NeMo's order within each iteration: Gumbel, then normal); the rest is one compiled function
        per kind of setting (guided or not, the filter kinds present), the values its inputs."""
        filters = Filters.of([(s.top_p, s.top_k) for s in settings])
        guided = any(s.guidance_scale > 0 for s in settings)
        column = lambda values: mx.array(values, mx.float32).reshape(-1, 1)  # noqa: E731
        generate = self._compiled.get(("codes", guided, filters.kinds), partial(self._codes, guided, filters))
        return generate(hidden, gumbels, normals, column([s.guidance_scale for s in settings]),
                        column([s.noise_scale for s in settings]), *filters.arrays())

    def codebooks(self) -> list[Codebook]:
        return self._codebooks.of(self.rvq_embs, Codebook.split)

    def prepare(self) -> list[mx.array]:
        return [a for book in self.codebooks() for a in book.arrays()]

    def _codes(self, guided: bool, filters: Filters, hidden: mx.array, gumbels: mx.array, normals: mx.array,
               guidance_scale: mx.array, noise_scale: mx.array, *filter_arrays: mx.array) -> mx.array:
        """Per iteration i with k > 0: MoG over embed_code(sum of decided code vectors) + hidden with Gumbel noise
        gumbels[i], z = mu + exp(logs) * normals[i] * noise_scale, then k codebooks by residual nearest-vector
        quantisation against the unpadded codebooks (``rvq_embs``, read as :class:`Codebook`); every row its own."""
        books = self.codebooks()
        rows = hidden.shape[0] // 2
        halves = hidden.reshape(2, rows, hidden.shape[-1])
        cond, uncond = compute.entry(halves, 0), compute.entry(halves, 1)  # [R, H] each
        normals = normals.astype(hidden.dtype)  # randn_like(mu): one conversion, not a codebook's per decision
        noise_scale = noise_scale.astype(hidden.dtype)
        decided = mx.zeros((rows, self.rvq_embs.shape[-1]), dtype=hidden.dtype)  # depthsum of the codes decided so far
        choose = partial(filters.apply, kind=filter_arrays[0], mass=filter_arrays[1], k=filter_arrays[2])
        codes, start = [], 0
        for i, k in enumerate(k for k in self.schedule if k > 0):
            e = self.embed_code(decided)
            x = mx.concatenate([e + cond, e + uncond]) if guided else e + cond
            mu, logs = self.mog_head.infer(x, guidance_scale if guided else None, choose, compute.entry(gumbels, i))
            z = mu + mx.exp(logs) * compute.entry(normals, i) * noise_scale
            for book in books[start:start + k]:
                idx = nearest_code(book, z)
                chosen = book.vectors[idx]
                z, decided = z - chosen, decided + chosen
                codes.append(idx)
            start += k
        return mx.stack(codes, axis=-1).astype(mx.int32)

    def step(self, state: TTSState, prev_code, subword_id,
             guidance_scale: Optional[float] = None, top_p: Optional[float] = None, top_k: Optional[int] = None,
             noise_scale: Optional[float] = None) -> mx.array:
        """One 80 ms frame of one conversation: previous codes [Q] + current subword id (host or device) -> new codes
        [Q] (lazy; no host sync inside)."""
        hidden = self.step_hidden(state, prev_code, subword_id)
        return self.generate_codes(hidden, state.noise, guidance_scale, top_p, top_k, noise_scale)
