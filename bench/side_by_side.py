"""voicechat and mlx-audio 0.6.2 side by side: one checkpoint folder, one workload, one table.

    python -m bench.side_by_side --ckpt DIR --mlx-audio-python /path/to/peer_audio/bin/python \\
        --frames 72 --runs 3 --rounds 2 --json out.json

DIR is a folder in mlx-audio's layout (its converter's output, ``python -m bench.mlx_audio_convert``,
or the peer harness's full-size ``h200/gen_ckpt.py``), which both engines load. Each round starts one fresh process
per engine, in alternating order (to spread the machine's noise over both): ours runs frame.py's ``offline`` and
``live``, mlx-audio's runs ``mlx_audio_worker.py`` in mlx-audio's venv. Workload (workload.py): ``--frames`` x 80 ms
of the harness question after the system prompt "You are a helpful assistant.", the text channel scripted as speech
(a new subword id every 4 frames, the same ids for both), each checkpoint's own TTS sampling settings, seed = run.

Per engine (ms per 80 ms frame, median over the rounds):
* offline: wall of one ``generate`` (after a warm-up, the once-per-answer stages included) / its timeline frames
  (system prompt + input frames), and the per-frame p50 / p95 after the prompt;
* session: fed 80 ms at a time, per frame p50 / p95 (from a completed 80 ms of input to its samples), and its setup.
Our side runs with this process's environment (``VOICECHAT_COMPILE=1`` compiles on a CPU too; the header says which).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENGINES = ("voicechat", "mlx-audio")


def voicechat_worker(ckpt: str, frames: int, runs: int) -> dict:
    """Our side, in this process: frame.py's offline loop and its 80 ms session on the same workload."""
    from voicechat import compute, load
    from voicechat.benchmarks import frame
    from voicechat.benchmarks.workload import PARAGRAPH, bench_input
    import mlx.core as mx

    t0 = time.perf_counter()
    model = load(ckpt, offline=True)
    load_s = time.perf_counter() - t0
    x = bench_input(frames)
    out = {"engine": "voicechat", "device": str(mx.default_device()), "mlx": mx.__version__, "blas": compute.BLAS,
           "compiled": compute.compile_enabled(), "load_s": load_s, "script_ids": model.tokenizer.encode(PARAGRAPH),
           "offline": frame.offline(model, x, runs, "speech")}
    frame.live(model, bench_input(8), "speech")  # warm-up of the session's shapes
    out["session"] = frame.live(model, x, "speech")
    out["peak_memory_gb"] = mx.get_peak_memory() / 1e9
    return out


def command(engine: str, a: argparse.Namespace) -> list[str]:
    shared = ["--ckpt", str(Path(a.ckpt).resolve()), "--frames", str(a.frames), "--runs", str(a.runs)]
    if engine == "voicechat":
        return [sys.executable, "-m", "bench.side_by_side", "--worker", *shared]
    return [a.mlx_audio_python, str(HERE / "mlx_audio_worker.py"), *shared]


