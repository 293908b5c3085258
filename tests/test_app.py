"""The Gradio app: its formatting (timeline, envelopes, config), then the running app through gradio_client
(run an example, queue positions, cancel, bad files, served paths), and `python app.py --demo` end to end.

The in-process app runs on `ScriptedModel` (tests/test_engine.py), a stand-in that follows voicechat's model
contract; the --demo test runs the real engine on a tiny random-weight checkpoint.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import app  # noqa: E402
from gradio_client import Client, handle_file  # noqa: E402
from test_engine import ScriptedModel, loader_for  # noqa: E402
from voicechat import engine as eng  # noqa: E402
from voicechat.answer import Answer, Piece  # noqa: E402
from voicechat.config import GenerationConfig  # noqa: E402
from voicechat.result import CONVERSATION_FIELDS, Result  # noqa: E402
from voicechat.webui import record as record_tab  # noqa: E402

EXAMPLE = app.ASSETS / "capital_16k_mono.wav"
EXAMPLE_FRAMES = math.ceil(sf.info(str(EXAMPLE)).duration / 0.08)  # 80 ms frames of the recording (47)
STEREO_EXAMPLE = app.ASSETS / "tea_44k_stereo.wav"
ADVANCED_DEFAULTS = dict(extra_seconds=0, max_extra_seconds=10, temperature=0.0, top_p=1.0, repetition_penalty=1.0,
                         tts_override=False, tts_guidance=0.35, tts_top_p=0.9, tts_noise=0.004, turn_markers=False,
                         reference=False)
OUT = {name: i for i, name in enumerate(record_tab.RecordAndRun.OUTPUTS)}  # output name -> index in the handler's tuple


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def text_of(status_html: str) -> str:
    return re.sub(r"<[^>]+>", " ", status_html)


# ---------------------------------------------------------------------------------------------------------------
# formatting, without a server (the timeline: tests/test_timeline.py)
# ---------------------------------------------------------------------------------------------------------------
def scripted_answer(first_frame=5, prompt_frames=5, frames=30, wall_seconds=2.4) -> Answer:
    """A hand-made answer: two words at frames 20 and 23, a function token at 22, a turn from 19 to 25."""
    text = np.full(frames, 12)
    result = Result(text="Hi you", function_text="f", user_transcript="hello", audio=np.zeros(frames * 1764,
                    np.float32), sample_rate=22050, text_tokens=text, function_tokens=text, audio_codes=np.zeros(
                    (frames, 31)), first_frame=first_frame, prompt_frames=prompt_frames, input_frames=10,
                    frame_seconds=0.08, timings={"tts warm-up": 0.1, "prompt prefill": 0.3, "transcript": 0.2})
    return Answer(result, text_pieces=(Piece(20, 101, "Hi", "Hi"), Piece(23, 102, " you", "Ġyou")),
                      function_pieces=(Piece(22, 7, "", "<tool & call>"),), turn_starts=(19,), turn_ends=(25,),
                      wall_seconds=wall_seconds)


def test_timings_and_downloads(tmp_path):
    answer = scripted_answer(wall_seconds=2.8)  # 35 positions (5 of the prompt) = 2.8 s of timeline in 2.8 s
    table = record_tab.timings_markdown(answer, load_seconds=12.0)
    # shares of the whole run (2.8 s): the timed stages and the positions' loop, which is the rest of it
    assert "| prompt prefill | 0.30 | 11% |" in table and "| the 80 ms positions (all else) | 2.20 | 79% |" in table
    shared = [float(row.split("|")[2]) for row in table.splitlines() if row.endswith("% |")]
    assert len(shared) == 4 and sum(shared) == pytest.approx(2.8)
    assert "35 timeline frames of 80 ms (2.80 s, the system prompt's 5 included): RTF 1.00" in table
    ask = record_tab.Question(np.zeros(16000, np.float32), 16000, "Be brief.", 4, GenerationConfig(text_top_p=0.5),
                       "question.m4a")
    wav, js = record_tab.save_outputs(answer, tmp_path, ask, "org/model", demo_model=True)
    info = sf.info(str(wav))
    assert (info.samplerate, info.subtype, info.frames) == (22050, "PCM_16", 30 * 1764)
    record = json.loads(js.read_text(encoding="utf-8"))
    assert list(record) == list(CONVERSATION_FIELDS)  # the CLI's schema, field for field
    assert (record["schema"], record["source"], record["model"], record["demo_model"]) == (
        "voicechat.conversation/1", "app", "org/model", True)
    assert (record["input_file"], record["input_sample_rate"], record["input_seconds"]) == ("question.m4a", 16000, 1)
    assert record["seed"] == 4 and record["generation_config"]["text_top_p"] == 0.5
    assert record["text_pieces"] == [[20, 101, "Hi"], [23, 102, " you"]] and record["answer_file"] == "answer.wav"
    assert len(record["text_tokens"]) == 30 and record["user_transcript"] == "hello"
    assert "\\u" not in js.read_text(encoding="utf-8")  # written as UTF-8, not escaped


def test_progress_line_says_frames_speed_and_time_left():
    update = eng.FrameUpdate("frames", elapsed_s=7.9, frames_per_second=2.5, text="Hi", function_text="")
    event = eng.Event(eng.PROGRESS, done=20, total=170, seconds=8.0, update=update)
    line = text_of(record_tab.progress_status(event, prompt_frames=12, bounded=False, frame_seconds=0.08))
    assert "Listening and answering" in line and "frame 20 of 170" in line and "8.0 s" in line
    assert "RTF 5.00 (slower than real time)" in line  # 8 s for 20 frames of 80 ms (1.6 s of timeline)
    assert "about 1 min left" in line and "up to" not in line  # 150 frames at 0.4 s
    line = text_of(record_tab.progress_status(event, prompt_frames=12, bounded=True, frame_seconds=0.08))
    assert "frame 20 of up to 170" in line and "up to about 1 min left" in line  # automatic mode: a bound
    line = text_of(record_tab.progress_status(event, prompt_frames=25, bounded=True, frame_seconds=0.08))
    assert "Reading the system prompt" in line
    # after the run: the same definition of RTF (wall seconds per second of timeline, the prompt's included)
    done = text_of(record_tab.done_status(scripted_answer(wall_seconds=14.0)))
    assert "35 frames (2.8 s of timeline) in 14.0 s" in done and "RTF 5.00 (slower than real time)" in done


def test_generation_config_from_the_controls():
    cfg = record_tab.generation_config(0, 12, 0.3, 0.5, 1.1, False, 0.7, 0.9, 0.5, True, False)
    assert (cfg.extra_seconds, cfg.max_extra_seconds, cfg.text_temperature, cfg.text_top_p) == (None, 12.0, 0.3, 0.5)
    assert (cfg.text_repetition_penalty, cfg.turn_markers, cfg.reference) == (1.1, True, False)
    assert (cfg.tts_guidance_scale, cfg.tts_top_p, cfg.tts_noise_scale) == (None, None, None)  # the checkpoint's
    cfg = record_tab.generation_config(4.5, 10, 0, 1, 1, True, 0.7, 0.9, 0.5, False, True)
    assert (cfg.extra_seconds, cfg.reference) == (4.5, True)
    assert (cfg.tts_guidance_scale, cfg.tts_top_p, cfg.tts_noise_scale) == (0.7, 0.9, 0.5)


# ---------------------------------------------------------------------------------------------------------------
# the running app
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The app on a scripted model, launched locally; yields (url, model, outputs folder, engine)."""
    model = ScriptedModel(frame_delay=0.002)
    engine = eng.Engine(loader_for(model), name="scripted stand-in", max_waiting=app.MAX_WAITING).start()
    outputs = tmp_path_factory.mktemp("client")
    demo = app.build_app(engine, outputs=outputs)
    app.launch(demo, outputs, server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
               quiet=True)
    yield demo.local_url, model, outputs, engine
    demo.close()
    engine.close()


