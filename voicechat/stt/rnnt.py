"""RNNT user-transcript head (BR/TRT only, docs/model.md §2.3): ``stt_model.rnnt_decoder.*`` and
``stt_model.rnnt_joint.*``, NeMo's RNNTDecoder (embedding + LSTM prediction network) and RNNTJoint, with NeMo's greedy
decoding run one encoder frame at a time (docs/model.md §1.2 J: the duplex loop feeds one ``asr_emb`` frame per 80 ms
step and carries the hypothesis), and NVIDIA's transcript normalisation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..config import RNNTConfig
from ..layers import Linear


# ----------------------------------------------------------------------------------------------------------------
# networks
# ----------------------------------------------------------------------------------------------------------------
LSTMState = list[tuple[mx.array, mx.array]]  # (h, c) per layer, each [B, H]


class LSTM(nn.Module):
    """torch.nn.LSTM (batch of one step), with torch's parameter names ``weight_ih_l{n}`` [4H, in],
    ``weight_hh_l{n}`` [4H, H], ``bias_ih_l{n}``, ``bias_hh_l{n}`` [4H]; gate order i, f, g, o."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        for n in range(num_layers):
            inputs = input_size if n == 0 else hidden_size
            setattr(self, f"weight_ih_l{n}", mx.zeros((4 * hidden_size, inputs)))
            setattr(self, f"weight_hh_l{n}", mx.zeros((4 * hidden_size, hidden_size)))
            setattr(self, f"bias_ih_l{n}", mx.zeros((4 * hidden_size,)))
            setattr(self, f"bias_hh_l{n}", mx.zeros((4 * hidden_size,)))

    def zero_state(self, batch: int) -> LSTMState:
        zeros = mx.zeros((batch, self.hidden_size), self.weight_hh_l0.dtype)
        return [(zeros, zeros)] * self.num_layers

    def __call__(self, x: mx.array, state: LSTMState) -> tuple[mx.array, LSTMState]:
        # x [B, in], state per layer -> output [B, H], new state
        new_state = []
        for n, (h, c) in enumerate(state):
            # each row is a conversation's (a group's transcripts): its own product on the CPU (compute.product)
            gates = (compute.row_product(x, getattr(self, f"weight_ih_l{n}").T) + getattr(self, f"bias_ih_l{n}")
                     + compute.row_product(h, getattr(self, f"weight_hh_l{n}").T) + getattr(self, f"bias_hh_l{n}"))
            i, f, g, o = mx.split(gates, 4, axis=-1)
            c = mx.sigmoid(f) * c + mx.sigmoid(i) * mx.tanh(g)
            h = mx.sigmoid(o) * mx.tanh(c)
            new_state.append((h, c))
            x = h
        return x, new_state


class DecoderRNN(nn.Module):
    """NeMo's LSTMDropout wrapper (``dec_rnn``): the LSTM sits at ``dec_rnn.lstm``; dropout is off at inference."""

    def __init__(self, cfg: RNNTConfig):
        super().__init__()
        self.lstm = LSTM(cfg.pred_hidden, cfg.pred_hidden, cfg.pred_rnn_layers)


class PredictionNetwork(nn.Module):
    def __init__(self, cfg: RNNTConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size + 1, cfg.pred_hidden)  # + blank, NeMo's blank_as_pad
        self.dec_rnn = DecoderRNN(cfg)


