"""Isolation (docs/limits.md §2): hostile clients against ``python -m voicechat serve --demo``, each while two other
conversations stream audio at real-time pace on the same server. For every attack the two keep their gaps between
audio events under 0.5 s and their ids equal to their run without it, the server's memory returns within 50 MB of
where it was, and its log grows less than 1 MB. The hostile values are the issue's where the old server failed on
them (issue 41), else as large as it takes to fail there."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import multiprocessing
import re
import resource
import socket
import time
import traceback
import urllib.error
import urllib.request

import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="the Realtime tests need `pip install openai[realtime]`")
pytest.importorskip("websockets", reason="the Realtime server needs `pip install websockets`")
from test_realtime import MODEL, PROMPT, TIMEOUT, Server, process_status  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from voicechat.realtime import RATE  # noqa: E402
from voicechat.realtime.bounds import MAX_EVENT_CHARS, check_message, unparsed_append  # noqa: E402
from voicechat.realtime.sockets import REQUEST_BYTES, REQUEST_SECONDS, RESERVED_DESCRIPTORS  # noqa: E402

pytestmark = pytest.mark.solo  # the bystanders' gaps are real time: another test beside them would widen them
SECONDS = 4.0  # each bystander's audio
CHUNK = RATE // 10  # sent every 100 ms, as a microphone does
MAX_GAP = 0.5
MEMORY_BOUND_KIB = 50 * 1024
LOG_BOUND = 2 ** 20
IDLE = 3  # the server's --idle-timeout


def noise(seed: int) -> np.ndarray:
    return np.round(np.random.default_rng(seed).standard_normal(int(RATE * SECONDS)) * 3000).astype("<i2")


async def bystander(url: str, seed: int, first_frame: asyncio.Event) -> tuple[list, list[float]]:
    """A conversation that streams ``noise(seed)`` in real time: (its frames' ids and codes, the seconds between
    consecutive frames' arrivals, each frame carrying its 80 ms of answer audio)."""
    audio = noise(seed)
    client = openai.AsyncOpenAI(api_key="unused", base_url=url)
    async with client.realtime.connect(model=MODEL, extra_query={"voicechat_frames": "1"},
                                       websocket_connection_options={"max_queue": None}) as conn:
        await conn.session.update(session={"type": "realtime", "instructions": PROMPT})

        async def send():
            start = time.monotonic()
            for i, at in enumerate(range(0, len(audio), CHUNK)):
                await asyncio.sleep(max(0.0, start + i * CHUNK / RATE - time.monotonic()))
                await conn.input_audio_buffer.append(audio=base64.b64encode(audio[at:at + CHUNK].tobytes()).decode())

        sender = asyncio.create_task(send())
        frames, arrivals = [], []
        while True:
            try:
                event = json.loads(await asyncio.wait_for(conn.recv_bytes(), 1.5 if sender.done() else TIMEOUT))
            except asyncio.TimeoutError:
                break  # every frame of the audio has come
            if event["type"] == "voicechat.frame":
                frames.append((event["position"], event["text_id"], event["function_id"], event["codes"]))
                arrivals.append(time.monotonic())
                first_frame.set()
            assert event["type"] != "error", event
        await sender
    return frames, list(np.diff(arrivals))


def apart(attack):
    """``attack()`` (a coroutine function) run in a process of its own, so that its own work (megabytes to encode
    and send) cannot delay the bystanders of this one; its result."""
    receiver, sender = multiprocessing.Pipe(duplex=False)

    def run():
        try:
            sender.send((True, asyncio.run(attack())))
        except BaseException:
            sender.send((False, traceback.format_exc()))

    child = multiprocessing.get_context("fork").Process(target=run)
    child.start()
    assert receiver.poll(TIMEOUT * 2), "the attack did not end"
    done, result = receiver.recv()
    child.join(TIMEOUT)
    assert done, result
    return result


async def beside(url: str, attack=None, separate: bool = True):
    """Two bystanders, and ``attack()`` once both hear the model (in a process of its own when ``separate``, else
    on a thread): (each one's frames, the largest gap, the attack's result)."""
    firsts = [asyncio.Event(), asyncio.Event()]
    runs = [asyncio.create_task(bystander(url, seed, first)) for seed, first in enumerate(firsts)]
    await asyncio.wait_for(asyncio.gather(*(f.wait() for f in firsts)), TIMEOUT)
    result = await asyncio.to_thread(apart if separate else lambda a: asyncio.run(a()), attack) if attack else None
    done = await asyncio.gather(*runs)
    return [frames for frames, _ in done], max(max(gaps) for _, gaps in done), result


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("isolation"), "--max-sessions", "3", "--max-ahead-seconds", "2",
                "--idle-timeout", str(IDLE)) as s:
        yield s


