"""The text tokenizer (Nemotron-H's, a HF ``tokenizer.json``), NVIDIA's rules for turning ids into strings, and a
channel's text as its ids arrive (:class:`TextStream`: the one source of each position's new text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from tokenizers import Tokenizer

from .errors import ConfigError

# transformers' clean_up_tokenization, applied by HF decode when the tokenizer config asks for it: one replacement
# after the other over the whole text, each dropping spaces (docs/streaming.md §6)
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
        return self.clean_up(self.uncleaned(ids))

    def uncleaned(self, ids: Sequence[int]) -> str:
        """The ids' text before the space clean-up: the text of more ids adds to it, but for an unfinished UTF-8
        sequence at its end (one U+FFFD until the bytes that complete it)."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def clean_up(self, text: str) -> str:
        if self.clean_up_spaces:
            for a, b in _CLEANUPS:
                text = text.replace(a, b)
        return text

    def settled(self, text: str) -> int:
        """How much of ``text`` (:meth:`uncleaned`, following text that was settled) no text after it can change:
        the length of its longest prefix P such that ``clean_up(P + more) == clean_up(P) + clean_up(more)`` for any
        ``more``. A trailing U+FFFD is held back (a later byte may complete its character); with the clean-up, so is
        an end where one of its replacements could begin (docs/streaming.md §6)."""
        end = len(text.rstrip("\ufffd"))
        if not self.clean_up_spaces:
            return end
        return next(cut for cut in range(end, -1, -1) if not cleanup_can_reach(text[:cut]))


def cleanup_can_reach(text: str) -> bool:
    """Whether a clean-up replacement could join ``text`` with what follows it: before some replacement (after the
    ones before it, which may have moved a space next to a quote: "  ' s" -> " 's" -> "'s"), the text ends in the
    start of that replacement's pattern (docs/streaming.md §6)."""
    for a, b in _CLEANUPS:
        if any(text.endswith(a[:n]) for n in range(1, len(a))):
            return True
        text = text.replace(a, b)
    return False


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
    """A channel's text as its ids arrive, given out so that the pieces, joined, are the text of all its ids
    (``TextTokenizer.decode``): each :meth:`add` gives the characters its id settles and never takes one back, and
    :meth:`finish`, at the end, the rest. Held back meanwhile is only what a later id can still change
    (``TextTokenizer.settled``: an unfinished UTF-8 character; with the space clean-up, an end it could still join).

    Only the ids from an anchor on are decoded (decoding every id of a long conversation at each new id would grow
    with it). The anchor moves where the ids before it decode to whole characters, so that the text from there on
    is the rest of the whole text; ``held`` is the text before the anchor that was not given out yet."""

    WINDOW_IDS = 64  # ids decoded at most (about one sentence); then the anchor moves to the last id

    def __init__(self, tokenizer, skip: set[int]):
        self.tokenizer, self.skip = tokenizer, skip
        self.ids: list[int] = []  # from the anchor on
        self.held = ""  # text before the anchor, not given out yet (before the clean-up, as all that is kept here)
        self.given = 0  # characters of the ids' text given out (0 while ``held`` has some)

    def add(self, token_id: int) -> str:
        if token_id in self.skip:
            return ""
        self.ids.append(token_id)
        text = self.tokenizer.uncleaned(self.ids)
        new = self.give(text, self.tokenizer.settled(self.held + text[self.given:]))
        if len(self.ids) > self.WINDOW_IDS:
            self.move_anchor(text)
        return new

    def finish(self) -> str:
        """The text no id has settled (an unfinished character, a space the clean-up could still drop), which the
        end of the channel's ids settles."""
        text = self.tokenizer.uncleaned(self.ids)
        return self.give(text, len(self.held) + len(text) - self.given)

    def give(self, text: str, count: int) -> str:
        """The clean-up of the first ``count`` characters not given out yet (``held``, then ``text``'s)."""
        pending = self.held + text[self.given:]
        self.given += max(0, count - len(self.held))
        self.held = self.held[count:]
        return self.tokenizer.clean_up(pending[:count])

    def move_anchor(self, text: str) -> None:
        """Decode from the last id on, once the ids before it decode to whole characters, the start of ``text``."""
        before = self.tokenizer.uncleaned(self.ids[:-1])
        if before.endswith("\ufffd") or before + self.tokenizer.uncleaned(self.ids[-1:]) != text:
            return  # a character split at that id (or a decoder that treats a first id apart): the next id tries
        self.held += before[self.given:]
        self.ids, self.given = self.ids[-1:], max(0, self.given - len(before))
