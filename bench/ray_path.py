"""What the Ray Serve path adds: ``python -m bench.ray_path [--model M] [--frames N] [--rounds K]``.

Starts ``voicechat serve`` (direct) and ``voicechat serve --ray --replicas 1`` (a local Ray cluster) on the same model
side by side, then talks to each in turn, ``--rounds`` times: one 80 ms append of 24 kHz PCM16, then wait for that
frame's ``voicechat.frame`` event, ``--frames`` times. A frame's latency is append to event (the model's compute plus
the transport); the Ray path's added latency is its p50 and p95 minus the direct server's, from the same rounds.
Then the replica's cold start: what Ray's deployment took to be ready, the model's load in the replica, and, after
the replica's process is killed (SIGKILL), how long until a new conversation is admitted (Ray notices, starts a new
replica, its model loads). Without ``--model``: the demo model. Ray binds to the machine's network interface
(docs/deploy.md): on a machine whose traffic must stay on loopback run it in a namespace, as tests/test_deploy.py
does (its smoke test runs there).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from voicechat.benchmarks.workload import stats
from voicechat.realtime import RATE

FRAME_SAMPLES = RATE * 8 // 100  # one 80 ms frame of 24 kHz input: the session makes one frame of each
TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m voicechat serve ARGS`` in its own process, once it prints its address."""

    def __init__(self, args: list[str], env: dict, log: Path):
        t0 = time.perf_counter()
        self.log = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "voicechat", "serve", *args], stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env)
        line = self.proc.stdout.readline()
        while line and "Realtime API at" not in line:
            line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"voicechat serve {' '.join(args)} did not start:\n{log.read_text()[-3000:]}")
        self.ready_seconds = time.perf_counter() - t0
        self.url = re.search(r"ws://\S+", line).group(0)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


async def frame_latencies(url: str, frames: int) -> list[float]:
    """Seconds from each 80 ms append to its frame's event, one frame at a time."""
    from websockets.asyncio.client import connect

    rng = np.random.default_rng(0)
    async with connect(url + "?voicechat_frames=1", max_size=None) as ws:
        await next_event(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime",
                                                                          "instructions": "Be brief."}}))
        await next_event(ws, "session.updated")
        latencies = []
        for _ in range(frames):
            chunk = (rng.standard_normal(FRAME_SAMPLES) * 3000).astype("<i2")
            t0 = time.perf_counter()
            await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                      "audio": base64.b64encode(chunk.tobytes()).decode()}))
            await next_event(ws, "voicechat.frame")
            latencies.append(time.perf_counter() - t0)
        return latencies


class Refused(Exception):
    """The server answered a GA error event (server_busy ...)."""


async def next_event(ws, kind: str) -> dict:
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        if event["type"] == "error":
            raise Refused(f"the server answered an error: {event['error']}")
        if event["type"] == kind:
            return event


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def replica_pids(server: Server) -> list[int]:
    """The Ray Serve replicas this ``serve --ray`` started (their process title is ``ray::ServeReplica:...``)."""
    pids = []
    for pid in descendants(server.proc.pid):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::ServeReplica"):
                pids.append(pid)
        except OSError:
            pass
    return pids


def restart_seconds(server: Server) -> float:
    """SIGKILL the replica, then time until a new conversation is admitted (it waits in Ray's proxy meanwhile)."""
    (pid,) = replica_pids(server)
    t0 = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    while True:
        try:
            asyncio.run(frame_latencies(server.url, 1))
            return time.perf_counter() - t0
        except Exception as e:  # while no replica is live: HTTP 500/503 at the handshake, a refusal; ask again
            if time.perf_counter() - t0 > 600:
                raise SystemExit(f"no replica came back within 600 s ({e})")
            time.sleep(0.2)


def run(model: str | None, frames: int, rounds: int) -> dict:
    temp = Path(tempfile.mkdtemp(prefix="vc-rp-"))  # short: Ray's socket paths must fit in 107 bytes
    # a token of the run's own: Ray's local cluster would otherwise write one to ~/.ray/auth_token
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), **os.environ, "RAY_TMPDIR": str(temp),
           "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    which = [*(["--model", model] if model else ["--demo"]), "--max-sessions", "1"]  # the same engine on both paths
    direct = Server([*which, "--port", "0"], env, temp / "direct.log")
    ray = None
    try:
        ray = Server([*which, "--ray", "--replicas", "1", "--port", str(free_port())], env, temp / "ray.log")
        measured = {"direct": [], "ray": []}
        for _ in range(rounds):  # interleaved: both see the same machine load
            for name, server in (("direct", direct), ("ray", ray)):
                measured[name] += asyncio.run(frame_latencies(server.url, frames))
        worker_logs = "".join(p.read_text(errors="replace") for p in temp.glob("**/worker-*.err"))
        load = [float(s) for s in re.findall(r"replica \d+ ready: .* loaded in ([\d.]+) s", worker_logs)]
        restart = restart_seconds(ray)
        return {"frames": {name: stats(v) for name, v in measured.items()},
                "deploy_ready_s": round(ray.ready_seconds, 2), "direct_ready_s": round(direct.ready_seconds, 2),
                "replica_load_s": load[0] if load else None, "restart_s": round(restart, 2)}
    finally:
        direct.stop()
        if ray is not None:
            ray.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="checkpoint directory or Hub repo id (default: the demo model)")
    p.add_argument("--frames", type=int, default=100, help="frames per conversation (default 100)")
    p.add_argument("--rounds", type=int, default=3, help="conversations with each server, interleaved (default 3)")
    p.add_argument("--json", help="also write the numbers to this file")
    a = p.parse_args(argv)
    r = run(a.model, a.frames, a.rounds)
    d, y = r["frames"]["direct"], r["frames"]["ray"]
    print(f"per 80 ms frame, append -> frame event ({d['n']} frames each, {a.rounds} interleaved rounds):")
    for name, s in (("direct", d), ("ray", y)):
        print(f"  {name:6s} p50 {s['p50']:.2f} ms  p95 {s['p95']:.2f} ms")
    print(f"  Ray adds p50 {y['p50'] - d['p50']:+.2f} ms  p95 {y['p95'] - d['p95']:+.2f} ms")
    print(f"cold start: serve --ray ready in {r['deploy_ready_s']:.1f} s (a local Ray cluster, then the replica; "
          f"direct serve: {r['direct_ready_s']:.1f} s); the replica's model load {r['replica_load_s']} s; "
          f"killed replica -> a conversation admitted again in {r['restart_s']:.1f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