@pytest.fixture(scope="module")
def alone(server):
    """The two bystanders' frames without an attack."""
    frames, gap, _ = asyncio.run(beside(server.base_url))
    print(f"\nthe bystanders alone: largest gap {gap:.3f} s")
    return frames


def resident_kib(pid: int) -> int:
    return process_status(pid)["VmRSS"]


def isolated(server: Server, alone: list, attack, separate: bool = True) -> object:
    """Run ``attack`` beside the bystanders and check what it may not cost them or the server; its result."""
    server.wait_idle()
    memory, log = resident_kib(server.proc.pid), len(server.log_text().encode())
    frames, gap, result = asyncio.run(beside(server.base_url, attack, separate))
    server.wait_idle()
    print(f"\nlargest gap beside the attack {gap:.3f} s, log +{len(server.log_text().encode()) - log} bytes")
    assert gap < MAX_GAP
    for got, expected in zip(frames, alone):
        assert len(got) >= SECONDS / 0.08 - 3 and got == expected[:len(got)]
    assert len(server.log_text().encode()) - log < LOG_BOUND
    deadline = time.monotonic() + 10  # the allocator gives freed memory back within moments
    while resident_kib(server.proc.pid) - memory > MEMORY_BOUND_KIB and time.monotonic() < deadline:
        time.sleep(0.2)
    print(f"memory {memory / 1024:.1f} -> {resident_kib(server.proc.pid) / 1024:.1f} MiB")
    assert resident_kib(server.proc.pid) - memory <= MEMORY_BOUND_KIB
    return result


async def hostile(server: Server, *messages: str, errors: int) -> list[dict]:
    """Connect, send ``messages`` and read the first ``errors`` errors they get."""
    async with connect(server.ws_url, max_size=None, max_queue=None) as ws:
        for message in messages:
            await ws.send(message)
        got = []
        while len(got) < errors:
            event = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
            if event["type"] == "error":
                got.append(event["error"])
        return got


def update(**session) -> str:
    return json.dumps({"type": "session.update", "session": {"type": "realtime", **session}})


def test_megabytes_of_tools_are_refused_unread(server, alone):
    """Five tools with a 2.9 MB description each froze every conversation for 24 s and kept 1.5 GB (the prompt was
    tokenized on the event loop); 140,000 one-letter tools (15 MiB) gave 1.8 s gaps (all built before the count
    check). Neither is parsed now: an event besides audio has at most MAX_EVENT_CHARS."""
    five = update(tools=[{"type": "function", "name": f"t{i}", "description": "d" * 2_900_000} for i in range(5)])
    many = update(tools=[{"type": "function", "name": "a", "description": "a" * 60}] * 140_000)
    assert 15 * 2 ** 20 < len(many) < 16 * 2 ** 20  # under the WebSocket limit
    errors = isolated(server, alone, lambda: hostile(server, five, many, errors=2))
    assert [e["code"] for e in errors] == ["event_too_large"] * 2
    assert all(len(e["message"]) < 300 for e in errors)


