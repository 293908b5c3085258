"""Running ``voicechat serve`` as a service (docs/operations.md): ``GET /metrics`` read with prometheus-client's own
parser while a conversation runs, the structured conversation log lines, and the drain on SIGTERM (a real
``serve --demo`` process and the ``openai`` SDK as the client)."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("openai", reason="the Realtime tests need `pip install openai[realtime]`")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from test_realtime import MODEL, TIMEOUT, Server, client, receive  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

CHUNK = np.zeros(1920, np.int16)  # 80 ms of silence at 24 kHz
DRAIN = 3.0  # --drain-seconds in these tests


def scrape(server: Server) -> dict:
    """{(name, sorted labels): value} of every sample ``GET /metrics`` serves, parsed by prometheus-client."""
    with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/metrics", timeout=TIMEOUT) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def health(server: Server) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/health", timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def health_once_draining(server: Server, since: float) -> tuple[int, dict]:
    """``/health`` once it says the server drains, or its last answer within the drain."""
    answer = health(server)
    while answer[0] == 200 and time.monotonic() < since + DRAIN - 1:
        time.sleep(0.1)
        answer = health(server)
    return answer


async def talking(server: Server):
    """A connection whose session is configured and has heard its first audio; -> (manager, connection)."""
    manager = client(server).realtime.connect(model=MODEL, extra_query={"voicechat_frames": "1"})
    conn = await manager.enter()
    assert (await receive(conn))["type"] == "session.created"
    await conn.session.update(session={"type": "realtime", "instructions": "Be brief."})
    await append(conn)
    while (await receive(conn))["type"] != "voicechat.session.ready":
        pass
    return manager, conn


async def append(conn) -> None:
    await conn.input_audio_buffer.append(audio=base64.b64encode(CHUNK.astype("<i2").tobytes()).decode())


async def frames(conn, n: int) -> None:
    """Read until ``n`` more frames of the model's timeline have come."""
    while n:
        n -= (await receive(conn))["type"] == "voicechat.frame"


def test_metrics_move_during_a_conversation_and_each_conversation_logs_its_start_and_end(tmp_path):
    with Server(tmp_path, "--max-sessions", "1") as server:
        before = scrape(server)

        async def scenario():
            manager, conn = await talking(server)
            for _ in range(10):
                await append(conn)
            await frames(conn, 5)
            during = scrape(server)
            refused = client(server).realtime.connect(model=MODEL)  # a second one: the model's one slot is taken
            second = await refused.enter()
            assert (await receive(second))["error"]["code"] == "server_busy"
            await second.close()
            await conn.close()
            return during

        during = asyncio.run(scenario())
        server.wait_idle()
        after = scrape(server)
        log = server.log_text()

    grew = lambda name, labels=(): during.get((name, labels), 0) - before.get((name, labels), 0)  # noqa: E731
    assert during[("voicechat_conversations_open", ())] == 1 and before[("voicechat_conversations_open", ())] == 0
    assert grew("voicechat_join_seconds_count") == 1 and during[("voicechat_join_seconds_sum", ())] > 0
    assert grew("voicechat_tick_seconds_count") >= 5
    assert grew("voicechat_audio_lag_seconds_count") >= 5
    assert during[("voicechat_state_bytes", ())] > 0
    assert before[("voicechat_model_load_seconds", ())] > 0
    assert ("voicechat_ticks_over_frame_total", ()) in during
    busy = (("reason", "server_busy"),)
    assert after[("voicechat_conversations_refused_total", busy)] == before[
        ("voicechat_conversations_refused_total", busy)] + 1
    assert after[("voicechat_errors_total", (("code", "server_busy"),))] == 1
    assert after[("voicechat_conversations_open", ())] == 0
    assert after[("voicechat_conversations_ended_total", (("reason", "client_closed"),))] == 1
    lines = [json.loads(line[line.index("{"):]) for line in log.splitlines() if "voicechat.conversations" in line]
    assert [line["event"] for line in lines] == ["conversation.start", "conversation.end"]
    start, end = lines
    assert start["id"] == end["id"] and end["reason"] == "client_closed"
    assert end["frames"] >= 5 and end["seconds"] > 0


async def talk_until_closed(conn, arrived: list) -> tuple[list, int]:
    """Keep appending 80 ms of audio each 80 ms and reading, noting when each frame arrives in ``arrived``;
    -> (the error codes, the close code)."""
    errors = []

    async def speak():
        while True:
            await append(conn)
            await asyncio.sleep(0.08)

    speaker = asyncio.create_task(speak())
    try:
        while True:
            event = await receive(conn)
            if event["type"] == "voicechat.frame":
                arrived.append(time.monotonic())
            elif event["type"] == "error":
                errors.append(event["error"]["code"])
    except ConnectionClosed as e:
        return errors, e.rcvd.code if e.rcvd else None
    finally:
        speaker.cancel()


