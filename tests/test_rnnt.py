"""RNNT transcript head (voicechat/stt/rnnt.py) against NeMo 3.0.0's RNNTDecoder / RNNTJoint / GreedyRNNTInfer on tiny
seeded weights (tests/fixtures/nemo/make_rnnt_reference.py), and NVIDIA's transcript normalisation."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from conftest import NEMO
import mlx.core as mx
from mlx.utils import tree_flatten

from voicechat.checkpoint import load_into, read_weights
from voicechat.config_formats import parse_rnnt
from voicechat.stt.rnnt import RNNTDecoder, RNNTGreedy, RNNTJoint, Transcript, transcript_text

pytestmark = pytest.mark.nemo  # checked against NVIDIA's NeMo on its tiny checkpoints (tests/fixtures/nemo)

FIXTURE = NEMO / "rnnt"
REFERENCE = np.load(FIXTURE / "reference.npz")


def release_config():
    raw = json.loads((FIXTURE / "merge_info.json").read_text())
    info = raw["_rnnt_merge_info"]
    return parse_rnnt(info["decoder_config"], info["joint_config"], info["joint_config"]["vocabulary"],
                      raw["rnnt_max_symbols_per_step"])


@pytest.fixture(scope="module")
def greedy() -> RNNTGreedy:
    cfg = release_config()
    weights = read_weights(FIXTURE)
    decoder, joint = RNNTDecoder(cfg), RNNTJoint(cfg)
    load_into(decoder, weights, prefix="stt_model.rnnt_decoder.")
    load_into(joint, weights, prefix="stt_model.rnnt_joint.")
    return RNNTGreedy(decoder, joint, cfg)


def test_config_from_merge_info():
    cfg = release_config()
    assert cfg.joint_dropout and cfg.max_symbols == 10 and cfg.blank_id == cfg.vocab_size == len(cfg.vocabulary)
    assert cfg.blank_id == int(REFERENCE["blank_id"])


@pytest.mark.parametrize("name", [str(n) for n in REFERENCE["names"]])
def test_ids_match_nemo_frame_by_frame(greedy, name):
    """One encoder frame per call with the state carried (the duplex loop's use) gives NeMo's ids, frame for frame;
    frames past the valid length are not decoded (docs/model.md §1.2 J)."""
    frames = mx.array(REFERENCE[f"{name}.frames"])
    length = int(REFERENCE[f"{name}.length"])
    state = greedy.new_state()
    per_frame = [greedy.decode_frame(state, frames[t : t + 1]) for t in range(length)]
    assert state.tokens == REFERENCE[f"{name}.ids"].tolist()
    assert [len(ids) for ids in per_frame] == REFERENCE[f"{name}.ids_per_frame"][:length].tolist()
    assert [t for t, ids in enumerate(per_frame) for _ in ids] == REFERENCE[f"{name}.id_frames"].tolist()


def test_reference_exercises_the_loop():
    """The fixture holds a mostly blank input, frames with several symbols and frames at the 10-symbol cap."""
    counts = {str(n): REFERENCE[f"{n}.ids_per_frame"] for n in REFERENCE["names"]}
    assert (counts["mostly_blank"] == 0).mean() >= 0.75
    assert ((counts["several_per_frame"] >= 2) & (counts["several_per_frame"] < 10)).any()
    assert (counts["symbol_cap"] == 10).any()


def test_joint_net_layout():
    """joint_net mirrors NeMo's Sequential: the Linear is joint_net.2 with joint dropout, joint_net.1 without."""
    cfg = release_config()
    names = {k for k, _ in tree_flatten(RNNTJoint(cfg).parameters())}
    assert names == {"enc.weight", "enc.bias", "pred.weight", "pred.bias", "joint_net.2.weight", "joint_net.2.bias"}
    names = {k for k, _ in tree_flatten(RNNTJoint(replace(cfg, joint_dropout=False)).parameters())}
    assert {"joint_net.1.weight", "joint_net.1.bias"} <= names
    decoder_names = {k for k, _ in tree_flatten(RNNTDecoder(cfg).parameters())}
    lstm = "prediction.dec_rnn.lstm."
    assert decoder_names == {"prediction.embed.weight"} | {
        f"{lstm}{kind}_l{n}" for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh") for n in range(2)}


@pytest.mark.parametrize("pieces,expected", [
    (["▁the", "▁cat", "▁is", "▁on", "▁the", "▁mat", "."], "the cat is on the mat."),
    (["▁hel", "lo", "▁", ",", "▁world", "▁", "?"], "hello, world?"),
    (["▁", "▁", "▁a", "▁", "▁", "▁b", "▁", "▁"], "a b"),
    (["▁what", "'", "s", "▁up", "▁", "▁", "."], "what's up."),
    (["▁wait", "▁", "!"], "wait !"),
    (["<fr-FR>", "▁bonjour"], "<fr-FR> bonjour"),
    ([], ""),
])
def test_transcript_text(pieces, expected):
    """Pieces joined, '▁' -> space, spaces collapsed, stripped, whitespace removed before . , ? only; language tags
    are kept (BR _rnnt_hypotheses_to_src_text)."""
    vocabulary = sorted(set(pieces))
    assert transcript_text([vocabulary.index(p) for p in pieces], vocabulary) == expected


def test_the_growing_transcript_is_the_whole_ids_text_after_every_id():
    """A session's transcript is kept as its ids arrive (Transcript, in time proportional to the new ids): after each
    id it equals transcript_text of all the ids so far, on random ids over pieces that exercise every rule (spaces and
    '▁' alone, at either end and doubled, punctuation after whitespace, other whitespace, empty pieces)."""
    vocabulary = ["▁the", "cat", "▁", "▁▁", " ", "\t", "\n▁", ".", ",", "?", "!", "▁.", " ,", "a▁", "b ", "", "'s",
                  "▁?", "x\t", "<fr-FR>", "é"]
    rng = np.random.default_rng(0)
    for _ in range(300):
        ids, transcript = [], Transcript(vocabulary)
        for _ in range(int(rng.integers(1, 40))):
            ids.extend(rng.integers(0, len(vocabulary), int(rng.integers(1, 4))).tolist())  # a frame emits 1-3 ids
            assert transcript.text(ids) == transcript_text(ids, vocabulary), [vocabulary[i] for i in ids]
