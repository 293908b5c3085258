"""An OpenAI Realtime (GA) WebSocket server for the full-duplex model: ``GET /v1/realtime`` (and ``/realtime``).

The event names and fields are OpenAI's GA Realtime protocol (docs/live.md §3, OAI ``types/realtime``), so the
official clients work unchanged: the ``openai`` SDK (``client.realtime.connect`` with ``base_url``), LiveKit Agents,
Pipecat, OpenAI's Agents SDK (docs/realtime.md "Clients"). How VoiceChat maps onto it (README "Realtime API"):

- audio flows both ways all the time. ``input_audio_buffer.append`` carries base64 PCM16 mono at 24 kHz (the GA
  default, docs/live.md §3) or G.711 at 8 kHz (``audio/pcmu``, ``audio/pcma``: ``g711``); the session resamples it to
  the model's 16 kHz with soxr's stream resampler. Every 80 ms frame of the answer (1764 samples at 22.05 kHz) leaves
  resampled to the output format's rate with one stream resampler per session and format.
- the model decides when it speaks. A response opens at the assistant's BOS, or at its first text if no BOS came,
  and closes at its EOS; audio of frames outside a response goes only into the opt-in ``voicechat.frame`` event.
- the RNNT transcript of the user goes to a user message item, which closes when a response opens or on commit.
- ``conversation.item.truncate`` (a barge-in) cuts an assistant message's transcript to what was played; the model's
  timeline keeps what it heard. ``voicechat.*`` events go only to clients that ask (``?voicechat_events=1``).
- client-executed tools: ``session.update.tools`` declares them; when the model's call has been read a
  ``function_call`` item goes out and its response ends; ``conversation.item.create {type: function_call_output}``
  brings the result back into the model's function channel.
- ``session.audio.output.voice`` names a voice of the library (voicechat/voices.py, docs/voices.md), never a file;
  OpenAI's own voice names mean the checkpoint's voice. Extension events: ``voicechat.voice.list``, and
  ``voicechat.voice.add`` (base64 PCM16 at 24 kHz), off unless the server was started with ``--allow-voice-add``,
  which needs an API key.

Up to ``--max-sessions`` connections hold a conversation at once, stepped together on one model (docs/batching.md);
one more gets ``error`` code ``server_busy`` and close code 1013. ``GET /health`` says whether the model is ready and
how many conversations are open, for a load balancer.
All MLX work stays on the engine thread: these handlers pass numpy arrays to it and read ``Frame``\\ s back.
``RealtimeServer(engine).router()`` mounts the route in any FastAPI app (``serve`` here, app.py beside Gradio).

The parts: ``protocol`` (client events parsed and checked, the session's configuration), ``g711`` (the telephone
codecs), ``conversation`` (one conversation's items and responses), ``connection`` (one WebSocket, or a call's
events channel), ``webrtc`` (``POST /v1/realtime/calls``: a call's Opus tracks and its ``oai-events`` channel),
``server`` (the routes, the app, ``serve``), ``bounds`` (what a client may send, checked before it costs anything)
and ``sockets`` (``serve``'s request deadline and connection cap): docs/limits.md §2.
"""

from .connection import CLOSE_TRY_AGAIN_LATER, MAX_MESSAGE_BYTES
from .conversation import RealtimeConversation
from .protocol import (PCM, RATE, ClientEventError, SessionConfig, decode_audio, encode_audio, error_event, event_kind,
                       event_text, parse_client_event)
from .server import HEALTH_PATH, PATH, RealtimeServer, ServeError, create_app, loaded_engine, serve

__all__ = ["CLOSE_TRY_AGAIN_LATER", "MAX_MESSAGE_BYTES", "RealtimeConversation", "PCM", "RATE", "ClientEventError",
           "SessionConfig", "decode_audio", "encode_audio", "error_event", "event_kind", "event_text",
           "parse_client_event", "HEALTH_PATH", "PATH", "RealtimeServer", "ServeError", "create_app", "loaded_engine",
           "serve"]