def stop_while_talking(server: Server, sig: int) -> tuple[float, list, list, int, tuple]:
    """Send ``sig`` to the server once a talking client has had 3 frames; -> (the signal's time, frame arrivals,
    error codes, close code, /health during the drain)."""
    async def scenario():
        manager, conn = await talking(server)
        arrived = []
        task = asyncio.create_task(talk_until_closed(conn, arrived))
        while len(arrived) < 3:
            await asyncio.sleep(0.02)
        sent = time.monotonic()
        server.proc.send_signal(sig)
        during = await asyncio.to_thread(health_once_draining, server, sent) if sig == signal.SIGTERM else None
        return (sent, arrived, *await asyncio.wait_for(task, TIMEOUT), during)

    return asyncio.run(scenario())


def test_sigterm_lets_a_conversation_go_on_for_the_drain_then_closes_it_1001(tmp_path):
    server = Server(tmp_path, "--drain-seconds", str(DRAIN))
    try:
        sent, arrived, errors, code, during = stop_while_talking(server, signal.SIGTERM)
        status = server.proc.wait(DRAIN + 5)
        exited = time.monotonic()
    finally:
        server.proc.kill()
        server.out.close()
    assert during == (503, {**during[1], "state": "draining", "ready": False})
    late = [t - sent for t in arrived if t > sent]
    assert late and max(late) > DRAIN - 0.5, f"the conversation stopped {max(late, default=0):.2f} s after SIGTERM"
    assert errors == ["server_shutting_down"] and code == 1001
    assert status == 0 and exited - sent < DRAIN + 5
    assert '"reason": "server_shutting_down"' in server.log.read_text()


def test_sigint_closes_at_once_with_1001_and_exits_130(tmp_path):
    server = Server(tmp_path, "--drain-seconds", "30")
    try:
        sent, arrived, errors, code, _ = stop_while_talking(server, signal.SIGINT)
        closed = time.monotonic()
        status = server.proc.wait(10)
    finally:
        server.proc.kill()
        server.out.close()
    assert errors == ["server_shutting_down"] and code == 1001
    assert closed - sent < 5  # not the 30 s drain
    assert status == 130


def test_sigterm_drains_the_apps_live_conversation_too(tmp_path):
    from types import SimpleNamespace

    from test_app import http_status, start_app, wait_for

    proc, url, log = start_app(tmp_path, "--demo", "--drain-seconds", str(DRAIN))
    try:
        # the app serves pages while its model loads; audio before then is refused (model_not_ready)
        wait_for(lambda: http_status(url + "health") == 200, "the model", timeout=120)
        app = SimpleNamespace(proc=proc, base_url=url + "v1")
        sent, arrived, errors, code, during = stop_while_talking(app, signal.SIGTERM)
        status = proc.wait(DRAIN + 5)
        exited = time.monotonic()
    finally:
        proc.kill()
    assert during == (503, {**during[1], "state": "draining", "ready": False})
    assert max(t - sent for t in arrived) > DRAIN - 0.5
    assert errors == ["server_shutting_down"] and code == 1001
    assert status == 0 and exited - sent < DRAIN + 5, log.read_text()


def test_a_conversation_falling_behind_is_told_so_and_told_when_it_has_caught_up(tmp_path):
    """Three seconds of audio at once: the model is behind the client by more than half the Talk live tab's bound
    until it has heard them (docs/app.md); no bound on audio ahead of real time (docs/limits.md §2) refuses them."""
    with Server(tmp_path, "--max-sessions", "1", "--max-ahead-seconds", "0") as server:
        async def scenario():
            manager, conn = await talking(server)
            await conn.input_audio_buffer.append(audio=base64.b64encode(
                np.zeros(3 * 24000, "<i2").tobytes()).decode())
            warnings = []
            while len(warnings) < 2:
                event = await receive(conn)
                if event["type"] == "voicechat.falling_behind":
                    warnings.append(event)
            await conn.close()
            return warnings

        warnings = asyncio.run(scenario())
    assert [w["falling_behind"] for w in warnings] == [True, False]
    assert warnings[0]["behind_ms"] > 1000 and warnings[0]["limit_ms"] == 2000
    assert warnings[1]["behind_ms"] <= 1000
