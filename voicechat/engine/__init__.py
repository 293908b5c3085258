"""The one thread that owns MLX for apps (docs/architecture.md): thread.py runs it and its queue, recordings.py the
recordings it answers, live.py the live conversations, loading.py the model's loading and status."""

from ..result import FrameUpdate
from .live import CLOSED, FRAMES, EngineBusy, LiveEvent, LiveJob, LiveRequest
from .loading import (DOWNLOADING, EXPECTED_REALTIME_FACTOR, FAILED, LOADING, READY, STARTING, EngineStatus, ModelFacts,
                      ModelLoader, demo_model, download_bar, hub_model)
from .recordings import CANCELLED, DONE, ERROR, PROGRESS, QUEUED, STARTED, TERMINAL, Event, Job, Request
from .thread import Engine, EngineFull, check_limits

__all__ = ["CANCELLED", "CLOSED", "DONE", "DOWNLOADING", "ERROR", "EXPECTED_REALTIME_FACTOR", "FAILED", "FRAMES",
           "LOADING", "PROGRESS", "QUEUED", "READY", "STARTED", "STARTING", "TERMINAL", "Engine", "EngineBusy",
           "EngineFull", "EngineStatus", "Event", "FrameUpdate", "Job", "LiveEvent", "LiveJob", "LiveRequest",
           "ModelFacts", "ModelLoader", "Request", "check_limits", "demo_model", "download_bar", "hub_model"]