def test_a_deep_schema_is_refused_before_it_is_built(server, alone):
    """A schema nested 440 levels with long keys blocked the event loop for seconds and logged its whole path as
    one error line. Its depth and size are checked before any Tool is built; the error names the tool only."""
    schema: dict = {"type": "nonsense"}
    for level in range(440):
        schema = {"type": "object", "properties": {f"{level}" + "k" * 2000: schema}}
    deep = update(tools=[{"type": "function", "name": "deep", "parameters": schema}])
    assert len(deep) < 2 ** 20  # under the event bound: the tools' own bounds refuse it
    errors, health = isolated(server, alone, lambda: asked_for_health(server, hostile(server, *[deep] * 10,
                                                                                      errors=10)))
    assert [(e["code"], e["param"]) for e in errors] == [("invalid_value", "session.tools[0]")] * 10
    assert all("deeper than 16 levels" in e["message"] for e in errors)
    print(f"/health answered {len(health)} times during the attack, in at most {max(health):.3f} s")
    assert len(health) >= 3 and max(health) < MAX_GAP  # the old server's event loop held /health 7.8 s


async def asked_for_health(server: Server, attack) -> tuple[object, list[float]]:
    """``attack`` (a coroutine) while ``/health`` is asked again and again, by three askers at once (a request
    after another each): its result and the seconds each request took to be answered (200, or 503 while every
    slot is taken)."""
    url = server.base_url.removesuffix("/v1") + "/health"
    seconds, done = [], asyncio.Event()

    def ask() -> None:
        start = time.monotonic()
        try:
            answer = urllib.request.urlopen(url, timeout=TIMEOUT)
        except urllib.error.HTTPError as busy:  # 503 while the attacker holds the third slot: answered all the same
            answer = busy
        with answer:
            assert json.loads(answer.read())["max_sessions"] == 3
        seconds.append(time.monotonic() - start)

    async def asking() -> None:
        while not done.is_set():
            await asyncio.to_thread(ask)

    askers = [asyncio.create_task(asking()) for _ in range(3)]
    try:
        return await attack, seconds
    finally:
        done.set()
        await asyncio.gather(*askers)


def test_a_long_tool_output_is_refused_before_the_engine_reads_it(server, alone):
    """A tool output was tokenized in full on the engine thread before it was cut to 512 tokens (1.73 s per MiB: a
    15 MiB function_call_output would have stalled every conversation about 26 s). One of 15 MiB is refused unparsed,
    one under the event bound by its length, before the engine sees either."""
    def output(chars: int) -> str:
        return json.dumps({"type": "conversation.item.create", "item": {"type": "function_call_output",
                                                                        "call_id": "call_1", "output": "o" * chars}})

    errors = isolated(server, alone, lambda: hostile(server, output(15 * 2 ** 20), output(1_000_000), errors=2))
    assert [(e["code"], e.get("param")) for e in errors] == [("event_too_large", None), ("invalid_value",
                                                                                       "item.output")]
    assert "1000000 characters" in errors[1]["message"]


