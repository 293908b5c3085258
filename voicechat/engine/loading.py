"""The engine's model: how it is loaded (from the Hub with a download bar, a local directory, the demo's random
checkpoint), the engine's states while it is, and the loaded model's numbers that apps show."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from tqdm.auto import tqdm

# Engine states (EngineStatus.state).
STARTING, DOWNLOADING, LOADING, READY, FAILED, CLOSED = (
    "starting", "downloading", "loading", "ready", "failed", "closed")

ModelLoader = Callable[[type], Any]  # (tqdm-compatible progress-bar class) -> a loaded voicechat model
# The real-time factor assumed until a run has been measured (docs/performance.md): near real time on a GPU (reported on
# recent Apple Silicon), about 100 times slower than real time on a CPU.
EXPECTED_REALTIME_FACTOR = {"gpu": 1.0, "cpu": 100.0}
TICKS_MEASURED = 50  # the last ticks whose median is this machine's measured speed (EngineStatus.tick_seconds)


@dataclass(frozen=True)
class ModelFacts:
    """The loaded model's numbers that an app shows or starts its controls at (the engine owns the model)."""

    frame_seconds: float  # one timeline position (config.frame_length)
    tts_guidance_scale: float  # the checkpoint's own EAR-TTS sampling (config.tts)
    tts_top_p: float  # 1.0 when the checkpoint samples by top-k
    tts_noise_scale: float
    expected_realtime_factor: float  # assumed until a run is measured (EXPECTED_REALTIME_FACTOR, by device)


@dataclass(frozen=True)
class EngineStatus:
    state: str  # STARTING, DOWNLOADING, LOADING, READY, FAILED, CLOSED
    message: str  # one line for the user
    fraction: Optional[float] = None  # download progress, when known
    load_seconds: Optional[float] = None  # once READY
    facts: Optional[ModelFacts] = None  # once READY
    realtime_factor: Optional[float] = None  # of the last finished run (None before one)
    tick_seconds: Optional[float] = None  # the median of the last ticks (None before one): this machine's speed now

    @property
    def measured(self) -> bool:
        return self.tick_seconds is not None or self.realtime_factor is not None

    @property
    def expected_realtime_factor(self) -> Optional[float]:
        """The real-time factor of the last ticks (each advances every conversation one frame: a tick's seconds per
        frame's seconds), else of the last run, else the one assumed for this device; None without a model."""
        if self.facts is None:
            return None
        if self.tick_seconds is not None:
            return self.tick_seconds / self.facts.frame_seconds
        if self.realtime_factor is not None:
            return self.realtime_factor
        return self.facts.expected_realtime_factor


def model_facts(model) -> ModelFacts:
    import mlx.core as mx

    tts = model.config.tts
    device = "gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"
    return ModelFacts(frame_seconds=float(model.config.frame_length), tts_guidance_scale=float(tts.guidance_scale),
                      tts_top_p=float(tts.top_p) if tts.top_p is not None else 1.0,
                      tts_noise_scale=float(tts.noise_scale), expected_realtime_factor=EXPECTED_REALTIME_FACTOR[device])


# model loaders (run on the engine thread)
# ---------------------------------------------------------------------------------------------------------------
def download_bar(name: str, report: Callable[[EngineStatus], None]) -> type:
    """A tqdm class for huggingface_hub: it draws the usual terminal bar and reports byte progress to ``report``.

    snapshot_download makes several bars (files, transfer bytes, written bytes) and grows their totals as file
    sizes become known; the largest byte total is the download's size."""

    class DownloadBar(tqdm):
        def __init__(self, *args, **kwargs):
            self.is_bytes = kwargs.get("unit") == "B"
            self.bytes_done = kwargs.get("initial", 0)  # counted here: a disabled tqdm stops counting
            # drawn only on a terminal (tqdm's None): into a pipe or a log its redraws are control characters
            super().__init__(*args, **{"disable": None, **kwargs})

        def update(self, n=1):
            self.bytes_done += n or 0
            if self.is_bytes and self.total:
                report(EngineStatus(DOWNLOADING, f"Downloading {name}: {self.format_sizeof(self.bytes_done)}B of "
                                                 f"{self.format_sizeof(self.total)}B",
                                    fraction=min(1.0, self.bytes_done / self.total)))
            return super().update(n)

    return DownloadBar


def hub_model(spec: str, *, offline: bool = False) -> ModelLoader:
    """Load a local checkpoint directory or a Hub repo id (downloaded on first use)."""

    def load(progress_bar: type):
        import voicechat

        return voicechat.load(spec, offline=offline, download_progress=progress_bar)

    return load


def demo_model() -> ModelLoader:
    """A tiny random-weight checkpoint written into a temporary folder, loaded, and the folder removed at once: the
    whole app works offline, every answer is noise, and no run leaves the folder behind, however it ends (issue 39;
    the loaded model reads none of its files again)."""

    def load(progress_bar: type):
        import tempfile

        import voicechat
        from voicechat.random_checkpoint import write_tiny_checkpoint

        with tempfile.TemporaryDirectory(prefix="voicechat-demo-") as folder:
            return voicechat.load(write_tiny_checkpoint(Path(folder), seed=0), offline=True)

    return load