def run_worker(engine: str, a: argparse.Namespace) -> dict:
    """One fresh process; its last stdout line is its JSON. Records the machine's load around it."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    before = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run(command(engine, a), cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0 or not p.stdout.strip():
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"engine": engine, "error": f"exit {p.returncode}: {tail}", "process_s": wall}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out.update(process_s=wall, loadavg_before=before, loadavg_after=os.getloadavg()[0])
    return out


def row_values(r: dict) -> dict:
    """The table's numbers of one worker's result (ms)."""
    o, s = r["offline"], r["session"]
    return {"offline_ms_per_timeline_frame": 1e3 * o["wall_per_generate_s"] / o["timeline_frames"],
            "offline_frame_p50": o["frames"]["p50"], "offline_frame_p95": o["frames"]["p95"],
            "session_frame_p50": s["frames"]["p50"], "session_frame_p95": s["frames"]["p95"],
            "session_setup_ms": 1e3 * s["setup_s"], "load_ms": 1e3 * r["load_s"]}


def summarize(results: dict) -> dict:
    """Per engine, the median over its rounds of every table value; the ratios voicechat / mlx-audio."""
    summary = {}
    for engine, rounds in results.items():
        ok = [row_values(r) for r in rounds if "error" not in r]
        if ok:
            summary[engine] = {k: statistics.median(v[k] for v in ok) for k in ok[0]}
    if len(summary) == 2:
        ours, theirs = summary["voicechat"], summary["mlx-audio"]
        summary["ratio"] = {k: ours[k] / theirs[k] for k in ours if theirs[k]}
    return summary


LABELS = {"offline_ms_per_timeline_frame": "offline: wall / timeline frame", "offline_frame_p50": "offline: frame p50",
          "offline_frame_p95": "offline: frame p95", "session_frame_p50": "session (80 ms feeds): frame p50",
          "session_frame_p95": "session (80 ms feeds): frame p95", "session_setup_ms": "session setup",
          "load_ms": "load"}


def print_table(report: dict) -> None:
    s = report["summary"]
    first = next((r for rounds in report["results"].values() for r in rounds if "error" not in r), {})
    print(f"checkpoint {report['ckpt']}  device {first.get('device')}  mlx {first.get('mlx')}  "
          f"BLAS {first.get('blas')}  voicechat compiled {first.get('compiled')}")
    print(f"workload: {report['frames']} x 80 ms input after the system prompt, a new subword id every 4 frames; "
          f"{report['rounds']} rounds x {report['runs']} offline runs per engine, fresh processes, alternating")
    for engine, rounds in report["results"].items():
        for r in rounds:
            if "error" in r:
                print(f"  {engine}: ERROR {r['error']}")
    names = [e for e in ENGINES if e in s]
    print(f"{'ms (medians over rounds)':36s}" + "".join(f"{n:>14s}" for n in names)
          + (f"{'ratio':>10s}" if "ratio" in s else ""))
    for key, label in LABELS.items():
        line = f"{label:36s}" + "".join(f"{s[n][key]:14.2f}" for n in names)
        if "ratio" in s and key in s["ratio"]:
            line += f"{s['ratio'][key]:10.2f}"
        print(line)
    same = report.get("same_script_ids")
    print(f"same scripted ids in both engines: {same}; mlx-audio's text channel followed the script: "
          f"{report.get('mlx_audio_scripted')}")


def side_by_side(a: argparse.Namespace) -> dict:
    results = {e: [] for e in ENGINES}
    for r in range(a.rounds):
        for engine in (ENGINES if r % 2 == 0 else ENGINES[::-1]):
            results[engine].append(run_worker(engine, a))
            print(f"round {r + 1}/{a.rounds} {engine}: "
                  + (results[engine][-1].get("error") or f"{results[engine][-1]['process_s']:.0f} s"), file=sys.stderr)
    done = [r for rs in results.values() for r in rs if "error" not in r]
    ids = {json.dumps(r["script_ids"]) for r in done}
    scripted = [r[k]["scripted"] for r in results["mlx-audio"] if "error" not in r for k in ("offline", "session")]
    return {"ckpt": str(a.ckpt), "frames": a.frames, "runs": a.runs, "rounds": a.rounds, "results": results,
            "same_script_ids": len(ids) == 1 if done else None,
            "mlx_audio_scripted": all(scripted) if scripted else None, "summary": summarize(results)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="checkpoint folder in mlx-audio's layout")
    p.add_argument("--mlx-audio-python", default="python3", help="python with mlx-audio 0.6.2 (default python3)")
    p.add_argument("--frames", type=int, default=72, help="80 ms input frames (default 72)")
    p.add_argument("--runs", type=int, default=3, help="timed offline runs per process (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="fresh processes per engine, alternating (default 2)")
    p.add_argument("--json", help="write every round's numbers and the summary here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(voicechat_worker(a.ckpt, a.frames, a.runs)))
        return 0
    report = side_by_side(a)
    print_table(report)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0 if report["summary"].keys() >= set(ENGINES) else 1


if __name__ == "__main__":
    raise SystemExit(main())
