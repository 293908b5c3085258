"""Talk to ``python -m voicechat serve`` with OpenAI's own SDK: stream a recording as a microphone would, save the
spoken answer and the texts.

    pip install "openai[realtime]" soundfile soxr
    python -m voicechat serve --demo                       # in another terminal (or --model ...)
    python docs/examples/realtime_wav.py question.wav --out answer.wav --texts answer.json

The recording goes out as GA ``input_audio_buffer.append`` events (PCM16, 24 kHz) in 100 ms pieces at real-time pace,
then silence, so that the model has time to answer. The script stops when the model has finished a spoken answer (its
``response.done``) or after ``--tail`` seconds of silence.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from openai import AsyncOpenAI

RATE = 24000  # the GA Realtime format: PCM16 mono at 24 kHz
PIECE = RATE // 10  # 100 ms


def pcm16(path: Path) -> np.ndarray:
    """Any audio file -> mono PCM16 at 24 kHz."""
    x, rate = sf.read(str(path), dtype="float32", always_2d=True)
    x = soxr.resample(x.mean(axis=1), rate, RATE)
    return np.round(np.clip(x, -1, 1) * 32767).astype("<i2")


async def talk(args) -> dict:
    client = AsyncOpenAI(base_url=args.url, api_key=args.api_key)
    audio = np.concatenate([pcm16(args.wav), np.zeros(int(args.tail * RATE), "<i2")])
    answer, user, said, responses = [], [], [], []
    # the model talks all the time: let the client buffer what it does not read yet (websockets' default stops
    # reading at 16 unread messages, and then the closing handshake waits for its 10 s timeout)
    async with client.realtime.connect(model="voicechat", websocket_connection_options={"max_queue": None}) as conn:
        await conn.session.update(session={"type": "realtime", "instructions": args.instructions})

        async def speak():  # a microphone: 100 ms at a time, in real time
            for i in range(0, len(audio), PIECE):
                await conn.input_audio_buffer.append(audio=base64.b64encode(audio[i:i + PIECE].tobytes()).decode())
                await asyncio.sleep(PIECE / RATE)

        speaker = asyncio.create_task(speak())
        try:
            while not speaker.done():
                try:
                    event = await asyncio.wait_for(conn.recv(), timeout=0.5)
                except asyncio.TimeoutError:
                    continue
                if event.type == "error":
                    print(f"server error: {event.error.code}: {event.error.message}")
                elif event.type == "response.output_audio.delta":
                    answer.append(np.frombuffer(base64.b64decode(event.delta), "<i2"))
                elif event.type == "response.output_audio_transcript.delta":
                    said.append(event.delta)
                elif event.type == "conversation.item.input_audio_transcription.delta":
                    user.append(event.delta or "")
                elif event.type == "response.done":
                    responses.append({"id": event.response.id, "status": event.response.status})
                    if event.response.status == "completed" and said:
                        break  # the model has finished its answer
        finally:
            speaker.cancel()
    wave = np.concatenate(answer) if answer else np.zeros(0, "<i2")
    sf.write(str(args.out), wave, RATE, subtype="PCM_16")
    return {"user_transcript": "".join(user), "assistant": "".join(said), "responses": responses,
            "answer_seconds": round(len(wave) / RATE, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("wav", type=Path, help="the recording to send (any rate and channels)")
    p.add_argument("--url", default="http://127.0.0.1:8000/v1", help="the server's base URL (default: %(default)s)")
    p.add_argument("--api-key", default="none", help="the server's --api-key, if it has one")
    p.add_argument("--instructions", default="You are a helpful assistant.", help="the system prompt")
    p.add_argument("--tail", type=float, default=8.0, help="seconds of silence after the recording (default 8)")
    p.add_argument("--out", type=Path, default=Path("answer.wav"), help="the spoken answer (24 kHz WAV)")
    p.add_argument("--texts", type=Path, help="also write the texts here (JSON)")
    args = p.parse_args()
    texts = asyncio.run(talk(args))
    print(f"you said:  {texts['user_transcript']}\nassistant: {texts['assistant']}\n"
          f"wrote {args.out} ({texts['answer_seconds']} s)")
    if args.texts:
        args.texts.write_text(json.dumps(texts, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
