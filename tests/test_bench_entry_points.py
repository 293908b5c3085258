"""Every benchmark entry point, run as a user runs it (``python -m ...`` from the repository root) on the tiny NeMo
model: each finishes and prints its report, so a broken one fails CI. The numbers are timings and are not checked.
The wheel carries none of the lab's scripts (bench/)."""

import json
import re
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import NEMO, TESTS

pytestmark = pytest.mark.slow  # each test starts a benchmark process

REPO = TESTS.parent
TINY = NEMO / "tiny_model_aria"
PEER_HARNESS = REPO.parent / "shared" / "reference" / "peer-harness"


def run(*args, cwd=REPO) -> str:
    p = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, f"{args}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def test_voicechat_bench_reports_offline_and_session_frames(tmp_path):
    out = run("-m", "voicechat", "bench", "--model", TINY, "--frames", 4, "--json", tmp_path / "b.json")
    assert "graph nodes per frame" in out
    r = json.loads((tmp_path / "b.json").read_text())
    assert r["offline"] and r["session"] and r["ops_per_frame"]["total"] > 0


def test_voicechat_bench_sessions_reports_each_count(tmp_path):
    """``voicechat bench --sessions``: every count's row in the JSON, each from ticks of all its conversations; a
    count below 1 is a usage error."""
    out = run("-m", "voicechat", "bench", "--model", TINY, "--sessions", "1,3", "--frames", 20, "--json",
              tmp_path / "s.json")
    assert "largest N with tick p95" in out
    r = json.loads((tmp_path / "s.json").read_text())
    assert [row["sessions"] for row in r["rows"]] == [1, 3]
    assert all(row["ticks_measured"] == 20 and row["tick"]["p50"] > 0 and row["set_up"]["n"] == row["sessions"]
               and row["graph_nodes_per_tick"] > 0 for row in r["rows"])
    # every measured tick stepped every conversation: none ran out of input before the others
    assert [row["fewest_rows_stepped"] for row in r["rows"]] == [1, 3]
    # a lone conversation holds nobody back; each later one's stages (warm-up, prefill) stall ticks of the others
    assert [row["join"]["n"] > 0 for row in r["rows"]] == [False, True]
    # the plot of docs/batching.md §6 from it: both panels drawn, the series in its colour
    run("-m", "bench.plot_groups", tmp_path / "p.png", f"now={tmp_path / 's.json'}")
    from PIL import Image
    from bench.plot_groups import COLORS, PANEL_H, PANEL_W
    image = Image.open(tmp_path / "p.png").convert("RGB")
    assert image.size == (2 * PANEL_W, PANEL_H + 20)
    left, right = (image.crop(box).getcolors(1 << 20) for box in ((0, 0, PANEL_W, PANEL_H),
                                                                    (PANEL_W, 0, 2 * PANEL_W, PANEL_H)))
    assert all(any(color == COLORS[0] for _, color in colors) for colors in (left, right))
    bad = subprocess.run([sys.executable, "-m", "voicechat", "bench", "--model", "x", "--sessions", "0"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "at least 1" in bad.stderr


def test_voicechat_bench_sessions_on_the_demo_model_past_32_rows_reports_the_state_held(tmp_path):
    """``python -m voicechat bench --demo --sessions 1,36 --frames 20 --json F`` (issue 37's acceptance) on the CPU:
    36 rows, past the CUDA rows kernel's tile; per N the group's state in bytes (``state_bytes``: its arrays') and per
    conversation, at least its conversations' state (``admission.state_bytes``), every row stepped."""
    from voicechat import compute, load
    from voicechat.timeline.admission import state_bytes
    from voicechat.random_checkpoint import write_tiny_checkpoint

    out = run("-m", "voicechat", "bench", "--demo", "--sessions", "1,36", "--frames", 20, "--json", tmp_path / "s.json")
    assert "state MB/conv" in out
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    cfg = load(write_tiny_checkpoint(tmp_path / "model", seed=0), offline=True).config  # the demo model's
    assert [r["sessions"] for r in rows] == [1, 36]
    for r in rows:
        n = r["sessions"]
        least = state_bytes(cfg, [r["positions"]["min"]] * n, compute.speech_dtype().size)
        assert r["fewest_rows_stepped"] == n and r["ticks_measured"] == 20
        assert least <= r["state_bytes"] == r["state_bytes_per_conversation"] * n


@pytest.mark.parametrize("args, says", [
    (["bench.capacity", TINY, "--steps", 2], "LLM decode"),
    (["bench.cold_start", TINY, "--frames", 3], "start to the end of the first answer"),
    (["bench.frame_split", TINY, "--frames", 3, "--nodes"], "async_eval"),
    (["bench.split", "--model", TINY], "session frame (80 ms feed)"),
    (["bench.kernels", "--steps", 3, "--evaluations", 1], "feed-forward pair"),
    (["bench.perception_rows", TINY, "--sessions", "1,3", "--ticks", 3], "rows nodes"),
    (["bench.state", "--dims", "full", "--minutes", "1,2", "--free-gb", 100], "admitted in 100 GB free"),
    (["bench.joins", TINY, "--running", 1, "--prompts", "1,40", "--rounds", 1], "join p50"),
    (["bench.webrtc_wire", "--seconds", 2], "Opus RTP payload"),
    (["bench.side_by_side", "--worker", "--ckpt", TINY, "--frames", 4, "--runs", 1], '"engine": "voicechat"'),
], ids=lambda v: v if isinstance(v, str) and v.startswith("bench.") else None)
def test_lab_benchmark_runs_on_the_tiny_model(args, says):
    assert says in run("-m", *args)


def test_rows_benchmark_times_each_part_of_a_tick(tmp_path):
    """``bench.rows``: at each row count every part of the group's tick (the RNNT's first joints too, on a checkpoint
    with a transcript head) with its graph nodes, the whole tick and its host parts, then the 4-bit product probe at
    each of the LLM's shapes and row counts; a row count below 1 is a usage error."""
    from voicechat.random_checkpoint import write_tiny_checkpoint

    out = run("-m", "bench.rows", "--model", write_tiny_checkpoint(tmp_path / "model", seed=1), "--rows", "1,3",
              "--runs", 2, "--qmm", "--dense", 2, "--max-minutes", 1, "--json", tmp_path / "r.json")
    assert "whole tick" in out and "4-bit ms" in out and "gather sorted ms" in out
    r = json.loads((tmp_path / "r.json").read_text())
    assert [row["rows"] for row in r["rows"]] == [1, 3] and r["max_minutes"] == 1
    for row in r["rows"]:
        assert set(row["parts"]) == {"encoder", "rnnt first joints", "llm decode", "text sampling", "tts backbone",
                                     "tts codes", "codec"}
        assert all(p["n"] == 2 and p["p50"] > 0 and p["nodes"] > 0 for p in row["parts"].values())
        assert row["tick"]["n"] == 2 and row["tick"]["p50"] > 0
        assert set(row["host"]) == {"push", "build", "queue", "wait", "finish"}
        assert all(p["n"] == 2 and p["p50"] > 0 for p in row["host"].values())
    assert {q["m"] for q in r["qmm"]} == {1, 2, 4, 8, 16, 32, 64}
    assert all(q["qmm_ms"] > 0 and q["bf16_ms"] > 0 for q in r["qmm"])
    assert len({(d["out"], d["in"]) for d in r["dense"]}) == 2
    assert {d["m"] for d in r["dense"]} == {1, 2, 4, 8, 16, 32, 64}
    assert all(d[f"{way} ms"] > 0 for d in r["dense"] for way in ("matmul", "gather", "gather sorted"))
    assert all(d["matmul rows alone"] for d in r["dense"] if d["m"] == 1)  # one row is its own one-row product
    bad = subprocess.run([sys.executable, "-m", "bench.rows", "--model", "x", "--rows", "0"], capture_output=True,
                         text=True, cwd=REPO)
    assert bad.returncode == 2 and "at least 1" in bad.stderr


def test_cuda_nodes_counts_the_cuda_paths_tick_on_a_cpu(tmp_path, monkeypatch):
    """``bench.cuda_nodes``: the tick's graph as the CUDA path builds it (bfloat16, the rows kernels' products stood
    in for), per part and in all, at each row count."""
    monkeypatch.setenv("VOICECHAT_COMPILE", "0")
    out = run("-m", "bench.cuda_nodes", "--model", TINY, "--rows", "1,2", "--json", tmp_path / "n.json")
    assert "R=2:" in out
    r = json.loads((tmp_path / "n.json").read_text())
    assert r["activations"] == "mlx.core.bfloat16" and r["compiled"] is False
    assert [c["rows"] for c in r["counts"]] == [1, 2]
    for c in r["counts"]:
        assert {"encoder", "llm decode", "tts backbone", "tts codes", "codec"} <= set(c["parts"])
        assert all(n > 0 for n in c["parts"].values()) and c["tick"] == sum(c["parts"].values())


def test_group_exactness_benchmark_compares_each_conversation(tmp_path):
    out = run("-m", "bench.group_exactness", "--model", TINY, "--sessions", 3, "--frames", 6,
              "--json", tmp_path / "e.json")
    assert "max |encoder|" in out
    r = json.loads((tmp_path / "e.json").read_text())
    assert [c["seed"] for c in r["conversations"]] == [0, 1, 2]
    voices = [c["voice"] for c in r["conversations"]]
    assert voices[1] == "(samples)" and voices[0] == voices[2] != voices[1]  # every other one a voice of its own
    assert all(c["positions"] > 6 and c["max_samples_difference"] is not None for c in r["conversations"])


def test_echo_benchmark_measures_the_canceller():
    pytest.importorskip("livekit", reason="bench.echo measures WebRTC's canceller from the livekit package")
    assert "per 80 ms" in run("-m", "bench.echo", "--seconds", 3)


def test_kernel_profile_runs_and_reads_ncu_csv(tmp_path):
    """``bench.kernel_profile``: on a machine without CUDA the profiled ticks just run (the parts it evaluates named);
    ``--summarize`` splits an ncu CSV (the raw page: a header, a row of units, a row per kernel) at its marker kernels
    into the whole ticks and each part, and adds each kernel's launches and time."""
    assert "then the parts encoder" in run("-m", "bench.kernel_profile", "--model", TINY, "--rows", 2, "--ticks", 1)
    head = '"ID","Process ID","Kernel Name","gpu__time_duration.sum"\n"","","","nsecond"\n'
    kernels = [("void mlx::core::cu::gemv<float, 1>(float*)", 3000), ("void gemm_kernel<a>(int)", 5000),
               ("void mlx::core::cu::gemv<float, 1>(float*)", 1000)] + \
        [("void mlx::core::cu::unary_v<mlx::core::cu::ArcTanh, float>(float*)", 1)] * 9 + \
        [("void mlx::core::cu::unary_v<mlx::core::cu::ArcTanh, float>(float*)", 1), ("void gemm_kernel<a>(int)", 7000)]
    csv = tmp_path / "k.csv"
    csv.write_text(head + "".join(f'"{i}","1","{name}","{ns}"\n' for i, (name, ns) in enumerate(kernels)))
    out = run("-m", "bench.kernel_profile", "--summarize", csv)
    assert "3 in the whole ticks (0.01 ms of kernel time), 1 parts" in out
    assert re.search(r"gemv<float>\s+2\s+4\.0", out) and re.search(r"gemm_kernel<a>\s+1\s+5\.0", out)
    assert out.rstrip().endswith(": 0.01")  # the one part: 7 us


def test_a_kernel_profile_mark_is_one_node_and_bad_counts_are_refused_before_the_load():
    """A mark must be one kernel: runs of marks tell the parts apart (a fill kernel in each broke them, H200
    2026-12-03); ``--rows 0`` is refused in one line before any model is read."""
    from bench import kernel_profile
    from voicechat.benchmarks import count_ops

    assert count_ops(kernel_profile.marker()) == 1
    done = subprocess.run([sys.executable, "-m", "bench.kernel_profile", "--model", "/nonexistent", "--rows", "0"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2 and "--rows and --ticks take 1 or more" in done.stderr


def test_host_profile_reads_a_py_spy_file(tmp_path):
    raw = tmp_path / "frame.raw"
    raw.write_text("main (frame_split.py:78);mlx::core::async_eval (libmlx.so);cublasLtMatmul (libcublasLt.so) 4\n"
                   "main (frame_split.py:78) 2\n")
    assert "cublasLtMatmul" in run("-m", "bench.host_profile", raw)


@pytest.mark.skipif(not PEER_HARNESS.is_dir(), reason=f"the shared peer harness is not at {PEER_HARNESS}")
def test_peer_harness_runs_voicechat_as_an_engine(tmp_path):
    """The harness's own driver (bench_peers.py) runs our adapter as a worker on the tiny model and tabulates it."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "nemo_model").symlink_to(NEMO / "tiny_model")
    run("-m", "bench.peers", "--engines-json", tmp_path / "engines.json")
    run(PEER_HARNESS / "bench_peers.py", "--engines-json", tmp_path / "engines.json", "--root", tmp_path,
        "--ckpts", "tiny", "--engines", "voicechat", "--modes", "cache", "--runs", 1, "--json", tmp_path / "r.json")
    [row] = json.loads((tmp_path / "r.json").read_text())
    assert "error" not in row, row
    assert row["engine"] == "voicechat" and row["runs"] == 1 and row["frames"] == 39  # the harness's timeline
    assert set(row["profile_s"]) >= {"llm", "tts", "codec"}


def test_the_wheel_carries_no_lab_code(tmp_path):
    """``pip install .`` installs the package alone: no bench/ scripts, no run logs, no shell scripts. (Built from a
    copy of the checkout, since setuptools writes its build folders into the source.)"""
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "build", "*.egg-info",
                                                                "tests", "outputs", ".whl"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "--wheel-dir", str(tmp_path), str(source)], check=True, timeout=300, cwd=tmp_path)
    [wheel] = tmp_path.glob("voicechat-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    package = [n for n in names if ".dist-info/" not in n]
    assert all(n.startswith("voicechat/") for n in package), [n for n in package if not n.startswith("voicechat/")]
    assert sorted(Path(n).name for n in package if n.startswith("voicechat/benchmarks/")) == [
        "__init__.py", "frame.py", "sessions.py", "workload.py"]
    assert not [n for n in package if n.endswith((".sh", ".log", ".json", ".txt"))]


def test_qmv_rows_reads_the_packed_weights_as_mlx_does_and_asks_for_cuda():
    """``bench.qmv_rows``: its kernel's reading of ``mx.quantize``'s packed 4-bit layout (the same in numpy) equals
    ``mx.dequantize``; without CUDA the probe itself says it needs it, in one line."""
    assert "max difference 0" in run("-m", "bench.qmv_rows", "--check-layout")
    import mlx.core as mx

    if not mx.cuda.is_available():
        done = subprocess.run([sys.executable, "-m", "bench.qmv_rows", "--rows", "1"], capture_output=True,
                              text=True, cwd=REPO, timeout=120)
        assert done.returncode == 2 and "needs MLX's CUDA backend" in done.stderr
    done = subprocess.run([sys.executable, "-m", "bench.qmv_rows", "--runs", "0"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 2 and "--runs: 1 or more" in done.stderr


def test_op_rows_and_op_trace_find_each_row_as_alone_on_the_cpu(tmp_path):
    """``bench.op_rows`` (the frame path's ops at their own shapes) and ``bench.op_trace`` (the ops of a real tick):
    on the CPU every row of every op is the op over that row alone (docs/batching.md §3), and each says so."""
    table = run("-m", "bench.op_rows", "--rows", "2", "--json", tmp_path / "ops.json")
    results = json.loads((tmp_path / "ops.json").read_text())["results"]
    assert len(results) >= 15 and all(r["rows_alone"] for r in results.values()), table
    trace = run("-m", "bench.op_trace", "--model", TINY, "--rows", "2", "--ticks", "1", "--json", tmp_path / "t.json")
    ops = json.loads((tmp_path / "t.json").read_text())["ops"]
    watched = {o["op"] for o in ops}
    # no conv: the subsampling's are a product and elementwise taps (voicechat/stt/fastconformer.py)
    assert {"matmul", "scaled_dot_product_attention", "layer_norm", "rfft"} <= watched, trace
    assert all(o["differ"] == 0 for o in ops), trace
