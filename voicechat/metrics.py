"""Prometheus metrics of a serving process (``GET /metrics`` on ``serve``, each Ray replica and the app;
docs/operations.md): one registry per process, and the few named calls the engine and the Realtime server make.

Names follow Prometheus' conventions (../shared/reference/AGENTS.md §5): prefixed ``voicechat_``, counters end in
``_total``, durations are in seconds. No label names a conversation: a label's values stay a short, fixed list."""

from __future__ import annotations

import json
import logging

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import ProcessCollector

from .config import FRAME_SECONDS

log = logging.getLogger("voicechat.conversations")  # the structured start / end lines (docs/operations.md §2)

PATH = "/metrics"
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)  # the process's memory and CPU beside the model's numbers
# why a conversation was refused before it started (docs/operations.md §1)
REFUSALS = ("server_busy", "memory", "auth", "bad_request", "draining")
TICK_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, FRAME_SECONDS, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
LAG_BUCKETS = (0.0, 0.08, 0.16, 0.32, 0.5, 1.0, 2.0, 5.0, 10.0)

OPEN = Gauge("voicechat_conversations_open", "Conversations that hold a slot of the model", registry=REGISTRY)
QUEUED = Gauge("voicechat_conversations_queued", "Conversations handed to the engine that have not yet joined",
               registry=REGISTRY)
REFUSED = Counter("voicechat_conversations_refused_total", "Conversations refused before they started, by reason",
                  ["reason"], registry=REGISTRY)
ENDED = Counter("voicechat_conversations_ended_total", "Conversations that ended, by why", ["reason"],
                registry=REGISTRY)
JOIN = Histogram("voicechat_join_seconds", "A conversation's set-up, from its hand-over to the engine until it runs "
                 "(its count: the joins)", buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0), registry=REGISTRY)
TICK = Histogram("voicechat_tick_seconds", "One engine tick: every ready conversation one 80 ms frame further",
                 buckets=TICK_BUCKETS, registry=REGISTRY)
SLOW_TICKS = Counter("voicechat_ticks_over_frame_total", "Ticks longer than one 80 ms frame (real time slips)",
                     registry=REGISTRY)
LAG = Histogram("voicechat_audio_lag_seconds", "Each conversation's audio received but not yet heard by the model, "
                "at each of its frames", buckets=LAG_BUCKETS, registry=REGISTRY)
STATE = Gauge("voicechat_state_bytes", "The conversations' device state (caches) as of the last tick",
              registry=REGISTRY)
LOAD = Gauge("voicechat_model_load_seconds", "How long the model took to load", registry=REGISTRY)
ERRORS = Counter("voicechat_errors_total", "Error events sent to clients, by code", ["code"], registry=REGISTRY)
for _reason in REFUSALS:  # every reason is exported from the start, at 0: a rate over it needs the series
    REFUSED.labels(_reason)


# ---- the engine thread --------------------------------------------------------------------------------------------
def ticked(group, seconds: float) -> None:
    """A tick that advanced conversations took ``seconds``; ``group`` holds their state (engine thread)."""
    TICK.observe(seconds)
    if seconds > FRAME_SECONDS:
        SLOW_TICKS.inc()
    STATE.set(group.held_bytes())


def model_loaded(seconds: float) -> None:
    LOAD.set(seconds)


def join_refused(error: Exception) -> None:
    """The engine could not set a conversation up: short of memory, or its settings (prompt, voice) are unusable."""
    from .errors import SessionsFull

    refused("memory" if isinstance(error, SessionsFull) else "bad_request")


# ---- the server -------------------------------------------------------------------------------------------------
def refused(reason: str) -> None:
    REFUSED.labels(reason).inc()


def error_sent(code: str) -> None:
    ERRORS.labels(code).inc()


def conversation_started(session_id: str, connection: str) -> None:
    OPEN.inc()
    log.info(json.dumps({"event": "conversation.start", "id": session_id, "connection": connection}))


def conversation_ended(session_id: str, seconds: float, frames: int, reason: str) -> None:
    OPEN.dec()
    ENDED.labels(reason).inc()
    log.info(json.dumps({"event": "conversation.end", "id": session_id, "seconds": round(seconds, 3),
                         "frames": frames, "reason": reason}))


def scrape() -> tuple[bytes, str]:
    """The text exposition of every metric, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
