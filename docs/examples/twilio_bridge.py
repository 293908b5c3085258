"""Put ``python -m voicechat serve`` on a phone line: a bridge between Twilio Media Streams and the Realtime API.

    pip install "openai[realtime]" websockets
    python -m voicechat serve --demo                        # in another terminal (or --model ...)
    python docs/examples/twilio_bridge.py --url http://127.0.0.1:8000/v1 --port 8080

Point a Twilio number's voice webhook at TwiML that streams the call both ways to this bridge (reachable from the
internet, e.g. behind a TLS proxy):

    <Response><Connect><Stream url="wss://YOUR-HOST/media-stream" /></Connect></Response>

Twilio sends the caller's voice as G.711 mu-law at 8 kHz in 20 ms ``media`` messages; the session asks the server for
``audio/pcmu`` both ways (docs/realtime.md "Phone audio"), so payloads pass through unchanged: ``media`` in becomes
``input_audio_buffer.append``, ``response.output_audio.delta`` becomes ``media`` out, with the call's ``streamSid``, and
a ``mark`` after it, which Twilio sends back once the caller has heard it. The model listens and speaks at once and
decides itself when to talk, so there is no turn detection to configure and nothing to interrupt: when the caller
talks over it, the model hears it and stops or goes on as it chooses.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import websockets
from openai import AsyncOpenAI

G711 = {"type": "audio/pcmu"}  # what Twilio carries: mu-law, 8 kHz, mono


async def bridge(twilio, args) -> None:
    """One phone call: Twilio's messages to the Realtime session and the session's answer back."""
    stream_sid = None
    async for message in twilio:  # "connected", then "start" with the call's streamSid
        event = json.loads(message)
        if event["event"] == "start":
            stream_sid = event["start"]["streamSid"]
            break
    if stream_sid is None:
        return
    client = AsyncOpenAI(base_url=args.url, api_key=args.api_key)
    async with client.realtime.connect(model="voicechat", websocket_connection_options={"max_queue": None}) as conn:
        await conn.session.update(session={"type": "realtime", "instructions": args.instructions,
                                           "audio": {"input": {"format": G711}, "output": {"format": G711}}})

        async def caller():  # Twilio -> the model, until the call ends
            async for message in twilio:
                event = json.loads(message)
                if event["event"] == "media":
                    await conn.input_audio_buffer.append(audio=event["media"]["payload"])
                elif event["event"] == "stop":
                    return

        async def answer():  # the model -> Twilio
            async for event in conn:
                if event.type == "response.output_audio.delta":
                    await twilio.send(json.dumps({"event": "media", "streamSid": stream_sid,
                                                  "media": {"payload": event.delta}}))
                    await twilio.send(json.dumps({"event": "mark", "streamSid": stream_sid,
                                                  "mark": {"name": event.item_id}}))
                elif event.type == "error":
                    print(f"server error: {event.error.code}: {event.error.message}", flush=True)

        listener = asyncio.create_task(answer())
        try:
            await caller()
        finally:
            listener.cancel()


async def main(args) -> None:
    async with websockets.serve(lambda ws: bridge(ws, args), args.host, args.port) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"Twilio Media Streams bridge on ws://{args.host}:{port}/media-stream -> {args.url}", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/v1", help="the voicechat server (its /v1 base URL)")
    parser.add_argument("--api-key", default="none", help="the server's --api-key, if it has one")
    parser.add_argument("--host", default="127.0.0.1", help="where Twilio's WebSocket connects")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--instructions", default="You are a helpful assistant on a phone call.")
    try:
        asyncio.run(main(parser.parse_args()))
    except KeyboardInterrupt:
        pass