def call(client: Client, audio, prompt="Be brief.", seed=0, **advanced):
    return client.submit(handle_file(str(audio)) if audio else None, prompt, seed,
                         *{**ADVANCED_DEFAULTS, **advanced}.values(), api_name="/run")


def wait_for(predicate, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_run_an_example(served):
    url, model, outputs, _ = served
    model.gate = None
    out = call(Client(url, verbose=False), STEREO_EXAMPLE, seed=7).result(timeout=60)
    assert "Answer ready" in text_of(out[OUT["status"]])
    assert out[OUT["assistant"]] == model.answer and out[OUT["transcript"]] == model.transcript
    assert model.calls[-1]["seed"] == 7 and model.calls[-1]["system_prompt"] == "Be brief."
    assert model.calls[-1]["sample_rate"] == 44100  # the file's own rate; the engine resamples
    info = sf.info(out[OUT["answer_audio"]])
    assert (info.samplerate, info.subtype, info.channels) == (22050, "PCM_16", 1)
    wav, js = out[OUT["downloads"]]
    record = json.loads(Path(js).read_text())
    assert (record["schema"], record["source"], record["model"]) == ("voicechat.conversation/1", "app",
                                                                     "scripted stand-in")
    assert record["assistant_text"] == model.answer and record["seed"] == 7
    assert record["input_sample_rate"] == 44100 and record["generation_config"]["text_temperature"] == 0.0
    assert "<svg" in out[OUT["timeline"]] and "| frames |" in out[OUT["timings"]]
    saved = list((outputs / "runs").glob("*/conversation.json"))
    assert saved, "the downloads are kept in the outputs folder"


def test_progress_streams_partial_text(served):
    url, model, *_ = served
    gate = model.gate = threading.Semaphore(0)
    job = call(Client(url, verbose=False), EXAMPLE)
    words = model.tokenizer.encode(model.answer)
    half = words[: len(words) // 2]
    for _ in range(model.frames_to_say(EXAMPLE_FRAMES, len(half), "Be brief.")):
        gate.release()

    def texts() -> list[str]:
        return [o[OUT["assistant"]] for o in job.outputs() if isinstance(o[OUT["assistant"]], str)]

    wait_for(lambda: model.decoded(half) in texts(), "the partial text")  # shown while the model is held
    assert model.answer not in texts()
    statuses = [text_of(o[OUT["status"]]) for o in job.outputs() if isinstance(o[OUT["status"]], str)]
    assert any(re.search(r"frame \d+ of up to \d+", s) and "RTF" in s for s in statuses)
    model.gate = None
    for _ in range(1000):
        gate.release()
    assert "Answer ready" in text_of(job.result(timeout=60)[OUT["status"]])


def test_second_user_waits_with_a_visible_position(served):
    url, model, *_ = served
    gate = model.gate = threading.Semaphore(0)
    first = call(Client(url, verbose=False), EXAMPLE)
    wait_for(lambda: model.frames_started and any(
        "Starting" in text_of(o[OUT["status"]]) for o in first.outputs() if isinstance(o[OUT["status"]], str)),
        "the first job to start")
    second = call(Client(url, verbose=False), EXAMPLE)
    wait_for(lambda: any("1 request ahead of you" in text_of(o[OUT["status"]]) and "Expected wait: up to about"
                         in text_of(o[OUT["status"]]) for o in second.outputs() if isinstance(o[OUT["status"]], str)),
             "the queue position and the expected wait")
    model.gate = None
    for _ in range(1000):
        gate.release()
    assert "Answer ready" in text_of(first.result(timeout=60)[OUT["status"]])
    assert "Answer ready" in text_of(second.result(timeout=60)[OUT["status"]])


def test_one_frame_count_from_start_to_end(served):
    """The progress counts every position, the system prompt's included, and the finished answer says the same
    count (not the answer's positions alone)."""
    url, model, *_ = served
    gate = model.gate = threading.Semaphore(0)
    total = model.prompt_length("Be brief.") + len(model.script(EXAMPLE_FRAMES)[0])
    job = call(Client(url, verbose=False), EXAMPLE)
    for _ in range(total - 1):
        gate.release()

    def statuses() -> list[str]:
        return [text_of(o[OUT["status"]]) for o in job.outputs() if isinstance(o[OUT["status"]], str)]

    wait_for(lambda: any(f"frame {total - 1} of up to {total} " in s for s in statuses()), "the last but one frame")
    model.gate = None
    gate.release()
    done = text_of(job.result(timeout=60)[OUT["status"]])
    assert "Answer ready" in done and f" {total} frames ({total * 0.08:.1f} s of timeline)" in done


def test_every_run_reaches_the_engine_at_once(served):
    """One queue: Gradio holds no Run back (no concurrency limit on the handler), the engine's queue has every one
    of them with its position, and turns away those past its limit."""
    url, model, _, engine = served
    gate = model.gate = threading.Semaphore(0)
    jobs = [call(Client(url, verbose=False), EXAMPLE) for _ in range(app.MAX_WAITING + 2)]
    wait_for(lambda: engine.pending() == app.MAX_WAITING + 1, "every run to reach the engine")
    wait_for(lambda: any("The app is busy" in text_of(o[OUT["status"]]) for job in jobs for o in job.outputs()
                         if isinstance(o[OUT["status"]], str)), "the run past the limit to be turned away")
    wait_for(lambda: any(f"{app.MAX_WAITING} requests ahead of you" in text_of(o[OUT["status"]]) for job in jobs
                         for o in job.outputs() if isinstance(o[OUT["status"]], str)), "the last position")
    model.gate = None
    for _ in range(10000):
        gate.release()
    finished = [text_of(job.result(timeout=120)[OUT["status"]]) for job in jobs]
    assert sum("Answer ready" in s for s in finished) == app.MAX_WAITING + 1


def write_m4a(path: Path, samples: np.ndarray, rate: int) -> Path:
    """AAC in an MP4 container, as a Mac records it (PyAV's encoder)."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("aac", rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples[None, :].astype(np.float32), format="fltp", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return path


def check(client: Client, path: Path) -> tuple:
    """The upload check, as the page runs it when a recording arrives: (the input's new value, the status, the
    answer's outputs by name)."""
    value, status, *answer = client.predict(handle_file(str(path)), api_name="/check")
    return value, text_of(status), dict(zip(record_tab.RecordAndRun.OUTPUTS[1:], answer))


def test_recordings_are_checked_when_they_arrive(served, tmp_path):
    url, model, outputs, engine = served
    client = Client(url, verbose=False)
    bad = tmp_path / "holiday.wav"
    bad.write_text("not really a wav file")
    value, status, answer = check(client, bad)
    assert value is None  # refused: the input is cleared
    assert "This recording cannot be used" in status and "holiday.wav is not a readable audio file" in status
    assert str(outputs) not in status and "gradio" not in status  # the name only, no server folder
    empty = tmp_path / "memo.m4a"
    empty.write_bytes(b"")  # an upload that did not get through
    value, status, answer = check(client, empty)
    assert value is None and "memo.m4a is empty (0 bytes)" in status
    blip = tmp_path / "blip.wav"
    sf.write(str(blip), np.zeros(2400, np.float32), 48000)  # 50 ms
    value, status, answer = check(client, blip)
    assert value is None and "blip.wav is too short (50 ms" in status
    x, rate = sf.read(str(EXAMPLE), dtype="float32")
    value, status, answer = check(client, write_m4a(tmp_path / "question.m4a", x, rate))
    assert value is not None and "Recording ready" in status and "question.m4a: 3.8 s." in status
    long = tmp_path / "lecture.wav"
    sf.write(str(long), np.zeros(16000 * 75, np.float32), 16000)
    model.gate = None
    call(client, EXAMPLE).result(timeout=60)  # a run measures the speed
    rtf = engine.status().realtime_factor
    value, status, answer = check(client, long)
    assert value is not None and "A long recording" in status
    assert f"lecture.wav is 1 min 15 s long; recordings under 1 min work best. At the current speed (RTF {rtf:.3g}) " \
           f"the answer takes about" in status
    value, status, answer = check(client, bad)  # an answer was on the page: a refused recording clears it
    assert value is None and "This recording cannot be used" in status
    assert answer["answer_audio"] is None and answer["transcript"] == answer["assistant"] == ""
    assert answer["timings"] == "No timings yet." and answer["downloads"] is None


def test_an_m4a_recording_is_answered(served, tmp_path):
    url, model, *_ = served
    model.gate = None
    x, rate = sf.read(str(EXAMPLE), dtype="float32")
    out = call(Client(url, verbose=False), write_m4a(tmp_path / "question.m4a", x, rate)).result(timeout=60)
    assert "Answer ready" in text_of(out[OUT["status"]])
    assert model.calls[-1]["sample_rate"] == 16000  # decoded by PyAV
    record = json.loads(Path(out[OUT["downloads"]][1]).read_text())
    assert record["input_file"] == "question.m4a"


def test_cancel_button_stops_the_running_job(served):
    url, model, *_ = served
    gate = model.gate = threading.Semaphore(0)
    client = Client(url, verbose=False)
    before = model.frames_started
    job = call(client, EXAMPLE)
    gate.release()
    wait_for(lambda: model.frames_started == before + 2, "the job to run")  # frame 2 waits for the gate
    started = model.frames_started
    assert "Cancelling" in text_of(client.predict(api_name="/cancel"))  # same session as the job
    gate.release()  # finish the current frame; the job must stop there
    out = job.result(timeout=30)
    assert "Cancelled after" in text_of(out[OUT["status"]])
    time.sleep(0.2)
    assert model.frames_started == started
    model.gate = None


def test_closing_the_request_cancels_the_engine_job(served):
    url, model, _, engine = served
    gate = model.gate = threading.Semaphore(0)
    before = model.frames_started
    job = call(Client(url, verbose=False), EXAMPLE)
    gate.release()
    wait_for(lambda: model.frames_started == before + 2, "the job to run")
    job.cancel()  # gradio_client closes the stream: the handler's finally cancels the engine job

    def release_a_frame() -> bool:  # one frame per 50 ms: the whole conversation would take 3.5 s
        gate.release()
        time.sleep(0.05)
        return engine.pending() == 0

    wait_for(release_a_frame, "the engine to drop the job")
    frames = model.prompt_length("Be brief.") + len(model.script(EXAMPLE_FRAMES)[0])
    assert model.frames_started - before < frames  # stopped before the end of the conversation
    model.gate = None


def test_a_bad_file_is_a_readable_error_and_the_app_keeps_working(served, tmp_path):
    url, model, *_ = served
    model.gate = None
    client = Client(url, verbose=False)
    bad = tmp_path / "holiday.wav"
    bad.write_text("not really a wav file")
    out = call(client, bad).result(timeout=30)
    status = text_of(out[OUT["status"]])
    assert "This recording cannot be used" in status and "holiday.wav is not a readable audio file" in status
    short = tmp_path / "click.wav"
    sf.write(str(short), np.zeros(2400, np.float32), 48000)  # 50 ms: too short, said before it reaches the engine
    out = call(client, short).result(timeout=30)
    assert "This recording cannot be used" in text_of(out[OUT["status"]])
    assert "too short (50 ms, shorter than one 80 ms frame)" in text_of(out[OUT["status"]])
    out = call(client, None).result(timeout=30)
    assert "No recording yet" in text_of(out[OUT["status"]])
    assert "Answer ready" in text_of(call(client, EXAMPLE).result(timeout=60)[OUT["status"]])


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError:  # not listening (yet)
        return 0


def test_only_outputs_and_examples_are_served(served):
    url, _, outputs, _ = served
    served_file = f"{url}gradio_api/file="
    assert http_status(served_file + str(EXAMPLE)) == 200
    assert http_status(served_file + str(app.APP_DIR / "app.py")) == 403
    assert http_status(served_file + str(app.ASSETS / "make_examples.py")) == 403
    assert http_status(served_file + str(app.APP_DIR / "voicechat" / "engine" / "thread.py")) == 403
    assert http_status(served_file + "/etc/passwd") == 403
    (outputs / "runs").mkdir(parents=True, exist_ok=True)
    assert http_status(served_file + str(outputs / "runs")) == 403  # no directory listings


# ---------------------------------------------------------------------------------------------------------------
# hardening (issue 25, docs/limits.md): settings, files served, the uploads' cap, the API key
# ---------------------------------------------------------------------------------------------------------------
def upload(url: str, name: str, data: bytes, content_type: str, headers: dict = {}) -> str:  # noqa: B006
    """POST one file to Gradio's upload route as the page does; returns the path it is kept under."""
    boundary = secrets.token_hex(8)
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
            f"Content-Type: {content_type}\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(f"{url}gradio_api/upload", data=body,
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}", **headers})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())[0]


def served_headers(url: str, path: str) -> dict:
    with urllib.request.urlopen(f"{url}gradio_api/file={path}", timeout=30) as r:
        return {k.lower(): v for k, v in r.headers.items()}


def test_uploads_come_back_as_audio_or_as_downloads_never_as_pages(served):
    """An uploaded .html or .svg was served inline from the app's origin (a stored script under --share)."""
    url = served[0]
    script = b"<script>document.title = 'owned'</script>"
    for name, data, kind in [("page.html", script, "text/html"), ("note.txt", script, "text/plain"),
                             ("image.svg", b"<svg xmlns='http://www.w3.org/2000/svg'>" + script + b"</svg>",
                              "image/svg+xml")]:
        headers = served_headers(url, upload(url, name, data, kind))
        assert headers["content-disposition"] == f'attachment; filename="{name}"', headers
        assert headers["x-content-type-options"] == "nosniff" and headers["content-security-policy"] == "sandbox"
    headers = served_headers(url, upload(url, "question.wav", EXAMPLE.read_bytes(), "audio/wav"))
    assert headers["content-type"] == "audio/wav" and headers["content-disposition"].startswith("inline")


def test_bad_settings_are_one_line_before_the_engine_queues_anything(served):
    url, model, *_ = served
    model.gate = None
    client = Client(url, verbose=False)
    calls = len(model.calls)
    for prompt, seed, words in [("Be brief.", 2 ** 64, "the seed must be a whole number from 0 to 2^64 - 1"),
                                ("y" * 100_000, 0, "the system prompt has 100000 characters; the limit is 32768"),
                                (" ".join(f"w{i}" for i in range(4000)), 0,
                                 "timeline positions; the limit is 2048")]:
        status = text_of(call(client, EXAMPLE, prompt=prompt, seed=seed).result(timeout=30)[OUT["status"]])
        assert "A setting cannot be used" in status and words in status, status
    assert len(model.calls) == calls  # nothing reached the model
    assert "Answer ready" in text_of(call(client, EXAMPLE).result(timeout=60)[OUT["status"]])


KEY = {"Authorization": "Bearer sesame"}  # the guarded app's key


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """The app with --api-key and a small uploads cap (300 KiB); yields (url, outputs folder, the Blocks)."""
    engine = eng.Engine(loader_for(ScriptedModel(frame_delay=0.002)), name="scripted stand-in").start()
    outputs = tmp_path_factory.mktemp("guarded")
    demo = app.build_app(engine, outputs=outputs, api_key="sesame")
    app.launch(demo, outputs, uploads_cap_bytes=300 * 1024, server_name="127.0.0.1", server_port=free_port(),
               prevent_thread_lock=True, quiet=True)
    yield demo.local_url, outputs, demo
    demo.close()
    engine.close()


def test_the_uploads_keep_to_their_cap_and_the_oldest_go_first(guarded):
    url, outputs, _ = guarded
    kept = [upload(url, f"take{i}.wav", bytes([i]) * 100 * 1024, "audio/wav", KEY) for i in range(5)]
    on_disk = [p for p in app.uploads_folder(outputs).rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in on_disk) <= 300 * 1024
    assert [Path(p).exists() for p in kept] == [False, False, True, True, True]


def test_the_api_key_guards_the_apps_realtime_route_and_tools(guarded):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    url = guarded[0]
    ws = url.replace("http", "ws") + "v1/realtime"
    with pytest.raises(InvalidStatus) as refused:
        connect(ws, open_timeout=30)
    assert refused.value.response.status_code == 403
    with connect(ws, subprotocols=["realtime", "openai-insecure-api-key.sesame"], open_timeout=30) as socket_:
        assert json.loads(socket_.recv(timeout=30))["type"] == "session.created"

    def tool(headers: dict) -> int:
        request = urllib.request.Request(f"{url}live/tool", method="POST", headers={
            "Content-Type": "application/json", **headers},
            data=json.dumps({"name": "calculate", "arguments": '{"expression": "6*7"}'}).encode())
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                assert json.loads(json.loads(r.read())["output"])["result"] == 42
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert tool({}) == 401 and tool({"Authorization": "Bearer wrong"}) == 401
    assert tool(KEY) == 200


# issue 41 §5: without the key, nothing of the app changes or says anything
WRONG = [{}, {"Authorization": "Bearer wrong"}, {"Cookie": "voicechat-key=wrong"}]  # no key, a wrong one, a bad cookie
TRIES = {"add_voice": ["Evil", None], "rename_voice": ["Maya", "Evil"], "remove_voice": ["Maya"],
         "hear_voice": ["Maya"], "run": [None, "", 0]}  # what each Gradio endpoint would be asked (the rest: nothing)


def every_request(demo, voice_file: Path, api_names: list) -> list[tuple[str, str]]:
    """(method, path) of every route of the running app, as its FastAPI app lists them (a new route cannot be left
    out), path parameters filled in: each Gradio endpoint's name, a voice's prompt.wav for Gradio's file routes."""
    from fastapi.routing import iter_route_contexts
    from starlette.routing import Mount, WebSocketRoute

    values = {"path_or_url": str(voice_file), "path": str(voice_file), "name": "prompt.wav"}
    found = []
    for route in iter_route_contexts(demo.server_app.routes):
        kind = route.original_route
        methods = ["WS"] if isinstance(kind, WebSocketRoute) else sorted(route.methods or {"GET"})
        path = route.path + ("/live.js" if isinstance(kind, Mount) else "")
        names = api_names if "{api_name}" in path else [None]
        for name in names:
            filled = re.sub(r"{(\w+)(:path)?}", lambda m: values.get(m[1], name or "x"), path.replace("{api_name}",
                                                                                                    name or ""))
            found += [(method, filled) for method in methods]
    return found


def ask(http, url: str, method: str, path: str, headers: dict):
    """One request as a client would make it (a POST with each endpoint's arguments; ``http``: an httpx.Client)
    -> (status, body text)."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    if method == "WS":
        try:
            with connect(url.replace("http", "ws").rstrip("/") + path, additional_headers=headers, open_timeout=30):
                return 101, ""
        except InvalidStatus as e:
            return e.response.status_code, e.response.body.decode(errors="replace")
    name = path.rstrip("/").rsplit("/", 1)[-1]
    data = {"data": TRIES.get(name, []), "fn_index": 0, "session_hash": "walk", "name": "Maya", "key": "wrong"}
    r = http.request(method, url.rstrip("/") + path, headers=headers, timeout=30, follow_redirects=False,
                     **({"json": data} if method == "POST" else {}))
    return r.status_code, r.text


def app_state(outputs: Path, tab) -> tuple:
    """Every file under the outputs (voices, uploads, answers) with its size and time, and the speed check's state
    (a status request starts it)."""
    files = sorted((str(p.relative_to(outputs)), p.stat().st_size, p.stat().st_mtime_ns) for p in outputs.rglob("*"))
    return files, tab.speed.speed.state


def test_without_the_key_no_route_nor_endpoint_changes_or_reveals_anything(guarded):
    """Without a key, Gradio's /add_voice, /remove_voice, /rename_voice, /hear_voice and /run acted, /live/status
    listed the voices, /gradio_api/upload answered with the outputs folder's path, a voice's prompt.wav was served
    and /live/measure started a speed check."""
    import httpx
    from gradio_client import Client
    from voicechat.voices import LIBRARY_FOLDER, VoiceLibrary
    from voicechat.webui import access, talk
    from conftest import NEMO

    url, outputs, demo = guarded
    library = VoiceLibrary(outputs / LIBRARY_FOLDER)
    if "Maya" not in library.names():
        library.add("Maya", NEMO / "speaker_22k.wav", config=voicechat_config())
    info = httpx.get(f"{url}gradio_api/info", headers=KEY, timeout=30).json()
    api_names = [name.lstrip("/") for name in info["named_endpoints"]]
    assert {"add_voice", "remove_voice", "rename_voice", "hear_voice", "run"} <= set(api_names)
    before = app_state(outputs, talk.TABS[demo])
    requests = every_request(demo, outputs / LIBRARY_FOLDER / "Maya" / "prompt.wav", api_names)
    assert len(requests) > 90 and ("POST", "/gradio_api/upload") in requests and ("WS", "/v1/realtime") in requests
    with httpx.Client() as http:
        for (method, path), headers in itertools.product(requests, WRONG):
            status, body = ask(http, url, method, path, headers)
            if (method, path) == ("GET", "/gradio_api/startup-events"):  # Gradio's own call at launch: once
                assert (status, body) == (200, "false")
            else:
                assert status == (403 if method == "WS" else 401), (method, path, headers, status, body[:200])
            assert str(outputs) not in body and "Maya" not in body and "Traceback" not in body, (method, path)
    for headers in WRONG:  # Gradio's own client cannot even start
        with pytest.raises(Exception):
            Client(url, verbose=False, headers=headers)
    form = httpx.post(f"{url}{access.KEY_FORM_PATH.lstrip('/')}", data={"key": "wrong", "next": "/"}, timeout=30)
    assert form.status_code == 401 and "set-cookie" not in form.headers
    assert app_state(outputs, talk.TABS[demo]) == before  # nothing changed, no speed check started

    # with the key: a script's header, or the browser's cookie from the key form
    client = Client(url, verbose=False, headers=KEY)
    assert "Record the voice or drop a file first" in client.predict("Evil", None, api_name="/add_voice")[1]
    form = httpx.post(f"{url}{access.KEY_FORM_PATH.lstrip('/')}", data={"key": "sesame", "next": "/?view=api"},
                      timeout=30)
    assert form.status_code == 303 and form.headers["location"] == "/?view=api"
    cookie = {"Cookie": form.headers["set-cookie"].split(";")[0]}
    status = httpx.get(f"{url}live/status", headers=cookie, timeout=30).json()
    assert status["key_required"] is False and "Maya" in [v["name"] for v in status["voices"]]


def voicechat_config():
    """A checkpoint's config (the NeMo fixture's), for a voice made here."""
    import voicechat
    from conftest import NEMO

    return voicechat.load(NEMO / "tiny_model_aria").config


# ---------------------------------------------------------------------------------------------------------------
# python app.py --demo, end to end
# ---------------------------------------------------------------------------------------------------------------
def start_app(tmp_path: Path, *args: str, preexec_fn=None, **env: str) -> tuple[subprocess.Popen, str, Path]:
    """`python app.py ARGS` on a free port (``preexec_fn``: run in the child before it starts, as Popen's); returns
    (process, url, log file) once it serves pages."""
    port = free_port()
    log = tmp_path / "app.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(app.APP_DIR / "app.py"), *args, "--port", str(port),
                                 "--outputs", str(tmp_path / "outputs")], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", **env}, cwd=tmp_path,
                                preexec_fn=preexec_fn)
    url = f"http://127.0.0.1:{port}/"
    wait_for(lambda: proc.poll() is not None or http_status(url) == 200, "the app to start", timeout=120)
    assert proc.poll() is None, log.read_text()
    return proc, url, log


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(20)


def test_offline_without_the_model_says_what_to_run(tmp_path):
    proc, url, log = start_app(tmp_path, "--model", "nobody/no-such-voicechat", HF_HUB_OFFLINE="1",
                               HF_HOME=str(tmp_path / "hf"))
    fix = ("`hf download nobody/no-such-voicechat --local-dir ~/models/no-such-voicechat`, then "
           "`python app.py --model ~/models/no-such-voicechat`")
    try:  # the terminal says what is wrong and the commands that fix it
        wait_for(lambda: "The model is not loaded" in log.read_text(), "the terminal message", timeout=60)
        printed = next(line for line in log.read_text().splitlines() if "The model is not loaded" in line)
        assert "nobody/no-such-voicechat is not in the local Hugging Face cache" in printed and fix in printed
        out = call(Client(url, verbose=False), EXAMPLE).result(timeout=60)  # through the API Run still tries
        status = text_of(out[OUT["status"]])
        assert "The model is not loaded" in status and fix in status
    finally:
        stop(proc)


def test_demo_mode_starts_offline_and_answers_an_example(tmp_path):
    proc, url, log = start_app(tmp_path, "--demo", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    try:
        assert "Its answers are noise" in urllib.request.urlopen(url + "config", timeout=10).read().decode()
        wait_for(lambda: "--share" in log.read_text(), "the start-up lines")
        assert f"Running on local URL:  {url}" in log.read_text() and "share=True" not in log.read_text()
        out = call(Client(url, verbose=False), EXAMPLE).result(timeout=600)
        assert "Answer ready" in text_of(out[OUT["status"]]), text_of(out[OUT["status"]]) + log.read_text()
        info = sf.info(out[OUT["answer_audio"]])
        assert (info.samplerate, info.subtype) == (22050, "PCM_16") and info.frames > 0
        record = json.loads(Path(out[OUT["downloads"]][1]).read_text())
        assert record["demo_model"] is True and len(record["text_tokens"]) > 0
        assert "<svg" in out[OUT["timeline"]]
    finally:
        stop(proc)