def test_audio_far_ahead_of_real_time_is_refused(server, alone):
    """One valid 14 MB append (minutes of audio) was taken at once: the others got a 2.5 s gap and fell 11 s behind.
    Audio may run at most 2 s ahead of real time; the rest is refused, never buffered."""
    minutes = base64.b64encode(np.zeros(14_000_000 * 3 // 8, "<i2").tobytes()).decode()  # 14 MB: 3.6 minutes
    second = base64.b64encode(np.zeros(RATE, "<i2").tobytes()).decode()

    def append(audio: str) -> str:
        return json.dumps({"type": "input_audio_buffer.append", "audio": audio})

    async def attack():
        return await hostile(server, update(instructions=PROMPT), append(minutes), append(second), append(second),
                             append(second), errors=2)

    errors = isolated(server, alone, attack)
    # the 4.8 minutes, then the third second (two are within 2 s); nothing else
    assert [(e["code"], e["param"]) for e in errors[:2]] == [("audio_ahead_of_time", "audio")] * 2
    assert "the limit is 2 s" in errors[0]["message"]


def test_a_large_append_is_known_from_its_rest_as_json_reads_it():
    """A large append's pace is checked before its megabytes are parsed (a 14 MB one took the event loop about 50 ms
    to parse): ``unparsed_append`` tells it from the rest of the message alone, and says yes exactly where json
    reads an input_audio_buffer.append whose audio is the string ``check_message`` found."""
    big = base64.b64encode(noise(0).tobytes() * 8).decode()  # over MAX_EVENT_CHARS, with "/" and "+" in it
    assert len(big) > MAX_EVENT_CHARS and "/" in big
    append = {"type": "input_audio_buffer.append", "audio": big}
    messages = [json.dumps(append), json.dumps({"event_id": "e", **append}), json.dumps({"audio": big, "type":
                append["type"], "event_id": "x"}), json.dumps({**append, "type": "voicechat.voice.add", "name": "n"}),
                json.dumps(append).replace("/", "\\/"),  # the same audio, its slashes escaped as some encoders do
                json.dumps({"type": append["type"], "x": {"audio": big}, "audio": "AAAA"}),
                json.dumps({"type": append["type"], "x": {"audio": big}, "audio": "AAAA"})[:-1]]  # not JSON
    expected = []
    for text in messages:
        start, end = check_message(text)
        try:
            event = json.loads(text)
        except ValueError:
            event = {}
        expected.append(event.get("type") == append["type"] and event.get("audio") == text[start:end])
        assert unparsed_append(text, (start, end)) == expected[-1]
    assert expected == [True, True, True, False, False, False, False]


def test_one_sample_now_and_then_does_not_hold_a_slot(server, alone):
    """Any append, one sample too, reset the idle clock: four such clients held every slot forever. An append
    winds the clock back by the seconds it carries, so such a client is closed after about the idle timeout."""
    sample = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x00").decode()})

    async def attack():
        async with connect(server.ws_url, max_size=None, max_queue=None) as ws:
            await ws.send(update(instructions=PROMPT))
            start = time.monotonic()
            try:
                while time.monotonic() - start < 4 * IDLE:
                    await ws.send(sample)
                    await asyncio.sleep(0.2)
            except ConnectionClosed:
                pass
            events = []
            with pytest.raises(ConnectionClosed):
                while True:
                    events.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
            return [e["error"]["code"] for e in events if e["type"] == "error"], time.monotonic() - start

    codes, seconds = isolated(server, alone, attack)
    assert codes == ["idle_timeout"] and seconds < 3 * IDLE


def test_errors_quote_a_prefix_and_the_log_stays_small(server, alone):
    """20 messages with a 12 MB ``type``, never read, grew the log by 240 MB: errors echoed the whole input. Now a
    message over the event bound is refused unread, an error quotes at most a short prefix, and a connection's
    errors past the first 20 are only counted in the log."""
    unknown = json.dumps({"type": "t" * 900_000})
    huge = json.dumps({"type": "t" * 12_000_000})
    tiny = json.dumps({"type": "?"})

    async def attack():
        async with connect(server.ws_url, max_size=None, max_queue=None) as ws:
            for message in [unknown] * 20 + [huge] * 2 + [tiny] * 500:
                await ws.send(message)
            errors = [json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)) for _ in range(523)][1:]
            return [e["error"] for e in errors]

    mark = server.mark()
    errors = isolated(server, alone, attack)
    assert [e["code"] for e in errors] == ["invalid_value"] * 20 + ["event_too_large"] * 2 + ["invalid_value"] * 500
    assert max(len(json.dumps(e)) for e in errors) < 1024
    assert "'tttttttt" in errors[0]["message"] and "(900002 characters)" in errors[0]["message"]
    log = server.log_text()[mark:]
    assert log.count("invalid_value") + log.count("event_too_large") == 20 and "522 error events in all" in log


