"""WebRTC calls on the Realtime server (``POST /v1/realtime/calls``, voicechat/realtime/webrtc.py), with aiortc as
the client as OpenAI documents it: an Opus microphone track playing a recording, the ``oai-events`` data channel,
the SDP offer posted, the answer set; events on the channel and the answer's audio on the remote track."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaPlayer
from aiortc.mediastreams import MediaStreamError

from netns import TEST_HOST, LOOPBACK, inside_only, run_inside
from test_realtime import (MODEL, PROMPT, TIMEOUT, WORDS, Scripted, Server, run, serve_here,  # noqa: F401 (fixture)
                           tiny_model)

RECORDING = Path(__file__).parent.parent / "assets" / "capital_16k_mono.wav"
KEY = "sesame"
OUTER = "test_calls_inside_a_namespace_of_their_own"
inside = inside_only(OUTER)  # ICE offers the machine's own address, never loopback: tests/netns.py


@pytest.mark.slow
def test_calls_inside_a_namespace_of_their_own():
    run_inside(__file__, OUTER, f"{LOOPBACK} && {TEST_HOST}", timeout=600)


@pytest.fixture(scope="module")
def turn_server(tiny_model):
    """A model that opens a turn four frames after the prompt and says WORDS."""
    yield from serve_here(Scripted(tiny_model, words=(4, tiny_model.tokenizer.encode(WORDS))))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("serve"), "--max-sessions", "1", "--api-key", KEY) as s:
        yield s


class Call:
    """An aiortc peer as a browser is one: the recording as its microphone, ``oai-events``, the remote track read."""

    def __init__(self):
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel = self.pc.createDataChannel("oai-events")
        self.events: asyncio.Queue = asyncio.Queue()
        self.channel.on("message", lambda message: self.events.put_nowait(json.loads(message)))
        self.pc.addTrack(MediaPlayer(str(RECORDING)).audio)
        self.heard: list[np.ndarray] = []  # the remote track's samples, 48 kHz
        self.pc.on("track", lambda track: asyncio.ensure_future(self.listen(track)))

    async def listen(self, track) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.heard.append(frame.to_ndarray().ravel())

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def start(self, base_url: str, key: str | None = None, session: dict | None = None) -> httpx.Response:
        """POST the offer (as application/sdp, or as the multipart form when a ``session`` comes with it)."""
        sdp = await self.offer()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            if session is None:
                answer = await http.post(f"{base_url}/realtime/calls", content=sdp,
                                         headers={**headers, "Content-Type": "application/sdp"})
            else:
                answer = await http.post(f"{base_url}/realtime/calls", headers=headers,
                                         files={"sdp": (None, sdp), "session": (None, json.dumps(session))})
        if answer.status_code == 201:
            await self.pc.setRemoteDescription(RTCSessionDescription(answer.text, "answer"))
        return answer

    async def receive(self, kind: str) -> list[dict]:
        """Events up to and including the first of type ``kind``."""
        events = [await asyncio.wait_for(self.events.get(), TIMEOUT)]
        while events[-1]["type"] != kind:
            events.append(await asyncio.wait_for(self.events.get(), TIMEOUT))
        return events

    def send(self, event: dict) -> None:
        self.channel.send(json.dumps(event))

    async def hang_up(self) -> None:
        await self.pc.close()


SESSION = {"type": "realtime", "instructions": PROMPT}


@inside
def test_aiortc_call_gets_events_on_the_channel_and_the_answer_on_the_track(turn_server):
    async def scenario():
        call = Call()
        answer = await call.start(turn_server)
        assert answer.status_code == 201, answer.text
        assert answer.headers["content-type"] == "application/sdp"
        assert answer.headers["location"].startswith("/v1/realtime/calls/rtc_")
        assert "opus/48000/2" in answer.text.lower()
        try:
            created = await call.receive("session.created")
            assert created[-1]["session"]["model"] == MODEL
            call.send({"type": "session.update", "session": SESSION})
            updated = await call.receive("session.updated")
            assert updated[-1]["session"]["instructions"] == PROMPT
            events = await call.receive("response.done")
            await asyncio.sleep(0.5)  # the answer's audio plays at real time after its events
            return events, call.heard
        finally:
            await call.hang_up()

    events, heard = run(scenario())
    kinds = [e["type"] for e in events]
    assert "response.created" in kinds and "response.output_audio.delta" not in kinds  # the audio is on the track
    transcript = "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")
    assert transcript == WORDS
    assert events[-1]["response"]["output"][0]["content"][0]["transcript"] == WORDS
    samples = np.concatenate(heard)
    assert len(samples) > 48000 * 0.5  # the track has played for at least half a second ...
    assert np.abs(samples.astype(np.int32)).max() > 1000  # ... and carried the model's (noisy) answer, not silence


@inside
def test_call_needs_the_api_key_and_a_usable_offer(server):
    async def scenario():
        call = Call()
        try:
            sdp = await call.offer()
            async with httpx.AsyncClient(timeout=TIMEOUT) as http:
                url = f"{server.base_url}/realtime/calls"
                sdp_headers = {"Content-Type": "application/sdp"}
                no_key = await http.post(url, content=sdp, headers=sdp_headers)
                wrong = await http.post(url, content=sdp, headers={**sdp_headers, "Authorization": "Bearer nope"})
                keyed = {**sdp_headers, "Authorization": f"Bearer {KEY}"}
                garbage = await http.post(url, content=re.sub(r"m=audio \d+", "m=audio port", sdp), headers=keyed)
                prose = await http.post(url, content="v=0\r\nthis is not sdp", headers=keyed)
                no_ice = await http.post(url, content=re.sub(r"a=ice-ufrag:.*\r\n", "", sdp), headers=keyed)
                no_opus = await http.post(url, content=sdp.replace("opus/48000/2", "speex/48000"), headers=keyed)
                text = await http.post(url, content=sdp, headers={"Authorization": f"Bearer {KEY}",
                                                                  "Content-Type": "text/plain"})
                bad_session = await http.post(url, headers={"Authorization": f"Bearer {KEY}"},
                                              files={"sdp": (None, sdp), "session": (None, '{"instructions": 3}')})
            return no_key, wrong, garbage, prose, no_ice, no_opus, text, bad_session
        finally:
            await call.hang_up()

    no_key, wrong, garbage, prose, no_ice, no_opus, text, bad_session = run(scenario())
    assert no_key.status_code == wrong.status_code == 401
    assert no_key.json()["error"]["code"] == "invalid_api_key"
    for answer, code, words in [(garbage, "invalid_offer", "cannot be parsed"), (no_opus, "invalid_offer", "Opus"),
                                (prose, "invalid_offer", "Opus"), (no_ice, "invalid_offer", "ICE username"),
                                (text, "invalid_request", "application/sdp"), (bad_session, "invalid_value", "")]:
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == code and words in error["message"] and "\n" not in error["message"], error
    server.wait_idle()  # none of them took the model


@inside
def test_a_call_over_the_limit_is_refused_and_a_call_that_ended_frees_its_slot(server):
    async def scenario():
        first = Call()
        assert (await first.start(server.base_url, KEY, session=SESSION)).status_code == 201
        try:
            events = await first.receive("session.updated")  # the form's session is the first session.update
            assert events[0]["type"] == "session.created"
            second = Call()
            busy = await second.start(server.base_url, KEY)
            await second.hang_up()
        finally:
            await first.hang_up()
        await asyncio.to_thread(server.wait_idle)
        third = Call()
        admitted = await third.start(server.base_url, KEY)
        try:
            assert (await third.receive("session.created"))[-1]["type"] == "session.created"
        finally:
            await third.hang_up()
        return busy, admitted

    busy, admitted = run(scenario())
    assert busy.status_code == 503
    error = busy.json()["error"]
    assert error["code"] == "server_busy" and error["message"] == ("1 conversation is running on this model, its "
                                                                   "maximum; try again later")
    assert admitted.status_code == 201
    server.wait_idle()


DOCS = (Path(__file__).parent.parent / "docs" / "realtime.md").read_text()
SNIPPET = next(block for block in re.findall(r"```python\n(.*?)```", DOCS, re.S) if "/v1/realtime/calls" in block)


@inside
def test_docs_aiortc_snippet_runs_as_written(turn_server, tmp_path):
    """docs/realtime.md's Python client, as a reader copies it: the events arrive and the answer is saved."""
    import shutil
    import subprocess
    import sys

    import soundfile as sf

    shutil.copy(RECORDING, tmp_path / "question.wav")
    script = tmp_path / "call.py"
    script.write_text(SNIPPET.replace("127.0.0.1:8000", turn_server.split("/")[2]))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    printed = p.stdout.splitlines()
    assert printed[:2] == ["event: session.created", "event: session.updated"] and "event: response.done" in printed
    answer, rate = sf.read(str(tmp_path / "answer.wav"), dtype="int16")
    assert len(answer) > rate and np.abs(answer.astype(np.int32)).max() > 1000  # seconds of it, the model's voice


@inside
def test_an_answered_call_that_never_connects_frees_its_slot(server):
    """A client that posts its offer and goes away: the call ends once its channel has not opened in time."""
    from voicechat.realtime.webrtc import CONNECT_SECONDS

    async def scenario():
        call = Call()
        sdp = await call.offer()
        await call.hang_up()  # before it ever takes the answer
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            return await http.post(f"{server.base_url}/realtime/calls", content=sdp,
                                   headers={"Content-Type": "application/sdp", "Authorization": f"Bearer {KEY}"})

    mark = server.mark()
    assert run(scenario()).status_code == 201
    server.wait_for_log(r"call rtc_\w+ from [\d.]+: closed", since=mark, timeout=CONNECT_SECONDS + TIMEOUT)
    server.wait_idle()
