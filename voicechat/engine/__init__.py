"""The one thread that owns MLX for apps (docs/architecture.md): thread.py runs it and its queue, recordings.py the
recordings it answers, live.py the live conversations, loading.py the model's loading and status."""

from ..result import FrameUpdate
from .thread import (CANCELLED, CLOSED, DONE, DOWNLOADING, ERROR, EXPECTED_REALTIME_FACTOR, FAILED, FRAMES, LOADING,
                     PROGRESS, QUEUED, READY, STARTED, STARTING, TERMINAL, Engine, EngineBusy, EngineFull,
                     EngineStatus, Event, Job, LiveEvent, LiveJob, LiveRequest, ModelFacts, ModelLoader, Request,
                     demo_model, download_bar, hub_model)

__all__ = ["CANCELLED", "CLOSED", "DONE", "DOWNLOADING", "ERROR", "EXPECTED_REALTIME_FACTOR", "FAILED", "FRAMES",
           "LOADING", "PROGRESS", "QUEUED", "READY", "STARTED", "STARTING", "TERMINAL", "Engine", "EngineBusy",
           "EngineFull", "EngineStatus", "Event", "FrameUpdate", "Job", "LiveEvent", "LiveJob", "LiveRequest",
           "ModelFacts", "ModelLoader", "Request", "demo_model", "download_bar", "hub_model"]