def test_a_client_that_sends_but_never_reads_is_closed(server, alone):
    """A client that never read but kept sending small bad events made the server queue an error event for each,
    without bound: the "not reading" guard counted answer audio only. Once MAX_UNSENT_EVENTS events (or
    MAX_UNSENT_CHARS characters) of any kind wait unsent, the connection is closed with 1008 "not reading"."""
    bad = json.dumps({"type": "?" * 64, "event_id": "e" * 128})  # each gets an error event of about 700 characters
    host, port = re.match(r"ws://([^:/]+):(\d+)", server.ws_url).groups()

    async def attack():
        mark = server.mark()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # what the kernel reads for it stays small
        sock.connect((host, int(port)))
        # uncompressed: the kernel's buffers take few of the error events, and the rest queue in the server
        async with connect(server.ws_url, sock=sock, compression=None) as ws:
            ws.transport.pause_reading()  # from here on it reads nothing

            async def send():
                for _ in range(50_000):
                    await ws.send(bad)

            sender = asyncio.create_task(send())
            line = await asyncio.to_thread(server.wait_for_log, "closed: the client does not read", mark)
            sent = sender.done()
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            ws.transport.resume_reading()
            with pytest.raises(ConnectionClosed) as closed:  # now it reads: what was sent, then the close
                while True:
                    await asyncio.wait_for(ws.recv(), TIMEOUT)
            return line, sent, (closed.value.rcvd.code, closed.value.rcvd.reason)

    line, sent, close = isolated(server, alone, attack)
    assert not sent  # closed before the 50,000 were all taken
    assert close == (1008, "not reading")
    assert re.search(r"\(\d+ events of \d+ characters unsent, the limit is 4096 events or 4194304 characters\)", line)


def raw_sockets(server, count: int, send: bytes) -> list[socket.socket]:
    """``count`` TCP connections to ``server`` (a Server, or the app's URL) that send ``send`` and nothing more."""
    url = server if isinstance(server, str) else server.ws_url
    host, port = re.match(r"\w+://([^:/]+):(\d+)", url).groups()
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(send)
        sockets.append(sock)
    return sockets


def closed_by_server(sockets: list[socket.socket], timeout: float) -> int:
    """How many of ``sockets`` the server closes within ``timeout`` seconds."""
    closed = 0
    for sock in sockets:
        sock.settimeout(max(0.01, timeout))
        try:
            closed += sock.recv(1024) == b""
        except ConnectionResetError:
            closed += 1
        except socket.timeout:
            pass
        sock.close()
    return closed


def closed_now(sockets: list[socket.socket]) -> int:
    """How many of ``sockets`` the server has closed by now."""
    closed = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            closed += sock.recv(1024) == b""
        except ConnectionResetError:
            closed += 1
        except BlockingIOError:
            pass
    return closed


def test_connections_without_a_whole_request_are_closed(server, alone):
    """Raw connections that sent nothing, or half an HTTP request, were never timed out (20,030 of them used up the
    descriptors). A request must be whole within REQUEST_SECONDS: such connections are closed within two."""
    half = b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"

    async def attack():
        return raw_sockets(server, 100, b"") + raw_sockets(server, 100, half)

    sockets = isolated(server, alone, attack, separate=False)  # the sockets stay open here
    start = time.monotonic()
    deadline = start + 2 * REQUEST_SECONDS + 2
    closed = sum(closed_by_server([s], deadline - time.monotonic()) for s in sockets)
    assert closed == len(sockets)


def test_a_request_body_does_not_count_as_a_heads_bytes(server):
    """REQUEST_BYTES bounds a request's head, not its body: on a kept-alive connection whose deadline check has seen
    its last request answered, a 200 KB body is read and answered (405 for /health), not cut (the body's bytes once
    counted as a head's: the app's uploads were cut, Connection reset by peer)."""
    host, port = re.match(r"ws://([^:/]+):(\d+)", server.ws_url).groups()
    connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
    try:
        for pause in (0.6, 0.5):  # requests less than uvicorn's keep-alive (5 s) apart, across the deadline's check
            connection.request("GET", "/health")
            assert connection.getresponse().read()
            time.sleep(pause * REQUEST_SECONDS)
        connection.request("POST", "/health", body=b"x" * (200 * 1024))
        answer = connection.getresponse()
        assert answer.status == 405 and answer.read()
    finally:
        connection.close()
    assert 200 * 1024 > REQUEST_BYTES


def test_headers_past_the_request_bound_are_closed_at_once(server):
    """A head that passes REQUEST_BYTES without ending (128 KiB of one header) is closed at once, before the
    deadline's check at REQUEST_SECONDS."""
    endless = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"x" * 2 * REQUEST_BYTES
    start = time.monotonic()
    assert closed_by_server(raw_sockets(server, 1, endless), REQUEST_SECONDS) == 1
    assert time.monotonic() - start < REQUEST_SECONDS


