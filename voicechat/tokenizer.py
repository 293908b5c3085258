"""The text tokenizer (Nemotron-H's, a HF ``tokenizer.json``), NVIDIA's rules for turning ids into strings, and a
channel's text as its ids arrive (:class:`TextStream`: the one source of each position's new text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from tokenizers import Tokenizer

from .errors import ConfigError

# transformers' clean_up_tokenization, applied by HF decode when the tokenizer config asks for it
_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class TextTokenizer:
    """Encode without special tokens and decode with special tokens skipped, as NeMo's AutoTokenizer does
    (``text_to_ids`` / ``ids_to_text``, docs/model.md §1.2 C and §1.3)."""

    def __init__(self, path: Path):
        path = Path(path)
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as e:  # the Rust side raises a generic Exception for a broken file
            raise ConfigError(f"{path} is not a readable tokenizer.json ({e})") from None
        settings = path.with_name("tokenizer_config.json")
        extra = json.loads(settings.read_text()) if settings.is_file() else {}
        self.clean_up_spaces = bool(extra.get("clean_up_tokenization_spaces", False))
        self.path = path

    @property
    def vocab(self) -> dict[str, int]:
        return self._tok.get_vocab(with_added_tokens=True)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> Optional[str]:
        return self._tok.id_to_token(i)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        text = self._tok.decode([int(i) for i in ids], skip_special_tokens=True)
        if self.clean_up_spaces:
            for a, b in _CLEANUPS:
                text = text.replace(a, b)
        return text


def channel_text(tok: TextTokenizer, ids: Sequence[int], *, pad_id: int, bos_id: int, eos_id: int,
                 frame_length: float = 0.08, turn_markers: bool = False) -> str:
    """A channel's per-frame ids as text (NeMo ``tokens_to_str``, docs/model.md §1.3): pad, bos and eos removed, special
    tokens skipped. With ``turn_markers`` the ids are split at every bos / eos frame p and ``<|t|>`` (bos) or
    ``<$t$>`` (eos) with t = p * frame_length seconds is put there, pieces joined by spaces."""
    ids = [int(i) for i in ids]

    def text_of(piece: list[int]) -> str:
        return tok.decode([i for i in piece if i not in (pad_id, bos_id, eos_id)])

    if not turn_markers:
        return text_of(ids)
    out, start = [], 0
    for p, i in enumerate(ids):
        if i in (bos_id, eos_id):
            out.append(text_of(ids[start:p]))
            t = round(p * frame_length, 3)
            out.append(f"<|{t}|>" if i == bos_id else f"<${t}$>")
            start = p
    out.append(text_of(ids[start:]))
    return " ".join(out)


class TextStream:
    """A channel's text, decoded incrementally: each call gives the characters its new ids add (the text of all the
    ids so far, less what was given before; all of it again if a new id changed earlier text); an unfinished UTF-8
    sequence (decoded as U+FFFD) waits for the id that completes it.

    Only the last ids are decoded, from an anchor a few ids back (decoding every id of a long conversation at each
    new id would grow with it): what the anchor's ids decode to is ``head``, the rest ``window``. Text added by a new
    id is found within the window, so whatever the decoder does at the window's start (a leading space dropped, a
    character cut at a byte) is the same in both decodes; if a new id changes the window's earlier text, the whole
    ids are decoded again, as without an anchor."""

    WINDOW_IDS = 64  # ids decoded at most (about one sentence) ...
    KEEP_IDS = 8  # ... then the anchor moves to this many ids before the last, ...
    KEEP_CHARS = 8  # ... once they decode to this many characters: more than a clean-up replacement reaches back
    #                 (voicechat/tokenizer.py: " n't", 4), whatever ids that decode to nothing stand between

    def __init__(self, tokenizer, skip: set[int]):
        self.tokenizer, self.skip = tokenizer, skip
        self.ids: list[int] = []
        self.anchor = 0
        self.head = self.window = ""

    @property
    def text(self) -> str:
        return self.head + self.window

    def decoded(self, start: int) -> str:
        return self.tokenizer.decode(self.ids[start:]).rstrip("\ufffd")

    def add(self, token_id: int) -> str:
        if token_id in self.skip:
            return ""
        self.ids.append(token_id)
        window = self.decoded(self.anchor)
        if not window.startswith(self.window) and self.anchor:
            self.anchor, self.head, self.window = 0, "", self.text
            window = self.decoded(0)
        new = window[len(self.window):] if window.startswith(self.window) else window
        self.window = window
        if len(self.ids) - self.anchor > self.WINDOW_IDS:
            self.move_anchor(len(self.ids) - self.KEEP_IDS)
        return new

    def move_anchor(self, anchor: int) -> None:
        """Decode from ``anchor`` on, once its ids' text is long enough and the end of the text so far."""
        tail = self.decoded(anchor)
        text = self.text
        if len(tail) >= self.KEEP_CHARS and text.endswith(tail):
            self.anchor, self.head, self.window = anchor, text[:len(text) - len(tail)], tail
