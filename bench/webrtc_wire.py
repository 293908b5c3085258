"""What a conversation puts on the wire over WebRTC against the WebSocket: ``python -m bench.webrtc_wire
[--seconds S]``.

Serves the demo model on 127.0.0.1 (the Realtime server of ``serve --demo``), calls it with aiortc playing the
harness question as the microphone for S seconds, and prints the bytes per second of the Opus tracks both ways
(RTP payload, from aiortc's statistics), of the ``oai-events`` channel and of all the call's UDP, beside what the
same audio costs as base64 PCM16 at 24 kHz in ``input_audio_buffer.append`` / ``response.output_audio.delta`` events
(docs/live.md §4).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time

import httpx
import uvicorn
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaPlayer

from voicechat import engine as eng
from voicechat import realtime
from voicechat.benchmarks.workload import QUESTION

PCM16_BASE64_PER_SECOND = realtime.RATE * 2 * 4 / 3  # what a second of 24 kHz PCM16 is in an event's base64


def serving():
    """The demo model's Realtime server on a free loopback port, on a thread: (its engine, the server, its thread,
    its base URL)."""
    engine = eng.Engine(eng.demo_model(), name="voicechat-demo").start()
    while engine.status().state != eng.READY:
        time.sleep(0.05)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    server = uvicorn.Server(uvicorn.Config(realtime.create_app(engine, model_name="voicechat-demo"),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    return engine, server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


async def call(base_url: str, seconds: float) -> dict:
    """One call of ``seconds``: aiortc's counters at its end, and the events channel's bytes."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    channel = pc.createDataChannel("oai-events")
    received = {"bytes": 0}
    channel.on("message", lambda message: received.__setitem__("bytes", received["bytes"] + len(message)))
    pc.addTrack(MediaPlayer(str(QUESTION), options={"stream_loop": "-1"}).audio)
    pc.on("track", lambda track: asyncio.ensure_future(drain(track)))
    await pc.setLocalDescription(await pc.createOffer())
    async with httpx.AsyncClient(timeout=60) as http:
        answer = await http.post(f"{base_url}/realtime/calls", files={
            "sdp": (None, pc.localDescription.sdp),
            "session": (None, json.dumps({"type": "realtime", "instructions": "Be brief."}))})
    answer.raise_for_status()
    await pc.setRemoteDescription(RTCSessionDescription(answer.text, "answer"))
    await asyncio.sleep(seconds)
    stats = {s.type: s for s in (await pc.getStats()).values()}
    await pc.close()
    # the answer's bytes are the server's own count, from its last RTCP sender report
    return {"sent": stats["outbound-rtp"].bytesSent, "received": stats["remote-outbound-rtp"].bytesSent,
            "wire in": stats["transport"].bytesReceived, "wire out": stats["transport"].bytesSent,
            "events": received["bytes"]}


async def drain(track) -> None:
    while True:
        try:
            await track.recv()
        except Exception:  # the track has ended with the call
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the call lasts")
    args = parser.parse_args()
    engine, server, thread, base_url = serving()
    try:
        counts = asyncio.run(call(base_url, args.seconds))
    finally:
        server.should_exit = True
        thread.join(30)
        engine.close()
    print(f"over {args.seconds:g} s of a call (bytes per second):")
    print(f"  microphone, Opus RTP payload:        {counts['sent'] / args.seconds:8.0f}")
    print(f"  answer, Opus RTP payload:            {counts['received'] / args.seconds:8.0f}")
    print(f"  oai-events channel, server to client: {counts['events'] / args.seconds:8.0f}")
    print(f"  all UDP (SRTP, SCTP, DTLS), in / out: {counts['wire in'] / args.seconds:8.0f} / "
          f"{counts['wire out'] / args.seconds:.0f}")
    print(f"  PCM16 24 kHz as base64, each way:     {PCM16_BASE64_PER_SECOND:8.0f}")


if __name__ == "__main__":
    main()
