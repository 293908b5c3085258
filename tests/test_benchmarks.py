"""The benchmark scripts' own bookkeeping (their numbers are timings, never asserted): what they report covers what
they ran."""

from functools import lru_cache

from conftest import NEMO
import voicechat
from voicechat.benchmarks import capacity, frame
from voicechat.benchmarks.workload import bench_input
from voicechat.cache import capacities
from voicechat.loop import WARM_POSITIONS


@lru_cache(maxsize=None)
def tiny():
    return voicechat.load(NEMO / "tiny_model_aria")


def test_long_session_windows_partition_its_frames():
    r = frame.live(tiny(), bench_input(frame.WINDOW + 40), "speech")
    windows = r["by_window"]
    assert [w["first"] for w in windows] == [0, frame.WINDOW]
    assert sum(w["n"] for w in windows) == r["frames"]["n"] == frame.WINDOW + 40
    assert max(w["max"] for w in windows) == r["frames"]["max"]
    assert all(w["host_cpu_p50"] > 0 for w in windows)


def test_capacity_times_each_capacity_warm_up_prepares():
    rows = capacity.run(str(NEMO / "tiny_model_aria"), steps=2)
    assert [r["capacity"] for r in rows] == capacities(WARM_POSITIONS)
    assert all(r[part]["n"] == 2 for r in rows for part in ("tts_backbone", "llm_decode"))