def test_connections_past_the_cap_are_closed_with_one_log_line(tmp_path, alone):
    """Past the descriptor limit the old server logged 96,255 'Too many open files' tracebacks and /health timed
    out. Connections past the cap (the limit less RESERVED_DESCRIPTORS) are closed at once, with one log line, and
    the server answers again once the idle ones have timed out."""
    limit = RESERVED_DESCRIPTORS + 150

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    with Server(tmp_path, "--max-sessions", "3", "--max-ahead-seconds", "2", preexec_fn=low_limit) as capped:
        async def attack():
            return raw_sockets(capped, 300, b"")

        sockets = isolated(capped, alone, attack, separate=False)
        for sock in sockets:
            sock.close()
        with urllib.request.urlopen(capped.base_url.removesuffix("/v1") + "/health", timeout=TIMEOUT) as health:
            assert json.loads(health.read())["ready"]  # served again: the cap's connections have gone
        log = capped.log_text()
        assert log.count("connections are open, the cap") == 1
        assert "Too many open files" not in log and "Traceback" not in log


def test_the_apps_server_has_the_same_socket_bounds(tmp_path, alone):
    """app.py serves /v1/realtime on the server Gradio starts, which had neither bound. Its connections that send
    nothing or half a request are closed within the deadline; past the cap a new one is closed at once with one log
    line, while two conversations on the app go on as alone and a connection that came before still gets /health
    answered."""
    from test_app import http_status, start_app, stop, wait_for

    limit = RESERVED_DESCRIPTORS + 150

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    half = b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
    proc, url, log = start_app(tmp_path, "--demo", preexec_fn=low_limit, HF_HUB_OFFLINE="1",
                               HF_HOME=str(tmp_path / "hf"))
    try:
        host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()
        # the bounds hold from when launch() has returned: the app prints its URL then (docs/limits.md §2)
        wait_for(lambda: "Running on local URL" in log.read_text(), "the start-up lines")
        wait_for(lambda: http_status(url + "health") == 200, "the model", timeout=120)
        before = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)  # keep-alive, from before the flood
        memory, size = resident_kib(proc.pid), log.stat().st_size

        async def attack():  # on a thread of this process: the sockets stay open here
            before.request("GET", "/health")
            first = before.getresponse()
            assert (first.status, json.loads(first.read())["sessions"]) == (200, 2)  # the two bystanders
            start = time.monotonic()
            held = raw_sockets(url, 60, b"") + raw_sockets(url, 60, half)  # under the cap: held until the deadline
            past = raw_sockets(url, 100, b"")  # the cap is reached among these
            time.sleep(1.0)
            refused = closed_now(past)
            before.request("GET", "/health")
            answer = before.getresponse()
            return start, held, refused, answer.status, json.loads(answer.read())

        print(f"\nthe bystanders alone on the app: largest gap {asyncio.run(beside(url + 'v1'))[1]:.3f} s")
        frames, gap, (start, held, refused, status, health) = asyncio.run(beside(url + "v1", attack, False))
        print(f"largest gap on the app beside the flood {gap:.3f} s")
        assert refused == 1 + 2 + len(held) + 100 - (limit - RESERVED_DESCRIPTORS)  # past the cap: closed at once
        assert status == 200 and health["sessions"] == 2
        deadline = start + 2 * REQUEST_SECONDS + 2
        assert sum(closed_by_server([s], deadline - time.monotonic()) for s in held) == len(held)
        for got, expected in zip(frames, alone):
            assert len(got) >= SECONDS / 0.08 - 3 and got == expected[:len(got)]
        assert gap < MAX_GAP
        assert http_status(url + "health") == 200  # a new connection once they have gone
        wait_for(lambda: resident_kib(proc.pid) - memory <= MEMORY_BOUND_KIB, "the memory to come back", 10)
        assert log.stat().st_size - size < LOG_BOUND
        text = log.read_text()
        assert text.count("connections are open, the cap") == 1
        assert "Too many open files" not in text and "Traceback" not in text
    finally:
        stop(proc)
