"""The Realtime server as a Ray Serve application: replicas of one model behind one address (docs/deploy.md).

Each replica is the server of ``voicechat serve``: it loads one model (``realtime.loaded_engine``) and serves the same
FastAPI app (``realtime.create_app``); Ray's proxy is the one address and keeps each WebSocket on the replica that
accepted it for its whole life. What Ray does not do by itself, and the three small additions that do it:

- admission: Ray's proxy queues a connection over ``max_ongoing_requests`` silently, then answers HTTP 500, not the
  GA ``server_busy`` (docs/deploy.md §1). So a replica takes one connection beyond its conversations
  (``ANSWER_SLOTS``), and the server answers that one ``server_busy`` and close 1013 as it does without Ray; the
  router (:class:`FewestConversations`) sends a new connection to a replica with a free conversation slot whenever
  one has one, so the extra slot is used only when every replica is full.
- readiness: a replica's constructor returns once its model has loaded, and Ray routes only to replicas whose
  constructor has returned; ``check_health`` (Ray's liveness check) fails once the engine has stopped.
- a replica that dies under its conversations cannot close them: the proxy's middleware (:class:`ReplicaLoss`) sends
  each such WebSocket a GA ``error`` (``replica_lost``) and closes it with 1011.
- a drain: Ray tells a replica nothing before it stops it, so ``voicechat serve --ray`` tells every replica through a
  small actor (:class:`Stop`) on SIGTERM, and each drains its server as ``voicechat serve`` does.

    voicechat serve --ray --replicas 2 --port 8000 --demo          # a local Ray cluster, started and stopped here
    serve run voicechat.deploy:build replicas=2 demo=true          # Ray's own command (or a config file)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import time
from typing import Optional

import ray
from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import RequestRouter

from .engine import check_limits
from .errors import ConfigError
from .limits import DEFAULT_DRAIN_SECONDS, DEFAULT_IDLE_SECONDS
from .realtime import PATH, ClientEventError, ServeError, create_app, error_event, event_text, loaded_engine
from .realtime.drain import CLOSING_SECONDS, Forced, Signals

log = logging.getLogger("voicechat.deploy")

APP = "voicechat"  # the Ray Serve application's name
ANSWER_SLOTS = 1  # connections a replica takes beyond its conversations, to answer them server_busy
PROBE_SECONDS = 1.0  # how long the router waits for a replica to say how many connections it holds
CLOSE_INTERNAL_ERROR = 1011  # RFC 6455 §7.4.1: the server met a condition that kept it from going on
# Ray Serve imports this function in each proxy for the middlewares it returns (ray.serve._private.constants)
PROXY_CALLBACK = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_MIDDLEWARES = "voicechat.deploy.proxy_middlewares"
# A replica's conversations end with it: Ray waits this long for them when it stops a replica (scale-down, a new
# version) instead of its default 20 s, which would cut them off.
DRAIN_SECONDS = 3600.0
STOP = "voicechat-stop"  # the Stop actor's name, in the application's namespace
STOP_POLL_SECONDS = 0.5  # how often a stopping replica looks for its last connections (Ray's default: 2 s)


class ArgumentError(ServeError):
    """Arguments the deployment cannot take (the command line exits 2 with it)."""


# ---------------------------------------------------------------------------------------------------------------
# admission: the replica with the fewest conversations
# ---------------------------------------------------------------------------------------------------------------
class FewestConversations(RequestRouter):
    """Ray Serve request router: a new connection goes to the replica with the fewest open connections, asked of
    every replica as it comes (one small call each, once per conversation), so a full replica's answer slot
    (``ANSWER_SLOTS``) is used only when every replica is full, and a replica that does not answer within
    ``PROBE_SECONDS`` (stuck, dying) gets none. Ray's default (power of two choices) compares two random replicas
    by counts it keeps up to 10 s: with three or more replicas it can pick a full one beside a free one.

    The chosen replica's count goes up at once in Ray's table (``replica_queue_len_cache``): Ray raises it only when
    the request is sent, and a connection routed meanwhile must see it."""

    async def choose_replicas(self, candidate_replicas, pending_request=None):
        counts = await self.connections(candidate_replicas)
        if not counts:  # none answered: Ray asks again after a backoff
            return []
        fewest = min(counts.values())
        chosen = random.choice([r for r, n in counts.items() if n == fewest])
        self.replica_queue_len_cache.update(chosen.replica_id, fewest + 1)
        return [[chosen]]

    async def connections(self, replicas) -> dict:
        """{replica: connections it holds} for the replicas that answered in time. Where Ray's table changed while
        the answers came (a choice or a send meanwhile), its count is the newer one."""
        table = self.replica_queue_len_cache
        before = [table.get(r.replica_id) for r in replicas]
        answers = await asyncio.gather(*(asyncio.wait_for(r.get_queue_len(deadline_s=PROBE_SECONDS), PROBE_SECONDS)
                                         for r in replicas), return_exceptions=True)
        counts = {}
        for replica, old, n in zip(replicas, before, answers):
            if isinstance(n, int):
                now = table.get(replica.replica_id)
                counts[replica] = n if now is None or now == old else now
        return counts


# ---------------------------------------------------------------------------------------------------------------
# the replica
# ---------------------------------------------------------------------------------------------------------------
def log_to_stderr() -> None:
    """The server's log lines (one per connection: open, live session, closed) on the replica's stderr, which Ray
    keeps in its worker log (``logs/worker-*-PID.err``)."""
    logger = logging.getLogger("voicechat")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


@serve.ingress()
class Realtime:
    """One replica: one model and the FastAPI app of ``voicechat serve`` on it."""

    def __init__(self, model: str, demo: bool, offline: bool, api_key: Optional[str], idle_seconds: float,
                 max_sessions: int, max_minutes: Optional[float]):
        log_to_stderr()
        # Ray routes to a replica once this returns: after the model has loaded (readiness, not liveness)
        self.engine, self.name = loaded_engine(model=model, demo=demo, offline=offline, max_sessions=max_sessions,
                                               max_minutes=max_minutes)
        self.api_key, self.idle_seconds = api_key, idle_seconds
        log.info("replica %d ready: %s loaded in %.2f s", os.getpid(), self.name, self.engine.status().load_seconds)

    def __serve_build_asgi_app__(self):
        app = create_app(self.engine, api_key=self.api_key, model_name=self.name, idle_seconds=self.idle_seconds)
        self.realtime = app.state.realtime
        app.router.lifespan_context = self.lifespan
        return app

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        """From the replica's start on, on its server's event loop: drain when the Stop actor says so."""
        follower = asyncio.create_task(self.follow_stop())
        yield
        follower.cancel()

    async def follow_stop(self) -> None:
        """Wait for ``voicechat serve --ray``'s SIGTERM (none when Ray's own ``serve run`` deployed it: then Ray
        stops the replica its way), drain, and say so."""
        try:
            stop = ray.get_actor(STOP, namespace=APP)
        except ValueError:
            return
        await self.realtime.drain(await stop.wait.remote())
        await stop.drained.remote()

    def check_health(self) -> None:
        """Ray's periodic liveness check: a replica whose engine has stopped is replaced. It is ``GET /health``'s
        ``ready`` (the engine's state), not its 503 for a full replica: a full replica is alive."""
        status = self.engine.status()
        if status.state != "ready" or not self.engine.thread.is_alive():
            raise RuntimeError(f"the engine is not serving: {status.message}")

    def __del__(self):
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()


def application(*, model: str, demo: bool = False, offline: bool = False, api_key: Optional[str] = None,
                idle_seconds: float = DEFAULT_IDLE_SECONDS, replicas: int = 1, max_sessions: int = 1,
                max_minutes: Optional[float] = None, gpus_per_replica: float = 0.0,
                replicas_per_node: Optional[int] = None):
    """The bound Ray Serve application: ``replicas`` replicas of ``Realtime``, each holding up to ``max_sessions``
    conversations of ``max_minutes`` at most (None: the timeline's limit), each on ``gpus_per_replica`` GPUs (0: none
    reserved, as on a Mac or a CPU host)."""
    try:
        check_limits(max_sessions, max_minutes=max_minutes, flags=True)
    except ConfigError as e:
        raise ArgumentError(str(e)) from None
    if replicas < 1:
        raise ArgumentError(f"--replicas must be at least 1 (got {replicas})")
    placement = {"max_replicas_per_node": replicas_per_node} if replicas_per_node else {}
    deployment = serve.deployment(
        Realtime, name="Realtime", num_replicas=replicas, max_ongoing_requests=max_sessions + ANSWER_SLOTS,
        ray_actor_options={"num_cpus": 1, "num_gpus": gpus_per_replica},  # one core for the engine thread
        request_router_config=RequestRouterConfig(request_router_class=FewestConversations),
        graceful_shutdown_timeout_s=DRAIN_SECONDS, graceful_shutdown_wait_loop_s=STOP_POLL_SECONDS,
        health_check_period_s=5.0, health_check_timeout_s=30.0,
        **placement)
    return deployment.bind(model, demo, offline, api_key, idle_seconds, max_sessions, max_minutes)


def build(args: dict):
    """Ray's application builder (``serve run voicechat.deploy:build key=value ...`` or a config file's
    ``import_path`` with ``args``): the keys are ``application``'s arguments, as strings on the command line."""
    known = {"model", "demo", "offline", "api_key", "idle_seconds", "replicas", "max_sessions", "max_minutes",
             "gpus_per_replica", "replicas_per_node"}
    unknown = set(args) - known
    if unknown:
        raise ArgumentError(f"unknown argument {sorted(unknown)[0]!r}; voicechat.deploy:build takes "
                            + ", ".join(sorted(known)))
    kinds = {"demo": flag, "offline": flag, "idle_seconds": float, "replicas": int, "max_sessions": int,
             "max_minutes": float, "gpus_per_replica": float, "replicas_per_node": int}
    values = {key: kinds.get(key, str)(value) for key, value in args.items()}
    values.setdefault("model", "")
    if not values["model"] and not values.get("demo"):
        raise ArgumentError("give model=CHECKPOINT (a directory or a Hub repo id) or demo=true")
    return application(**values)


def flag(value) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes"):
        return True
    if str(value).lower() in ("0", "false", "no"):
        return False
    raise ArgumentError(f"expected true or false, got {value!r}")


# ---------------------------------------------------------------------------------------------------------------
# the proxy: a conversation whose replica died
# ---------------------------------------------------------------------------------------------------------------
class ReplicaLoss:
    """ASGI middleware in Ray's proxy: a Realtime WebSocket that its replica accepted and then left without a close
    (the replica's process died, its node was lost) gets a GA ``error`` event and close 1011, as a failed live
    session does, instead of a bare drop. Connections the client or the server closed pass untouched."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket" or scope.get("path") != PATH:
            return await self.app(scope, receive, send)
        state = {"accepted": False, "closed": False}

        async def watched_receive():
            message = await receive()
            if message["type"] == "websocket.disconnect":
                state["closed"] = True
            return message

        async def watched_send(message):
            if message["type"] == "websocket.accept":
                state["accepted"] = True
            elif message["type"] == "websocket.close":
                state["closed"] = True
            await send(message)

        await self.app(scope, watched_receive, watched_send)
        if state["accepted"] and not state["closed"]:
            error = ClientEventError("replica_lost", "the model replica of this conversation stopped; open a new "
                                                     "connection to talk to a live one", kind="server_error")
            await send({"type": "websocket.send", "text": event_text(error_event(error))})
            await send({"type": "websocket.close", "code": CLOSE_INTERNAL_ERROR, "reason": "replica lost"})


@ray.remote(num_cpus=0)
class Stop:
    """``voicechat serve --ray`` -> its replicas: how long to drain, once SIGTERM or SIGINT came (docs/operations.md
    §3). Each replica waits on it from its start and says when it has drained."""

    def __init__(self):
        self.seconds, self.given = 0.0, asyncio.Event()
        self.done = 0  # replicas that have drained

    async def wait(self) -> float:
        await self.given.wait()
        return self.seconds

    def drain(self, seconds: float) -> None:
        self.seconds = seconds
        self.given.set()

    def drained(self) -> None:
        self.done += 1

    def drained_count(self) -> int:
        return self.done


def drain_replicas(stop, seconds: float) -> None:
    """Tell every replica to drain for ``seconds`` and wait until the running ones have (``CLOSING_SECONDS`` more at
    most; a replica that died meanwhile has no conversation left to drain)."""
    running = serve.status().applications[APP].deployments["Realtime"].replica_states.get("RUNNING", 0)
    ray.get(stop.drain.remote(seconds))
    deadline = time.monotonic() + seconds + CLOSING_SECONDS
    while ray.get(stop.drained_count.remote()) < running and time.monotonic() < deadline:
        time.sleep(0.1)


def proxy_middlewares() -> list:
    """What Ray's proxy imports through ``PROXY_CALLBACK``."""
    from starlette.middleware import Middleware

    return [Middleware(ReplicaLoss)]


# ---------------------------------------------------------------------------------------------------------------
# voicechat serve --ray
# ---------------------------------------------------------------------------------------------------------------
def replica_error(message: str) -> str:
    """Ray's message for a failed deployment (it carries the replica's traceback) -> the replica's last error line."""
    errors = re.findall(r"^\s*[\w.]*(?:Error|Exception): (.+)$", message, re.M)
    return errors[-1] if errors else message.splitlines()[0]


def run(*, address: Optional[str], host: str, port: int, drain_seconds: float = DEFAULT_DRAIN_SECONDS,
        **app_args) -> int:
    """``voicechat serve --ray``: deploy on the Ray cluster at ``address`` (None: start a local one here), print the
    address once every replica has loaded its model, serve until SIGTERM (the replicas drain for ``drain_seconds``)
    or Ctrl+C (they close at once; a second signal does not wait), then remove what it started. -> the exit status."""
    if port == 0:
        raise ArgumentError("--ray needs a fixed --port: Ray Serve's proxy listens on the same port on every node")
    app = application(**app_args)
    try:
        ray.init(address=address, include_dashboard=False if address is None else None,
                 logging_level=logging.WARNING)
    except (OSError, RuntimeError, ValueError) as e:  # ConnectionError is an OSError
        raise ServeError(f"Ray could not start: {e}") from None
    signals = Signals()  # after ray.init, whose own SIGTERM handler exits at once
    try:
        stop = Stop.options(name=STOP, namespace=APP, get_if_exists=True).remote()
        # the proxies inherit the controller's environment: that is how they find the middleware
        serve.start(http_options={"host": host, "port": port},
                    controller_options={"runtime_env": {"env_vars": {PROXY_CALLBACK: PROXY_MIDDLEWARES}}})
        try:
            serve.run(app, name=APP, route_prefix="/")
        except RuntimeError:  # Ray gave up on the replicas (after its constructor retries)
            deployment = serve.status().applications[APP].deployments["Realtime"]
            raise ServeError(f"the replicas could not start: {replica_error(deployment.message)}") from None
        print(f"{app_args['replicas']} replica(s) ready; Realtime API at ws://{host}:{port}{PATH}", flush=True)
        drain_replicas(stop, signals.wait(drain_seconds))
    except Forced:
        pass
    finally:
        if address is None:
            serve.shutdown()
        else:
            serve.delete(APP, _blocking=False)  # drained: the controller removes the replicas without us waiting
        ray.shutdown()
    return signals.restore()
