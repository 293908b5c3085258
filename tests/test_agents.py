"""Voice-agent frameworks against the Realtime server, each with its real package (tests/requirements.txt): LiveKit
Agents' OpenAI realtime model, Pipecat's OpenAI Realtime LLM service, and OpenAI's Agents SDK (docs/realtime.md
"Clients").

The server runs the demo model with its channels scripted (``Scripted`` of test_realtime.py): turns on the text
channel (BOS, words, EOS), a tool call on the function channel, and a last turn that goes on until the audio ends,
so that each framework meets several turns, a tool round trip and an interruption at known places. What is asserted
is protocol behaviour: the framework's own events, chat context and tool calls, and the server's record of them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_realtime import (CALL, PROMPT, Scripted, Server, serve_here,  # noqa: F401 (tiny_model: a fixture)
                           tiny_model)

BOS, EOS, PAD = 1, 2, 12
TURN_EVERY = 80  # positions between the starts of the scripted turns (6.4 s)
TURNS = 3  # the last one never ends: it is open when the audio runs out (the interruption's target)
CALL_AT = 14  # the tool call starts here, after the first turn (positions after the prompt)
WORDS = " Hello there"
RESULT = {"high": "6am"}
AUDIO_SECONDS = 16.0  # past the last turn's start, the tool exchange's positions included
TIMEOUT = 60.0
DOCS = (Path(__file__).parent.parent / "docs" / "realtime.md").read_text()
DOCS_SERVER = "127.0.0.1:8000"  # the snippets' server: the test's takes its place
SNIPPETS = {name: block for block in re.findall(r"```python\n(.*?)```", DOCS, re.S) if DOCS_SERVER in block
            for name in ("livekit", "pipecat", "agents") if f"from {name}" in block}


def turns(words: list[int]):
    """The text script: a turn of ``words`` every TURN_EVERY positions from position 4; the last one repeats its
    words without an EOS."""
    def text(offset: int) -> int:
        turn, at = divmod(offset - 4, TURN_EVERY)
        if offset < 4 or turn >= TURNS:
            return PAD
        spoken = [BOS, *words, EOS] if turn < TURNS - 1 else [BOS] + words * 200
        return spoken[at] if at < len(spoken) else PAD
    return text


@pytest.fixture(scope="module")
def agent_model(tiny_model):
    return Scripted(tiny_model, calls=[CALL], text=turns(tiny_model.tokenizer.encode(WORDS)), call_at=CALL_AT)


@pytest.fixture(scope="module")
def agent_server(agent_model):
    yield from serve_here(agent_model)


def noise(seconds: float, rate: int = 24000) -> np.ndarray:
    return np.round(np.random.default_rng(0).standard_normal(round(seconds * rate)) * 3000).astype(np.int16)


def injected(model: Scripted, output: str) -> bool:
    """The tool's output went into the model's function channel: the last session's function ids hold its tokens
    (docs/live.md §2.4)."""
    tokens = model.model.tokenizer.encode(f"<TOOL_RESPONSE>[{output}]</TOOL_RESPONSE>")
    func = list(model.made[-1].func)
    return any(func[i:i + len(tokens)] == tokens for i in range(len(func)))


async def eventually(check, what: str, timeout: float = TIMEOUT) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


# ---------------------------------------------------------------------------------------------------------------
# LiveKit Agents
# ---------------------------------------------------------------------------------------------------------------
def test_livekit_realtime_session_turns_tool_and_interruption(agent_server, agent_model):
    """LiveKit's RealtimeSession (the part of an AgentSession that speaks the protocol; no LiveKit room here): audio
    both ways, each turn's user and assistant transcripts in its chat context in order, a ``@function_tool`` called
    and its result back in the model's function channel, and ``interrupt()`` plus ``truncate()`` on the turn still
    speaking, all without an error."""
    from livekit import rtc
    from livekit.agents import llm
    from livekit.plugins import openai as lk_openai

    asked = []

    @llm.function_tool
    async def lookup(q: str) -> str:
        """Looks something up."""
        asked.append(q)
        return json.dumps(RESULT)

    async def scenario():
        model = lk_openai.realtime.RealtimeModel(base_url=agent_server, api_key="x", model="voicechat")
        session = model.session()
        raw, errors, generations, audio = [], [], [], []
        session.on("openai_server_event_received", raw.append)
        session.on("error", errors.append)

        async def follow(generation):
            async def message(m):
                async for frame in m.audio_stream:
                    audio.append(frame)
                async for _ in m.text_stream:
                    pass

            async def calls(stream):
                async for call in stream:
                    done = await llm.execute_function_call(
                        llm.FunctionToolCall(name=call.name, arguments=call.arguments, call_id=call.call_id),
                        session.tools)
                    context = session.chat_ctx.copy()
                    context.items.append(done.fnc_call_out)
                    await session.update_chat_ctx(context)  # conversation.item.create function_call_output

            tasks = [asyncio.create_task(calls(generation.function_stream))]
            async for m in generation.message_stream:
                tasks.append(asyncio.create_task(message(m)))
            await asyncio.gather(*tasks)

        followers = []
        session.on("generation_created", lambda g: (generations.append(g),
                                                    followers.append(asyncio.create_task(follow(g)))))
        try:
            await session.update_instructions(PROMPT)
            await session.update_tools([lookup])
            samples = noise(AUDIO_SECONDS)
            for i in range(0, len(samples), 480):  # 20 ms frames, as a room's track delivers them
                chunk = samples[i:i + 480]
                session.push_audio(rtc.AudioFrame(chunk.tobytes(), 24000, 1, len(chunk)))
            await eventually(lambda: len(generations) >= TURNS + 1 and any(
                e["type"] == "response.output_audio.delta" and e["response_id"] == generations[-1].response_id
                for e in raw), "the last turn")
            last = generations[-1].response_id
            message_id = next(e["item"]["id"] for e in raw if e["type"] == "response.output_item.added"
                              and e["response_id"] == last)
            session.interrupt()  # response.cancel
            session.truncate(message_id=message_id, modalities=["audio"], audio_end_ms=40)
            await eventually(lambda: any(e["type"] == "conversation.item.truncated" for e in raw), "the truncation")
            await asyncio.wait_for(asyncio.gather(*followers), TIMEOUT)
            return raw, errors, generations, audio, session.chat_ctx.copy(), message_id
        finally:
            await session.aclose()
            await model.aclose()

    raw, errors, generations, audio, context, interrupted = asyncio.run(scenario())
    assert errors == [] and [e for e in raw if e["type"] == "error"] == []
    assert not [e for e in raw if e["type"].startswith("voicechat.")]  # none unless asked for
    # audio both ways: the model heard the pushed audio and every response's audio reached LiveKit at 24 kHz
    assert audio and {(f.sample_rate, f.num_channels) for f in audio} == {(24000, 1)}
    assert sum(f.samples_per_channel for f in audio) == sum(
        len(base64.b64decode(e["delta"])) // 2 for e in raw if e["type"] == "response.output_audio.delta")
    # turns: the user's words, then the assistant's, turn by turn; the tool exchange inside the second
    kinds = [(i.type, getattr(i, "role", None)) for i in context.items]
    user, assistant = ("message", "user"), ("message", "assistant")
    assert kinds[:10] == [user, assistant, user, assistant, ("function_call", None), ("function_call_output", None),
                          user, assistant, user, assistant], kinds
    assert kinds[10:] in ([], [user])  # the user's words while the last turn is spoken, if any came before the close
    heard = [e["transcript"] for e in raw if e["type"] == "conversation.item.input_audio_transcription.completed"]
    users = [i for i in context.items if getattr(i, "role", None) == "user"]
    # each user item completes when the assistant takes the turn, its transcript appended to the item's content
    assert [u.content[-1] for u in users[:TURNS + 1]] == heard and all(heard) and len(heard) == TURNS + 1
    assert all("".join(u.content) == "" for u in users[TURNS + 1:])  # still open
    assistants = [i for i in context.items if getattr(i, "role", None) == "assistant"]
    said = [e["transcript"] for e in raw if e["type"] == "response.output_audio_transcript.done"]
    assert [a.content[-1] for a in assistants] == said == [WORDS, "", WORDS, said[-1]]
    assert WORDS.startswith(said[-1]) and assistants[-1].id == interrupted
    # the tool: LiveKit ran the function tool, and its output went into the model's function channel
    call = next(i for i in context.items if i.type == "function_call")
    assert (call.name, json.loads(call.arguments), asked) == ("lookup", {"q": "tides"}, ["tides"])
    output = next(i for i in context.items if i.type == "function_call_output")
    assert output.call_id == call.call_id and json.loads(output.output) == RESULT
    assert injected(agent_model, output.output)
    # the interruption: the last response cancelled, its message truncated where LiveKit stopped playing it
    done = [e["response"] for e in raw if e["type"] == "response.done"]
    assert [d["status"] for d in done] == ["completed"] * TURNS + ["cancelled"]
    truncated = next(e for e in raw if e["type"] == "conversation.item.truncated")
    assert (truncated["item_id"], truncated["audio_end_ms"]) == (interrupted, 40)


# ---------------------------------------------------------------------------------------------------------------
# Pipecat
# ---------------------------------------------------------------------------------------------------------------
def test_pipecat_realtime_service_turns_tool_and_interruption(agent_server, agent_model):
    """Pipecat's OpenAIRealtimeLLMService in a pipeline with its context aggregators, between pipecat's own test
    processors: user audio in as InputAudioRawFrames, the answer out as TTSAudioRawFrames, each turn's user and
    assistant messages in the LLMContext, a registered function called and its result back in the model's function
    channel, and an InterruptionFrame (with local turns: response.cancel, conversation.item.truncate), without an
    error (pipecat stops at any error event)."""
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.frames.frames import ErrorFrame, InputAudioRawFrame, InterruptionFrame, LLMRunFrame, TTSAudioRawFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.processors.frame_processor import FrameDirection
    from pipecat.services.openai.realtime import events
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
    from pipecat.tests.utils import QueuedFrameProcessor
    from pipecat.workers.runner import WorkerRunner

    asked = []

    async def lookup(params):
        asked.append(params.arguments["q"])
        await params.result_callback(RESULT)

    async def scenario():
        # the tools and instructions go in the service's settings: the model reads them before the first audio
        # (docs/realtime.md "Clients")
        tools = ToolsSchema([FunctionSchema("lookup", "Looks something up.", {"q": {"type": "string"}}, ["q"])])
        llm = OpenAIRealtimeLLMService(
            api_key="x", base_url=agent_server.replace("http", "ws") + "/realtime",
            settings=OpenAIRealtimeLLMService.Settings(
                model="voicechat", system_instruction=PROMPT,
                session_properties=events.SessionProperties(
                    tools=tools, audio=events.AudioConfiguration(input=events.AudioInput(turn_detection=False)))))
        llm.register_function("lookup", lookup)
        created, done = {}, {}  # the server's items as pipecat heard of them (conversation.item.added / .done)
        llm.add_event_handler("on_conversation_item_created", lambda _, item_id, item: created.update({item_id: item}))
        llm.add_event_handler("on_conversation_item_updated", lambda _, item_id, item: done.update({item_id: item}))
        context = LLMContext()
        pair = LLMContextAggregatorPair(context)
        down, up = asyncio.Queue(), asyncio.Queue()
        pipeline = Pipeline([QueuedFrameProcessor(queue=up, queue_direction=FrameDirection.UPSTREAM), pair.user(),
                             llm, QueuedFrameProcessor(queue=down, queue_direction=FrameDirection.DOWNSTREAM),
                             pair.assistant()])
        worker = PipelineWorker(pipeline, cancel_on_idle_timeout=False, params=PipelineParams(
            audio_in_sample_rate=24000, audio_out_sample_rate=24000))
        frames = []

        def seen() -> bool:
            while not (down.empty() and up.empty()):
                frames.append(down.get_nowait() if not down.empty() else up.get_nowait())
            errors = [f for f in frames if isinstance(f, ErrorFrame)]
            assert not errors, errors
            return len(answers(created)) == TURNS + 1 and any(isinstance(f, TTSAudioRawFrame) for f in frames)

        async def drive():
            try:
                await worker.queue_frame(LLMRunFrame())
                samples = noise(AUDIO_SECONDS)
                for i in range(0, len(samples), 480):
                    await worker.queue_frame(InputAudioRawFrame(samples[i:i + 480].tobytes(), 24000, 1))
                await eventually(seen, "the last turn")
                last = answers(created)[-1]
                await worker.queue_frame(InterruptionFrame())
                await eventually(lambda: seen() and last in done, "the cancelled response")
                return await llm.retrieve_conversation_item(last)  # the server's record, truncated
            finally:
                await worker.cancel()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        _, interrupted = await asyncio.gather(runner.run(), drive())
        seen()
        return frames, context.get_messages(), created, done, interrupted

    def answers(items):
        return [k for k, i in items.items() if i.role == "assistant"]

    def roles_of(messages):
        return [m["role"] for m in messages]

    frames, messages, created, done, interrupted = asyncio.run(scenario())
    # audio both ways: the model heard the frames, pipecat got the answer as 24 kHz TTS audio
    spoken = [f for f in frames if isinstance(f, TTSAudioRawFrame)]
    assert spoken and {(f.sample_rate, f.num_channels) for f in spoken} == {(24000, 1)}
    # turns: the context aggregators wrote the user's words and the assistant's turns, each side in order (pipecat
    # may write a user turn after the answer that began meanwhile, its transcript coming upstream and the answer
    # downstream, and then joins it with the next one)
    users = " ".join(m["content"] for m in messages if m["role"] == "user").split()
    heard = " ".join(i.content[0].transcript for i in done.values() if i.role == "user").split()
    assert users and users == heard[:len(users)]
    assert roles_of(messages).index("assistant") > roles_of(messages).index("user")
    answered = [m for m in messages if m["role"] == "assistant"]
    assert answered[0]["content"] == answered[2]["content"] == WORDS.strip()
    # the tool: pipecat ran the registered function, its result went into the model's function channel
    call = answered[1]["tool_calls"][0]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"]), asked) == \
        ("lookup", {"q": "tides"}, ["tides"])
    result = next(m for m in messages if m["role"] == "tool")
    assert messages.index(result) > messages.index(answered[1])
    assert result["tool_call_id"] == call["id"] and json.loads(result["content"]) == RESULT
    assert injected(agent_model, result["content"])
    # the interruption: the last response cancelled, its message truncated to what pipecat had played of it
    last = answers(created)[-1]
    assert done[last].status == interrupted.status == "incomplete" and interrupted.id == last
    assert done[last].content[0].transcript.startswith(interrupted.content[0].transcript)
    assert (WORDS * 200).startswith(done[last].content[0].transcript)


# ---------------------------------------------------------------------------------------------------------------
# OpenAI Agents SDK
# ---------------------------------------------------------------------------------------------------------------
def test_openai_agents_realtime_runner_turns_tool_and_interruption(agent_server, agent_model):
    """A RealtimeAgent with a function tool through the Agents SDK's RealtimeRunner: its history fills turn by turn,
    the SDK runs the tool and sends the result into the model's function channel, ``interrupt()`` cancels the turn
    still speaking, and no ``error`` event comes (the SDK checks every server event against OpenAI's own types: the
    server's voicechat.* events are off unless asked for)."""
    from agents import function_tool
    from agents.realtime import RealtimeAgent, RealtimeRunner

    asked = []

    @function_tool
    def lookup(q: str) -> str:
        """Looks something up."""
        asked.append(q)
        return json.dumps(RESULT)

    async def scenario():
        agent = RealtimeAgent(name="voicechat", instructions=PROMPT, tools=[lookup])
        url = agent_server.replace("http", "ws") + "/realtime?model=voicechat"
        session = await RealtimeRunner(agent).run(model_config={"url": url, "api_key": "x"})
        events, raw = [], []
        async with session:
            samples = noise(AUDIO_SECONDS)
            for i in range(0, len(samples), 2400):
                await session.send_audio(samples[i:i + 2400].tobytes())

            async def until(check, what):
                async def read():
                    async for event in session:
                        events.append(event)
                        if event.type == "raw_model_event" and event.data.type == "raw_server_event":
                            raw.append(event.data.data)
                        if check():
                            return
                await asyncio.wait_for(read(), TIMEOUT)

            created = lambda: [e for e in raw if e["type"] == "response.created"]  # noqa: E731
            await until(lambda: len(created()) == TURNS + 1 and any(
                e["type"] == "response.output_audio.delta" and e["response_id"] == created()[-1]["response"]["id"]
                for e in raw), "the last turn")
            await session.interrupt()
            await until(lambda: any(e["type"] == "response.done" and e["response"]["status"] == "cancelled"
                                     for e in raw), "the cancel")
        return events, raw

    events, raw = asyncio.run(scenario())
    kinds = [e.type for e in events]
    assert "error" not in kinds, [e for e in events if e.type == "error"]
    assert not [e for e in raw if e["type"] == "error" or e["type"].startswith("voicechat.")]
    assert "audio" in kinds and "tool_start" in kinds and "tool_end" in kinds
    ended = next(e for e in events if e.type == "tool_end")
    assert (ended.tool.name, json.loads(ended.output), asked) == ("lookup", RESULT, ["tides"])
    assert injected(agent_model, ended.output)
    # turns: the SDK's history holds each user turn, then the assistant's, the tool call in between
    history = next(e for e in reversed(events) if e.type == "history_updated").history
    roles = [getattr(i, "role", None) or i.type for i in history]
    assert roles[:7] == ["user", "assistant", "user", "assistant", "function_call", "user", "assistant"], roles
    heard = [e["transcript"] for e in raw if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert [i.content[0].transcript for i in history if getattr(i, "role", None) == "user"][:len(heard)] == heard
    assert all(heard)
    said = [e["transcript"] for e in raw if e["type"] == "response.output_audio_transcript.done"]
    assert said[:3] == [WORDS, "", WORDS] and history[1].content[0].transcript == WORDS
    # the interruption: the turn still speaking was truncated where the SDK's playback stood, then cancelled
    done = [e["response"] for e in raw if e["type"] == "response.done"]
    assert [d["status"] for d in done] == ["completed"] * TURNS + ["cancelled"]
    truncated = next(e for e in raw if e["type"] == "conversation.item.truncated")
    assert truncated["item_id"] == done[-1]["output"][0]["id"]


# ---------------------------------------------------------------------------------------------------------------
# the snippets of docs/realtime.md "Clients"
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("serve"), "--max-sessions", "1") as s:
        yield s


@pytest.mark.parametrize("name", ["livekit", "pipecat", "agents"])
def test_docs_snippet_runs_as_written_against_serve(name, demo_server, tmp_path):
    """Each framework's snippet, as a reader copies it, talks with ``serve --demo`` until the model speaks."""
    demo_server.wait_idle()
    script = tmp_path / "client.py"
    script.write_text(SNIPPETS[name].replace(DOCS_SERVER, demo_server.ws_url.split("/")[2]))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": ""})
    assert p.returncode == 0 and "the model speaks:" in p.stdout, f"{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    demo_server.wait_idle()  # the snippet's connection let go of the model
