"""The Realtime server as a Ray Serve application (voicechat/deploy.py), on a local two-node Ray cluster of the demo
model, driven by the official ``openai`` SDK through Ray's one address.

Ray's processes bind and connect through the machine's network interface even when told 127.0.0.1
(docs/deploy.md §2), so the cluster tests run in a network namespace that holds only loopback, and
in a PID namespace of their own: every process the cluster starts ends with it. ``test_the_cluster_...`` makes the
namespaces and runs this file's cluster tests inside them; outside they skip.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray.serve", reason="the deployment tests need `pip install \"ray[serve]\"`")
openai = pytest.importorskip("openai", reason="the Realtime tests need `pip install openai[realtime]`")
from websockets.exceptions import ConnectionClosed  # noqa: E402

from netns import inside_only as namespace_only, run_inside  # noqa: E402
from test_realtime import CHUNK, MODEL, TIMEOUT, WAV, close, pcm16_24k, receive, receive_until  # noqa: E402
from test_operations import DRAIN, stop_while_talking  # noqa: E402
from voicechat import deploy, realtime  # noqa: E402

ROOT = Path(__file__).parent.parent
inside_only = namespace_only("test_the_cluster_tests_pass_inside_a_loopback_only_namespace")
RAY_PORT, HTTP_PORT = 6390, 8000  # the namespace is empty: any port is free there
SESSIONS = 2  # conversations per replica
MINUTES = 5.0  # each replica's cap on a conversation (serve --max-minutes), far past the tests' conversations
PROMPTS = ("Be brief.", "Answer in one word.", "You are a pirate.", "Speak slowly.")


# ---------------------------------------------------------------------------------------------------------------
# outside: the namespaces
# ---------------------------------------------------------------------------------------------------------------
def ray_processes(marker: str) -> list[str]:
    """Command lines of this machine's processes that mention ``marker`` (the cluster's own temp folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and marker in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def ray_token() -> dict:
    """Token authentication with a token of the run's own, in the environment of every Ray process it starts: Ray
    2.60's ``ray.init`` would otherwise write one to ~/.ray/auth_token, which every later cluster of the machine
    reads (a second node started without it is refused)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}


@pytest.mark.slow
def test_the_cluster_tests_pass_inside_a_loopback_only_namespace(tmp_path):
    temp = Path(f"/tmp/vc-ray-{os.getpid()}")  # short: Ray's socket paths must fit in 107 bytes
    try:
        run_inside(__file__, "test_the_cluster", env={"VOICECHAT_TEST_RAY_TEMP": str(temp), **ray_token()})
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert ray_processes(str(temp)) == []  # nothing the cluster started outlives it


# ---------------------------------------------------------------------------------------------------------------
# the command line and the config file (no cluster)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--replicas", "2"], "--replicas needs --ray"),
    (["--ray", "--max-sessions", "0"], "--max-sessions must be at least 1, got 0"),
    (["--ray", "--replicas", "0"], "--replicas must be at least 1 (got 0)"),
    (["--ray", "--port", "0"], "--ray needs a fixed --port"),
])
@inside_only  # a regression that let one through would start Ray: in the namespace, it stays on loopback
def test_bad_deployment_options_exit_2_with_one_line(args, message):
    r = subprocess.run([sys.executable, "-m", "voicechat", "serve", "--demo", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == f"error: {r.stderr.strip()[7:]}" and message in r.stderr, r
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_model_that_cannot_load_is_one_line_from_the_start_serve_and_each_replica_share(tmp_path):
    """``realtime.loaded_engine`` (``serve``'s start, and each replica's) reports the loader's own error."""
    r = subprocess.run([sys.executable, "-m", "voicechat", "serve", "--model", str(tmp_path / "none"), "--offline",
                        "--port", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r
    assert r.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'none'} is neither a checkpoint directory nor a " \
                                                "Hugging Face repo id (org/name)", r.stderr


@inside_only
def test_a_ray_that_cannot_start_is_one_line(tmp_path):
    long = tmp_path / ("x" * 120)  # Ray's socket paths must fit in 107 bytes
    long.mkdir()
    r = subprocess.run([sys.executable, "-m", "voicechat", "serve", "--ray", "--demo"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "RAY_TMPDIR": str(long)})
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.splitlines()[-1].startswith("error: Ray could not start: validate_socket_filename failed")


def docs_config() -> dict:
    import yaml

    text = (ROOT / "docs" / "deploy.md").read_text()
    return yaml.safe_load(re.search(r"```yaml\n(# voicechat.yaml.*?)```", text, re.S).group(1))


def test_the_documented_config_file_is_a_valid_serve_config_of_the_builder():
    from ray.serve.schema import ServeDeploySchema

    config = ServeDeploySchema.model_validate(docs_config())
    (application,) = config.applications
    assert application.import_path == "voicechat.deploy:build"
    env = config.controller_options.runtime_env["env_vars"]
    assert env == {deploy.PROXY_CALLBACK: deploy.PROXY_MIDDLEWARES}
    assert deploy.build(application.args) is not None  # the builder takes the documented arguments
    (realtime_options,) = application.deployments
    assert realtime_options.name == "Realtime"
    with pytest.raises(deploy.ArgumentError, match="unknown argument 'replica'"):
        deploy.build({"demo": "true", "replica": "2"})
    with pytest.raises(deploy.ArgumentError, match="expected true or false"):
        deploy.build({"demo": "maybe"})


def test_the_proxy_imports_the_middleware_from_the_documented_path():
    from ray.serve._private.utils import call_function_from_import_path

    (middleware,) = call_function_from_import_path(deploy.PROXY_MIDDLEWARES)
    assert middleware.cls is deploy.ReplicaLoss


# ---------------------------------------------------------------------------------------------------------------
# inside: the benchmark (first: before the cluster's fixture starts its cluster)
# ---------------------------------------------------------------------------------------------------------------
@inside_only
def test_the_ray_path_benchmark_reports_both_servers_and_the_restart(tmp_path):
    out = tmp_path / "ray_path.json"
    subprocess.run([sys.executable, "-m", "bench.ray_path", "--frames", "3", "--rounds", "1",
                    "--json", str(out)], cwd=ROOT, check=True, timeout=600,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    r = json.loads(out.read_text())
    assert r["frames"]["direct"]["n"] == r["frames"]["ray"]["n"] == 3
    assert r["replica_load_s"] > 0 and r["restart_s"] > 0 and r["deploy_ready_s"] > 0


# ---------------------------------------------------------------------------------------------------------------
# inside: the cluster
# ---------------------------------------------------------------------------------------------------------------
class Cluster:
    """A Ray head and a second node on this host, and ``voicechat serve --ray`` deploying 2 replicas of the demo
    model on them, one per node, each holding ``SESSIONS`` conversations. Each replica's log (the server's lines)
    is Ray's ``worker-*-PID.err``."""

    def __init__(self, temp: Path):
        self.temp = temp
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
        ray = [str(Path(sys.executable).parent / "ray"), "start", "--num-cpus", "1",
               "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
        for args in (["--head", "--port", str(RAY_PORT), "--include-dashboard", "false", "--temp-dir", str(temp)],
                     ["--address", f"127.0.0.1:{RAY_PORT}"]):
            started = subprocess.run([*ray, *args], env=self.env, capture_output=True, text=True)
            assert started.returncode == 0, f"ray start {' '.join(args)} failed:\n{started.stdout}\n{started.stderr}"
        self.log = open(temp / "serve.log", "w")
        self.serve = subprocess.Popen(
            [sys.executable, "-m", "voicechat", "serve", "--ray", "--address", f"127.0.0.1:{RAY_PORT}", "--demo",
             "--replicas", "2", "--max-sessions", str(SESSIONS), "--max-minutes", str(MINUTES),
             "--replicas-per-node", "1",
             "--port", str(HTTP_PORT), "--drain-seconds", str(DRAIN)],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=self.env, cwd=ROOT)
        line = self.serve.stdout.readline()
        while line and "Realtime API at" not in line:
            line = self.serve.stdout.readline()
        assert line, f"the deployment did not start:\n{(temp / 'serve.log').read_text()}"
        self.base_url = f"http://127.0.0.1:{HTTP_PORT}/v1"

    def replica_logs(self) -> dict[int, str]:
        """Each replica process's server log, by PID."""
        logs = {}
        for path in (self.temp / "session_latest" / "logs").glob("worker-*.err"):
            text = path.read_text(errors="replace")
            if "voicechat.deploy: replica" in text:
                logs[int(re.search(r"-(\d+)\.err$", path.name).group(1))] = text
        return logs

    def replica_of(self, session_id: str) -> int:
        """The PID of the replica whose server opened ``session_id``'s live session."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for pid, text in self.replica_logs().items():
                if f"live session {session_id} opened" in text:
                    return pid
            time.sleep(0.1)
        raise AssertionError(f"no replica logged {session_id}")

    def ready_replicas(self) -> set[int]:
        return {pid for pid, text in self.replica_logs().items() if "ready:" in text and alive(pid)}

    def wait_idle(self) -> None:
        """Until every live replica's admitted connections have closed (each logs ': open' and ': closed')."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            logs = [text for pid, text in self.replica_logs().items() if alive(pid)]
            if all(text.count(": open\n") == text.count(": closed\n") for text in logs):
                return
            time.sleep(0.05)
        raise AssertionError("a connection is still open")

    def stop(self) -> None:
        """SIGINT to the driver (it removes the application), then every other process of this PID namespace: all
        of them were started here."""
        self.serve.send_signal(signal.SIGINT)
        self.serve.wait(60)
        self.log.close()
        mine = {os.getpid(), *ancestors()}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in namespace_pids() - mine:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while namespace_pids() - mine and time.monotonic() < deadline:
                time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def namespace_pids() -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and alive(int(p.name))}


def ancestors() -> set[int]:
    pids, pid = set(), os.getppid()
    while pid > 0:
        pids.add(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return pids


@pytest.fixture(scope="module")
def cluster():
    temp = Path(os.environ["VOICECHAT_TEST_RAY_TEMP"])
    temp.mkdir(parents=True, exist_ok=True)
    c = Cluster(temp)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def references():
    """Each prompt's conversation run alone: the demo model built here as ``serve --demo`` builds it, fed the same
    24 kHz PCM16 chunks (ids and codes per frame)."""
    import voicechat
    from voicechat.random_checkpoint import write_tiny_checkpoint

    model = voicechat.load(write_tiny_checkpoint(Path(os.environ["VOICECHAT_TEST_RAY_TEMP"]) / "tiny", seed=0),
                           offline=True)
    refs = {}
    for prompt in PROMPTS:
        session = model.session(system_prompt=prompt)
        frames = [f for chunk in CHUNKS for f in session.feed(chunk, realtime.RATE)]
        refs[prompt] = [(f.position, int(f.text_id), np.asarray(f.codes).tolist()) for f in frames]
    return refs


def conversation_chunks() -> list[np.ndarray]:
    _, pcm = pcm16_24k(WAV)
    sent = np.concatenate([pcm, np.zeros(realtime.RATE // 2, np.int16)])  # then half a second of silence
    return [sent[i:i + CHUNK] for i in range(0, len(sent), CHUNK)]


CHUNKS = conversation_chunks()


# ---------------------------------------------------------------------------------------------------------------
# conversations through the SDK
# ---------------------------------------------------------------------------------------------------------------
class Talk:
    """One conversation: connect, configure, stream the chunks (optionally pausing halfway), and keep every
    ``voicechat.frame``'s (position, text id, codes)."""

    def __init__(self, cluster: Cluster, prompt: str):
        self.cluster, self.prompt = cluster, prompt
        self.frames: list = []
        self.session_id = None
        self.caught_up = 0.0  # when real time reaches the end of the audio sent so far

    async def open(self):
        """Connect; returns the first event (session.created, or an error such as server_busy)."""
        client = openai.AsyncOpenAI(api_key="unused", base_url=self.cluster.base_url)
        self.manager = client.realtime.connect(model=MODEL, extra_query={"voicechat_frames": "1"})
        self.conn = await self.manager.enter()
        first = await receive(self.conn)
        if first["type"] == "session.created":
            self.session_id = first["session"]["id"]
            await self.conn.session.update(session={"type": "realtime", "instructions": self.prompt})
            await receive_until(self.conn, "session.updated")
        return first

    @property
    def replica(self) -> int:
        return self.cluster.replica_of(self.session_id)

    async def stream(self, chunks) -> None:
        """At most 1.5 s ahead of real time: a replica refuses audio more than 2 s ahead, and a pause banks nothing
        (docs/limits.md §2)."""
        for chunk in chunks:
            seconds = len(chunk) / realtime.RATE
            await asyncio.sleep(max(0.0, self.caught_up + seconds - 1.5 - time.monotonic()))
            await self.conn.input_audio_buffer.append(audio=base64.b64encode(chunk.astype("<i2").tobytes()).decode())
            self.caught_up = max(self.caught_up, time.monotonic()) + seconds

    async def frames_until(self, position: int) -> None:
        while not self.frames or self.frames[-1][0] < position:
            event = await receive(self.conn)
            if event["type"] == "voicechat.frame":
                self.frames.append((event["position"], event["text_id"], event["codes"]))
            assert event["type"] != "error", event

    async def talk(self, expected) -> list:
        await self.stream(CHUNKS)
        await self.frames_until(expected[-1][0])
        await close(self.conn)
        return self.frames

    async def ended_by_error(self) -> tuple[dict, int]:
        """Read until the server closes: (the last error event before the close, the close code)."""
        error = None
        try:
            while True:
                event = await receive(self.conn)
                if event["type"] == "error":
                    error = event["error"]
        except ConnectionClosed as e:
            return error, e.rcvd.code


def run(coro):
    return asyncio.run(coro)


async def refused(cluster: Cluster) -> tuple[dict, int]:
    """A connection expected to be refused: (its first event, its close code)."""
    talk = Talk(cluster, PROMPTS[0])
    first = await talk.open()
    with pytest.raises(ConnectionClosed) as closed:
        await asyncio.wait_for(talk.conn.recv_bytes(), TIMEOUT)
    return first, closed.value.rcvd.code


# ---------------------------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------------------------
@inside_only
def test_two_replicas_answer_four_conversations_at_once_as_each_alone_and_a_fifth_gets_server_busy(cluster,
                                                                                                  references):
    cluster.wait_idle()

    async def scenario():
        talks = [Talk(cluster, prompt) for prompt in PROMPTS[:2 * SESSIONS]]
        for talk in talks:
            assert (await talk.open())["type"] == "session.created"
        first, code = await refused(cluster)  # every replica holds its conversations: the next one is refused
        frames = await asyncio.gather(*(t.talk(references[t.prompt]) for t in talks))
        return talks, frames, first, code

    talks, frames, first, code = run(scenario())
    assert first["type"] == "error" and first["error"]["code"] == "server_busy", first
    assert code == realtime.CLOSE_TRY_AGAIN_LATER
    for talk, got in zip(talks, frames):
        assert got == references[talk.prompt]
    replicas = [t.replica for t in talks]
    assert sorted(replicas.count(pid) for pid in set(replicas)) == [SESSIONS, SESSIONS]  # each replica full


@inside_only
def test_health_through_the_proxy_reports_the_replicas_limits(cluster):
    """``GET /health`` through Ray's proxy is a replica's own: its engine holds ``--max-sessions`` conversations of
    ``--max-minutes`` at most, as ``serve --ray`` was given them."""
    import urllib.request

    cluster.wait_idle()
    with urllib.request.urlopen(cluster.base_url.removesuffix("/v1") + realtime.HEALTH_PATH, timeout=TIMEOUT) as r:
        body = json.loads(r.read())
    assert body == {"ready": True, "state": "ready", "sessions": 0, "max_sessions": SESSIONS,
                    "max_minutes": MINUTES}


@inside_only
def test_a_stuck_replica_is_given_no_conversation(cluster):
    """A replica that cannot answer (its process stopped with SIGSTOP) gets no new conversation: the router asks
    every replica and counts only those that answer in time."""
    cluster.wait_idle()
    stuck = min(cluster.ready_replicas())
    os.kill(stuck, signal.SIGSTOP)
    try:
        talk = Talk(cluster, PROMPTS[0])

        async def scenario():
            first = await talk.open()
            await close(talk.conn)
            return first

        assert run(scenario())["type"] == "session.created"
        assert talk.replica != stuck
    finally:
        os.kill(stuck, signal.SIGCONT)


@inside_only
def test_a_killed_replica_closes_its_conversations_the_others_go_on_and_the_restart_takes_conversations(
        cluster, references):
    cluster.wait_idle()
    half = len(CHUNKS) // 2

    async def kill_one():
        talks = [Talk(cluster, prompt) for prompt in PROMPTS[:2 * SESSIONS]]
        for talk in talks:
            assert (await talk.open())["type"] == "session.created"
            await talk.stream(CHUNKS[:half])
        killed = talks[0].replica
        lost = [t for t in talks if t.replica == killed]
        going_on = [t for t in talks if t not in lost]
        os.kill(killed, signal.SIGKILL)
        endings = [await t.ended_by_error() for t in lost]

        async def finish(talk):
            await talk.stream(CHUNKS[half:])
            await talk.frames_until(references[talk.prompt][-1][0])
            await close(talk.conn)
        await asyncio.gather(*(finish(t) for t in going_on))
        return killed, lost, going_on, endings

    killed, lost, going_on, endings = run(kill_one())
    assert len(lost) == len(going_on) == SESSIONS
    for error, code in endings:
        assert error["code"] == "replica_lost" and error["type"] == "server_error", error
        assert code == deploy.CLOSE_INTERNAL_ERROR
    for talk in going_on:  # the other replica's conversations went on unchanged
        assert talk.frames == references[talk.prompt]
    survivor = going_on[0].replica
    assert not alive(killed) and {t.replica for t in going_on} == {survivor}

    cluster.wait_idle()
    newcomer = Talk(cluster, PROMPTS[2])

    async def one_more():
        assert (await newcomer.open())["type"] == "session.created"
        return await newcomer.talk(references[PROMPTS[2]])

    assert run(one_more()) == references[PROMPTS[2]]  # a new conversation goes to a live replica
    assert newcomer.replica != killed

    # Ray restarts the killed replica; it takes conversations once its model has loaded: then two at once land on
    # two replicas again. The router hears of the new replica shortly after it is ready: until then both connections
    # go to the survivor (it has room for SESSIONS) or the second is refused with server_busy; both are tried again
    deadline = time.monotonic() + 180
    while len(cluster.ready_replicas()) < 2:
        assert time.monotonic() < deadline, "Ray did not restart the killed replica"
        time.sleep(0.5)
    while True:
        cluster.wait_idle()
        talks = [Talk(cluster, prompt) for prompt in PROMPTS[2:]]

        async def two():
            firsts = [await t.open() for t in talks]
            if all(f["type"] == "session.created" for f in firsts):
                return await asyncio.gather(*(t.talk(references[t.prompt]) for t in talks))
            for t in talks:
                await close(t.conn)

        frames = run(two())
        if frames is not None:
            for talk, got in zip(talks, frames):  # every conversation answered is its solo run, wherever it ran
                assert got == references[talk.prompt]
            if len({t.replica for t in talks}) == 2:
                break
        assert time.monotonic() < deadline, "the restarted replica took no conversation"
        time.sleep(1)
    replicas = {t.replica for t in talks}
    assert killed not in replicas and survivor in replicas


@inside_only  # the file's last test: it stops the deployment
def test_sigterm_drains_every_replicas_conversations_then_closes_them_1001(cluster):
    """docs/operations.md §3 through Ray: the conversation goes on for the drain, then server_shutting_down and close
    1001 (passed on by Ray's proxy), and the command exits 0."""
    from types import SimpleNamespace

    cluster.wait_idle()
    driver = SimpleNamespace(proc=cluster.serve, base_url=cluster.base_url)
    sent, arrived, errors, code, during = stop_while_talking(driver, signal.SIGTERM)
    status = cluster.serve.wait(DRAIN + 5)
    exited = time.monotonic()
    assert during == (503, {**during[1], "state": "draining", "ready": False})
    assert max(t - sent for t in arrived) > DRAIN - 0.5
    assert errors == ["server_shutting_down"] and code == 1001
    assert status == 0 and exited - sent < DRAIN + 5
