"""G.711 (ITU-T, 1972), the telephone codecs of the GA session's ``audio/pcmu`` and ``audio/pcma`` formats: 8 kHz,
one byte per sample (docs/realtime.md "Phone audio"). Python 3.13 removed ``audioop``, so they are here in numpy:
each decodes through its 256-entry table, and encoding picks the code whose level is nearest the sample."""

from __future__ import annotations

import numpy as np

RATE = 8000  # G.711's sample rate


def mulaw_levels() -> np.ndarray:
    """The 16-bit level of each mu-law byte: the byte inverted, then sign, 3-bit segment and 4-bit step, with the
    bias of 0x84 that makes the segments join (G.711 table 2a)."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    magnitude = ((((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 7)) - 0x84
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def alaw_levels() -> np.ndarray:
    """The 16-bit level of each A-law byte: the even bits inverted (0x55), then sign (set: positive), 3-bit segment
    and 4-bit step; segment 0 is linear, each later one doubles the step (G.711 table 1a)."""
    a = np.arange(256, dtype=np.int32) ^ 0x55
    segment, step = (a >> 4) & 7, (a & 0x0F) << 4
    magnitude = np.where(segment == 0, step + 8, (step + 0x108) << np.maximum(segment - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


class Law:
    """One G.711 law: ``decode`` bytes -> int16, ``encode`` int16 -> the bytes of the nearest levels."""

    def __init__(self, levels: np.ndarray):
        self.levels = levels
        order = np.argsort(levels, kind="stable")
        self.codes = order.astype(np.uint8)  # codes by rising level
        ranked = levels[order].astype(np.int32)
        self.edges = (ranked[:-1] + ranked[1:]) / 2  # a sample above an edge is nearer the next level

    def decode(self, data: bytes) -> np.ndarray:
        return self.levels[np.frombuffer(data, dtype=np.uint8)]

    def encode(self, samples: np.ndarray) -> bytes:
        return self.codes[np.searchsorted(self.edges, np.asarray(samples, dtype=np.int32))].tobytes()


LAWS = {"audio/pcmu": Law(mulaw_levels()), "audio/pcma": Law(alaw_levels())}
