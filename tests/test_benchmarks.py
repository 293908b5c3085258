"""The benchmark scripts' own bookkeeping (their numbers are timings, never asserted): what they report covers what
they ran."""

from functools import lru_cache

from conftest import NEMO
import voicechat
from bench import capacity
from voicechat.benchmarks import frame
from voicechat.benchmarks.workload import bench_input
from voicechat.cache import capacities
from voicechat.model import WARM_POSITIONS


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


def test_cold_start_reports_each_part_of_a_start(monkeypatch):
    """With compilation on (as on a GPU) the warm-up runs at load; the report has each of its parts, the session's
    setup and every feed of the first answer, and the total is their sum."""
    from bench import cold_start

    monkeypatch.setenv("VOICECHAT_COMPILE", "1")
    r = cold_start.run(str(NEMO / "tiny_model_aria"), frames=6)
    assert list(r["warm_up_s"]) == ["session frames", "prompt prefills", "LLM steps per cache size",
                                    "TTS backbone steps per cache size"]
    assert all(s > 0 for s in r["warm_up_s"].values())
    assert r["first_answer"]["frames"] == 6
    assert r["first_answer"]["p50_ms"] <= r["first_answer"]["max_ms"] <= 1e3 * r["first_answer"]["total_s"]


def test_cold_start_counts_the_kernel_cache_files_wherever_mlx_keeps_them(monkeypatch, tmp_path):
    from bench import cold_start

    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path / "ptx"))
    assert cold_start.cached_kernels() == 0
    (tmp_path / "ptx" / "sub").mkdir(parents=True)
    for name in ("a.ptx", "sub/b.ptx", "sub/c.cubin"):
        (tmp_path / "ptx" / name).write_bytes(b"x")
    assert cold_start.cached_kernels() == 3


def test_group_exactness_finds_where_two_conversations_part_and_the_margin_there():
    """``bench.group_exactness``'s comparison: a conversation against itself run again is identical everywhere
    (zero differences); against another seed's and prompt's, the first differing id is found where the ids part, with
    the run alone's top-2 margin there (the logits the tick's LLM step built)."""
    from bench import group_exactness as ge

    m = tiny()
    x = bench_input(ge.OFFSET + 12)
    a, again, other = ge.run_alone(m, 0, x, 12), ge.run_alone(m, 0, x, 12), ge.run_alone(m, 1, x, 12)
    same = ge.compare(a, again)
    assert same["ids_identical"] and same["codes_identical"] and same["top2_margin_there"] is None
    assert same["max_samples_difference"] == 0 and same["max_encoder_difference"] == 0
    assert same["encoder_first_difference"] is None
    assert len(a.margins) == len(a.frames) - a.prompt_frames  # a margin at every position past the prompt
    ids = [[(f.text_id, f.function_id) for f in s.frames] for s in (a, other)]
    part = next(t for t, (p, q) in enumerate(zip(*ids)) if p != q)
    differ = ge.compare(a, other)
    assert not differ["ids_identical"] and differ["ids_first_difference"] == part
    head = 0 if ids[0][part][0] != ids[1][part][0] else 1
    assert differ["top2_margin_there"] == other.margins[part][head] >= 0
    heard = next(t for t, (p, q) in enumerate(zip(a.encoded, other.encoded))  # each hears its own stretch
                 if p is not None and q is not None and (p != q).any())
    assert differ["encoder_first_difference"] == heard



def test_perception_rows_compares_each_streams_frames_with_its_own_call(monkeypatch):
    """``bench.perception_rows``: on the CPU the encoder's steady frame over the rows is each stream's own call, bit
    for bit (docs/batching.md §3); a stream whose frame in the rows' call is off by one step from tick 2 on is
    reported, with that tick and its size."""
    import numpy as np
    import mlx.core as mx
    from bench import perception_rows as pr

    perception = tiny().net.stt_model.perception
    monkeypatch.setattr(pr, "FILL_TICKS", 2)
    exact = pr.measure(perception, 3, 3, np.random.default_rng(0))
    assert (exact["streams_differing"], exact["first_differing_tick"], exact["largest_difference"]) == (0, None, 0.0)

    rows_tick, ticks = pr.rows_tick, iter(range(1, 100))

    def off_by_one_step(*args):
        out = rows_tick(*args)
        if next(ticks) >= 2:
            out[3] = out[3] + mx.array(2.0 ** -10, out[3].dtype)  # stream 1's encoded frame
        return out

    monkeypatch.setattr(pr, "rows_tick", off_by_one_step)
    off = pr.measure(perception, 3, 3, np.random.default_rng(0))
    assert off["streams_differing"] == 1 and off["first_differing_tick"] == 2
    assert 0 < off["largest_difference"] <= 2.0 ** -9
