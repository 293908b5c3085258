"""Char table, flag tables and the char-aware subword encoder (docs/model.md §2.5.3)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import NEMO
import mlx.core as mx
from tokenizers import Tokenizer

from voicechat.checkpoint import load_config, load_into, read_weights
from voicechat.errors import ConfigError
from voicechat.tts.subword import CHAR_VOCAB_SIZE, CharAwareSubwordEncoder, CharTable, flag_tables

PREFIX = "tts_model.tts_model.embed_subword."


def tiny_vocab() -> dict[str, int]:
    return Tokenizer.from_file(str(NEMO / "tiny_model" / "tokenizer.json")).get_vocab(with_added_tokens=True)


@pytest.fixture(scope="module")
def encoder():
    cfg = load_config(NEMO / "tiny_model").tts
    vocab = tiny_vocab()
    enc = CharAwareSubwordEncoder(cfg.char_encoder, cfg.backbone.hidden_size, len(vocab))
    load_into(enc, read_weights(NEMO / "tiny_model"), prefix=PREFIX)
    enc.set_char_table(CharTable.from_vocab(vocab))
    return enc


# ----------------------------------------------------------------------------------------------------------------
# char table
# ----------------------------------------------------------------------------------------------------------------
def test_char_table_hand_case():
    vocab = {"<x>": 0, "b": 2, "c": 3, "a": 5, "ab": 7, "zz": 9, "ca": 1, "é": 4}
    table = CharTable.from_vocab(vocab, expected=4)  # singles by id: b, c, é, a -> 0, 1, 2, 3
    assert table.chars == {2: (0,), 3: (1,), 4: (2,), 5: (3,), 7: (3, 0), 1: (1, 3), 8: (4,)}
    assert (table.num_chars, table.pad_subword) == (4, 8)  # "<x>" and "zz" have no char in the table
    ids, lengths = table.lookup([7, 9, 8, 0])
    assert ids.tolist() == [[3, 0], [4, 4], [4, 4], [4, 4]] and lengths.tolist() == [2, 0, 1, 0]
    ids, lengths = table.lookup([9])  # no chars at all: still one (padding) column
    assert ids.tolist() == [[4]] and lengths.tolist() == [0]


def test_char_table_size_error():
    vocab = {c: i for i, c in enumerate("abc")} | {"abc": 3}
    with pytest.raises(ConfigError, match=r"has 3 single-character tokens.*exactly 256"):
        CharTable.from_vocab(vocab)


def test_char_table_spells_every_tokenizer_token():
    vocab = tiny_vocab()
    table = CharTable.from_vocab(vocab)
    singles = [tok for tok, _ in sorted(((t, i) for t, i in vocab.items() if len(t) == 1), key=lambda p: p[1])]
    assert len(singles) == CHAR_VOCAB_SIZE
    for tok, i in vocab.items():
        if all(c in singles for c in tok):
            assert "".join(singles[c] for c in table.chars[i]) == tok
    assert table.pad_subword == len(vocab) == 512 and table.chars[512] == (CHAR_VOCAB_SIZE,)


# ----------------------------------------------------------------------------------------------------------------
# flag tables
# ----------------------------------------------------------------------------------------------------------------
def test_flag_tables_equal_nemo_buffers():
    weights = read_weights(NEMO / "tiny_model")
    vocab = tiny_vocab()
    tables = flag_tables(vocab, vocab["<s>"], vocab["</s>"])
    for module, names in (("subword_flag_emb", ("is_continuation", "pad_tensor")),
                          ("bos_eos_emb", ("special_flags", "pad_tensor"))):
        for name in names:
            nemo = np.array(weights[f"{PREFIX}{module}.{name}"])
            ours = np.array(tables[module][name])
            assert ours.shape == nemo.shape and np.array_equal(ours, nemo), f"{module}.{name}"


def test_flag_tables_hand_case():
    vocab = {"<s>": 0, "</s>": 1, "Ġthe": 2, "ing": 3, "▁a": 4, "</s2>": 5}
    tables = flag_tables(vocab, bos_id=0, eos_id=5)
    assert np.array(tables["subword_flag_emb"]["is_continuation"]).tolist() == [0, 0, 0, 1, 0, 0, 0]
    assert int(tables["subword_flag_emb"]["pad_tensor"]) == 6
    # NeMo's BOS/EOS table stops before the largest id: eos id 5 is "out of vocabulary" (flag 0)
    assert np.array(tables["bos_eos_emb"]["special_flags"]).tolist() == [1, 0, 0, 0, 0, 0]
    assert int(tables["bos_eos_emb"]["pad_tensor"]) == 5


# ----------------------------------------------------------------------------------------------------------------
# encoder
# ----------------------------------------------------------------------------------------------------------------
def test_flags_are_added_where_the_mask_is_false(encoder):
    ids = np.array([[12, 300, 2, 1, 511, 700]])
    mask = np.array([[False, True, False, False, False, True]])
    out = np.array(encoder(ids, mask))
    cont, special = encoder.subword_flag_emb, encoder.bos_eos_emb
    clamped_cont = np.minimum(ids[0], int(cont.pad_tensor))
    clamped_special = np.minimum(ids[0], int(special.pad_tensor))
    flags = (np.array(cont.cont_emb.weight)[np.array(cont.is_continuation)[clamped_cont]]
             + np.array(special.special_emb.weight)[np.array(special.special_flags)[clamped_special]])
    off = ~mask[0]
    assert np.array_equal(out[0, off], flags[off])  # zero embedding + flags, exactly
    assert np.abs(out[0, ~off] - flags[~off]).max() > 0.1  # the encoded subwords are there too
    assert np.abs(flags[off]).max() > 0.1  # bos (1), eos (2) and the continuation flags are not all zero rows


def test_encoded_subword_does_not_depend_on_its_neighbours(encoder):
    alone = np.array(encoder(np.array([[300]]), np.array([[True]])))
    together = np.array(encoder(np.array([[5, 300, 41]]), np.array([[True, True, True]])))  # longer padded batch
    assert np.abs(together[0, 1] - alone[0, 0]).max() < 1e-5


def test_subword_without_characters_encodes_to_zero(encoder):
    encoded = encoder.encode_chars(mx.array([[CHAR_VOCAB_SIZE]]), mx.array([0]))
    assert np.array_equal(np.array(encoded), np.zeros((1, encoded.shape[-1]), dtype=np.float32))
