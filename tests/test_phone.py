"""Phone audio: the G.711 codecs against FFmpeg's (through PyAV), a GA session in ``audio/pcmu`` / ``audio/pcma``
driven by the ``openai`` SDK against ``serve --demo``, and the Twilio Media Streams bridge of docs/examples driven by
a simulated Twilio (docs/realtime.md "Phone audio")."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import soxr

from test_realtime import (PROMPT, WAV, Server, answer_pieces, close, open_session,  # noqa: F401 (a fixture)
                           read_until_frame, receive_until, run, session_frames, tiny_model)
from voicechat.realtime.g711 import LAWS

CODECS = {"audio/pcmu": "pcm_mulaw", "audio/pcma": "pcm_alaw"}  # FFmpeg's G.711 codecs
EXAMPLE = Path(__file__).parent.parent / "docs" / "examples" / "twilio_bridge.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("serve"), "--max-sessions", "1") as s:
        yield s


def ffmpeg_decode(fmt: str, data: bytes) -> np.ndarray:
    codec = av.CodecContext.create(CODECS[fmt], "r")
    codec.sample_rate, codec.layout = 8000, "mono"
    return np.concatenate([f.to_ndarray().ravel() for f in codec.decode(av.Packet(data))])


def ffmpeg_encode(fmt: str, samples: np.ndarray) -> bytes:
    codec = av.CodecContext.create(CODECS[fmt], "w")
    codec.sample_rate, codec.format, codec.layout = 8000, "s16", "mono"
    frame = av.AudioFrame.from_ndarray(samples.astype(np.int16).reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = 8000
    return b"".join(bytes(p) for p in [*codec.encode(frame), *codec.encode(None)])


@pytest.mark.parametrize("fmt", sorted(CODECS))
def test_g711_decodes_as_ffmpeg_and_encodes_each_sample_to_its_nearest_level(fmt):
    """Every byte decodes to FFmpeg's level; every int16 sample encodes to a level at least as near as FFmpeg's
    (FFmpeg looks its table up by the sample's top 14 or 13 bits, so it picks the farther level now and then)."""
    law, codes = LAWS[fmt], bytes(range(256))
    assert np.array_equal(law.decode(codes), ffmpeg_decode(fmt, codes))
    samples = np.arange(-32768, 32768, dtype=np.int16)
    ours, theirs = law.encode(samples), ffmpeg_encode(fmt, samples)
    error = np.abs(law.decode(ours).astype(np.int32) - samples)
    assert np.all(error <= np.abs(ffmpeg_decode(fmt, theirs).astype(np.int32) - samples))
    same = np.frombuffer(ours, np.uint8) == np.frombuffer(theirs, np.uint8)
    assert same.mean() > 0.99, same.mean()
    assert law.encode(law.decode(codes)) == bytes(law.encode(law.decode(codes)))  # a level encodes to itself
    assert np.array_equal(law.decode(law.encode(law.decode(codes))), law.decode(codes))


@pytest.mark.parametrize("fmt", sorted(CODECS))
def test_sdk_session_in_g711_hears_and_speaks_8_khz(server, tiny_model, fmt):
    """A GA session with ``audio/pcmu`` (or ``pcma``) both ways: the client's G.711 bytes (FFmpeg's encoding of a
    recording) are what the model hears at 8 kHz, and the answer comes back as the same session's audio resampled
    to 8 kHz and G.711-encoded, frame by frame."""
    import soundfile as sf

    x, rate = sf.read(str(WAV), dtype="float32")
    pcm8k = np.round(np.clip(soxr.resample(x, rate, 8000), -1, 1) * 32767).astype(np.int16)
    sent = ffmpeg_encode(fmt, np.concatenate([pcm8k, np.zeros(4000, np.int16)]))  # then 0.5 s of silence
    chunks = [sent[i:i + 160] for i in range(0, len(sent), 160)]  # 20 ms, as phone bridges carry it
    expected, _ = session_frames(tiny_model, [ffmpeg_decode(fmt, c) for c in chunks], 8000)

    async def scenario():
        manager, conn, _ = await open_session(server, voicechat_frames="1")
        try:
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT, "audio": {
                "input": {"format": {"type": fmt}}, "output": {"format": {"type": fmt}}}})
            events = await receive_until(conn, "session.updated")
            assert events[-1]["session"]["audio"]["input"]["format"] == {"type": fmt}
            assert events[-1]["session"]["audio"]["output"]["format"] == {"type": fmt}
            for chunk in chunks:
                await conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
            return await read_until_frame(conn, events, expected[-1].position)
        finally:
            await close(conn)

    events = run(scenario())
    frames = [e for e in events if e["type"] == "voicechat.frame"]
    assert [f["text_id"] for f in frames] == [f.text_id for f in expected]
    assert all(f["codes"] == e.codes.tolist() for f, e in zip(frames, expected))
    created = [e["response"] for e in events if e["type"] == "response.created"]
    assert created and all(r["audio"]["output"]["format"] == {"type": fmt} for r in created)
    pieces = answer_pieces(events)
    assert len(pieces) == len(expected)
    got = b"".join(base64.b64decode(p) for p in pieces)  # one byte per sample
    whole = soxr.resample(np.concatenate([f.audio for f in expected]), 22050, 8000)
    assert got == LAWS[fmt].encode(np.round(np.clip(whole, -1, 1) * 32767)[:len(got)])
    assert 0 < len(whole) - len(got) < 640  # soxr's stream holds back under one frame
    assert np.abs(ffmpeg_decode(fmt, got)).max() > 0  # FFmpeg plays it