class RNNTDecoder(nn.Module):
    """``stt_model.rnnt_decoder``: the prediction network g = LSTM(embed(last token)) (docs/model.md §2.3)."""

    def __init__(self, cfg: RNNTConfig):
        super().__init__()
        self.prediction = PredictionNetwork(cfg)

    def predict(self, token: Optional[int], state: Optional[LSTMState]) -> tuple[mx.array, LSTMState]:
        """One step. ``token`` None is the start of the sequence: a zero input vector and, with ``state`` None, the
        zero state (NeMo's ``predict(None)``). Returns g [1, pred_hidden] and the new state."""
        return self.predict_rows([token], [state])[0]

    def predict_rows(self, tokens: list, states: list) -> list[tuple[mx.array, LSTMState]]:
        """:meth:`predict` of n hypotheses in one call (a group's transcripts): each one's g [1, pred_hidden] and new
        state."""
        lstm = self.prediction.dec_rnn.lstm
        embedded = self.prediction.embed(mx.array([0 if t is None else t for t in tokens]))
        started = mx.array([t is not None for t in tokens])[:, None]
        x = mx.where(started, embedded, mx.zeros((1, lstm.hidden_size), lstm.weight_hh_l0.dtype))
        states = [s if s is not None else lstm.zero_state(1) for s in states]
        state = [tuple(mx.concatenate([s[n][k] for s in states]) for k in (0, 1)) for n in range(lstm.num_layers)]
        g, new = lstm(x, state)
        return [(g[i:i + 1], [(h[i:i + 1], c[i:i + 1]) for h, c in new]) for i in range(len(tokens))]


class RNNTJoint(nn.Module):
    """``stt_model.rnnt_joint``: logits = joint_net(enc(f) + pred(g)), ``joint_net`` = [ReLU, Dropout?, Linear] as
    NeMo's Sequential, so the Linear is ``joint_net.2`` when the ASR config had joint dropout (docs/model.md §2.3)."""

    def __init__(self, cfg: RNNTConfig):
        super().__init__()
        self.enc = Linear(cfg.encoder_hidden, cfg.joint_hidden)
        self.pred = Linear(cfg.pred_hidden, cfg.joint_hidden)
        dropout = [nn.Dropout()] if cfg.joint_dropout else []
        self.joint_net = [nn.ReLU(), *dropout, Linear(cfg.joint_hidden, cfg.vocab_size + 1)]

    def __call__(self, projected_frame: mx.array, g: mx.array) -> mx.array:
        # enc(f) [n, J], g [n, pred_hidden] -> logits [n, vocab + 1], a row per conversation (each its own product
        # on the CPU: compute.product); dropout is the identity at inference
        hidden = nn.relu(projected_frame + self.pred(g[:, None])[:, 0])
        return self.joint_net[-1](hidden[:, None])[:, 0]


# ----------------------------------------------------------------------------------------------------------------
# greedy decoding, one frame at a time
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class RNNTState:
    """The hypothesis carried across frames: emitted ids, the last one, and the prediction network's state after it
    (None until the first symbol, which makes the next step the start-of-sequence step). ``prediction`` caches the
    prediction-network output for (last token, state): NeMo recomputes it at every step; the values are the same."""

    tokens: list[int] = field(default_factory=list)
    last_token: Optional[int] = None
    lstm_state: Optional[LSTMState] = None
    prediction: Optional[tuple[mx.array, LSTMState]] = None