def test_g711_input_is_locked_once_audio_started_and_the_output_may_change(server):
    """The model's resampler takes the input's rate with the first audio; the output format may change any time."""
    def formats(input=None, output=None) -> dict:
        sides = {"input": input, "output": output}
        return {"type": "realtime", "audio": {k: {"format": {"type": v}} for k, v in sides.items() if v}}

    async def scenario():
        manager, conn, _ = await open_session(server)
        try:
            await conn.session.update(session=formats(input="audio/pcmu"))
            await receive_until(conn, "session.updated")
            await conn.input_audio_buffer.append(audio=base64.b64encode(b"\xff" * 800).decode())
            await conn.session.update(session=formats(input="audio/pcma"))
            error = (await receive_until(conn, "error"))[-1]["error"]
            assert (error["code"], error["param"]) == ("session_locked", "session.audio.input.format")
            await conn.session.update(session=formats(output="audio/pcma"))
            updated = (await receive_until(conn, "session.updated"))[-1]["session"]["audio"]
            assert (updated["input"]["format"]["type"], updated["output"]["format"]["type"]) == \
                ("audio/pcmu", "audio/pcma")
        finally:
            await close(conn)
    run(scenario())


# ---------------------------------------------------------------------------------------------------------------
# the Twilio Media Streams bridge (docs/examples/twilio_bridge.py)
# ---------------------------------------------------------------------------------------------------------------
def test_twilio_bridge_carries_a_call_both_ways(server, tmp_path):
    """A simulated Twilio call (``connected``, ``start``, 20 ms mu-law ``media``, ``mark``, ``stop``) through the
    example bridge: the model's answer comes back as ``media`` with the call's streamSid (mu-law that FFmpeg
    decodes), each followed by a ``mark``, and at ``stop`` the bridge lets go of the server's model."""
    from websockets.asyncio.client import connect

    server.wait_idle()
    bridge = subprocess.Popen([sys.executable, str(EXAMPLE), "--url", server.base_url, "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = bridge.stdout.readline()
        url = re.search(r"ws://\S+", line).group(0)
        audio = np.round(np.random.default_rng(0).standard_normal(8000 * 4) * 3000).astype(np.int16)
        payload = LAWS["audio/pcmu"].encode(audio)
        sid = "MZ" + "0" * 32

        async def call():
            async with connect(url) as twilio:
                await twilio.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
                await twilio.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": sid, "start": {
                    "streamSid": sid, "callSid": "CA" + "0" * 32, "tracks": ["inbound"],
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
                for n, i in enumerate(range(0, len(payload), 160)):
                    await twilio.send(json.dumps({"event": "media", "streamSid": sid, "sequenceNumber": str(n + 2),
                                                  "media": {"track": "inbound", "chunk": str(n + 1),
                                                            "payload": base64.b64encode(payload[i:i + 160]).decode()}}))
                back = []
                while sum(m["event"] == "mark" for m in back) < 5:
                    back.append(json.loads(await asyncio.wait_for(twilio.recv(), 60)))
                await twilio.send(json.dumps({"event": "mark", "streamSid": sid, "mark": back[-1]["mark"]}))
                await twilio.send(json.dumps({"event": "stop", "streamSid": sid, "stop": {"callSid": "CA"}}))
                return back

        back = asyncio.run(call())
    finally:
        bridge.terminate()
        bridge.wait(30)
    media = [m for m in back if m["event"] == "media"]
    assert media and {m["streamSid"] for m in back} == {sid}
    heard = ffmpeg_decode("audio/pcmu", b"".join(base64.b64decode(m["media"]["payload"]) for m in media))
    assert len(heard) >= 8000 * 0.08 and np.abs(heard).max() > 0
    assert [m["event"] for m in back] == ["media", "mark"] * len(media)
    server.wait_idle()  # the call's end closed the bridge's Realtime connection: the model is free