class RNNTGreedy:
    """NeMo's ``GreedyRNNTInfer._greedy_decode`` for one frame at a time with a carried hypothesis (docs/model.md §2.3):
    at each frame, up to ``max_symbols`` times: run the prediction network on the last token (start of sequence: zero
    input, zero state), take the argmax of the joint; blank ends the frame, any other id is emitted and its state
    committed."""

    def __init__(self, decoder: RNNTDecoder, joint: RNNTJoint, cfg: RNNTConfig):
        self.decoder = decoder
        self.joint = joint
        self.blank_id = cfg.blank_id
        self.max_symbols = cfg.max_symbols

    def new_state(self) -> RNNTState:
        return RNNTState()

    def first_joints(self, states: list[RNNTState], enc_frames: mx.array) -> tuple[mx.array, mx.array]:
        """The joint input and the argmax of the first joint call of one frame for each of n hypotheses, in one call
        and lazily (a loop evaluates them with the rest of its frame; a group's rows together): the prediction
        networks that a symbol moved run first (one call). enc_frames [n, encoder_hidden] ->
        (enc(f) [n, J], ids [n])."""
        moved = [s for s in states if s.prediction is None]
        if moved:
            predicted = self.decoder.predict_rows([s.last_token for s in moved], [s.lstm_state for s in moved])
            for s, prediction in zip(moved, predicted):
                s.prediction = prediction
        projected = self.joint.enc(enc_frames[:, None])[:, 0]
        g = mx.concatenate([s.prediction[0] for s in states])
        return projected, mx.argmax(self.joint(projected, g), axis=-1)

    def decode_frame(self, state: RNNTState, enc_frame: mx.array,
                     first: Optional[tuple[mx.array, int]] = None) -> list[int]:
        """Consume one encoder frame [1, encoder_hidden]; returns the ids emitted at it (and appends them to
        ``state.tokens``). ``first``: this frame's enc(f) [1, J] and first id (:meth:`first_joints`, read back) for
        this state, already computed."""
        if first is None:
            projected, token = self.first_joints([state], enc_frame)
            first = projected, token.item()
        projected, token = first
        emitted = []
        for n in range(self.max_symbols):
            if n:
                if state.prediction is None:
                    state.prediction = self.decoder.predict(state.last_token, state.lstm_state)
                token = mx.argmax(self.joint(projected, state.prediction[0]), axis=-1).item()
            if token == self.blank_id:
                break
            emitted.append(token)
            state.last_token, state.lstm_state, state.prediction = token, state.prediction[1], None
        state.tokens.extend(emitted)
        return emitted


# ----------------------------------------------------------------------------------------------------------------
# text
# ----------------------------------------------------------------------------------------------------------------
def transcript_text(ids: Sequence[int], vocabulary: Sequence[str]) -> str:
    """NVIDIA's transcript string (BR ``_rnnt_hypotheses_to_src_text``, docs/model.md §1.2 J): the pieces joined (NeMo's
    ``RNNTDecoding`` with a vocabulary), stripped, '▁' -> space, runs of spaces collapsed, stripped, whitespace
    before '.', ',' and '?' removed."""
    return normalized("".join(vocabulary[i] for i in ids), start=True)


def normalized(pieces: str, start: bool) -> str:
    """:func:`transcript_text`'s normalisation of joined pieces; ``start``: they begin the transcript (stripped on both
    sides), else they follow a settled text (:class:`Transcript`) and only their end is stripped."""
    strip = str.strip if start else str.rstrip
    text = re.sub(r" +", " ", strip(pieces).replace("▁", " "))
    return re.sub(r"(\s+)([.,?])", r"\2", strip(text))


def visible(char: str) -> bool:
    return not char.isspace() and char != "▁"


class Transcript:
    """:func:`transcript_text` of an id list that only grows, in time proportional to the ids since the last visible
    character, not to the whole conversation. Every rule of the normalisation acts within a run of whitespace (and
    '▁'), which cannot reach back past a visible character: so the text of the ids up to one whose piece ends in a
    visible character is settled, and later ids only append the normalised text of their own pieces."""

    def __init__(self, vocabulary: Sequence[str]):
        self.vocabulary = vocabulary
        self.settled_ids = 0  # ids[:settled_ids] end in a visible character ...
        self.settled = ""  # ... and give this text

    def text(self, ids: Sequence[int]) -> str:
        pieces = [self.vocabulary[i] for i in ids[self.settled_ids:]]
        joined = "".join(pieces)
        start = self.settled_ids == 0
        ends = [len(joined)]
        for piece in reversed(pieces):  # where each piece ends in ``joined``, last first
            ends.append(ends[-1] - len(piece))
        for count, end in zip(range(len(pieces), 0, -1), ends):
            if end and visible(joined[end - 1]):
                self.settled += normalized(joined[:end], start)
                self.settled_ids += count
                return self.settled + normalized(joined[end:], start=False)
        return self.settled + normalized(joined, start)
