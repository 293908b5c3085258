"""Command line: ``voicechat generate | batch | download | bench | serve | live | voices`` (installed with the package;
the same as ``python -m voicechat ...``).

Exit codes: 0 ok, 2 bad usage or input (found before the model loads), 130 stopped by Ctrl+C, 1 any other failure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from .checkpoint import DEFAULT_MODEL, SUPPORTED_CHECKPOINTS
from .config import FRAME_SECONDS
from .errors import AudioInputError, ConfigError, OutputError, TestSetError, ToolError, VoiceChatError, command_name
from .files import OUTPUTS, checked_folder, checked_output, distinct_files, write_atomically
from .limits import (DEFAULT_AHEAD_SECONDS, DEFAULT_DRAIN_SECONDS, DEFAULT_IDLE_SECONDS, SettingError, check_range,
                     checked_prompt, checked_seed)
from .voices import VoiceError


SEED_HELP = "the random seed: the same input, settings and seed give the same answer (default 0)"


class UsageError(Exception):
    pass


class ProgressBar:
    """Frames done, frames per second and the real-time factor on stderr: on a terminal one line redrawn per frame;
    into a file or a pipe (a log) a line of its own at each tenth of the run."""

    def __init__(self, stream=None, width: int = 30):
        self.stream, self.width = stream or sys.stderr, width
        self.tty = self.stream.isatty()
        self.tenths = -1  # the last tenth written to a log

    def __call__(self, done: int, total: int, update) -> None:
        tenth = 10 * done // max(total, 1)
        if not self.tty and tenth == self.tenths:
            return
        self.tenths = tenth
        filled = self.width * done // max(total, 1)
        fps = update.frames_per_second
        rtf = 1 / (FRAME_SECONDS * fps) if fps else float("inf")  # wall seconds per second of timeline
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} frames  "
                f"{fps:.1f} frames/s  RTF {rtf:.2f}  ")
        self.stream.write(f"\r{line}" if self.tty else f"{line.rstrip()}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def generation_config(a: argparse.Namespace):
    from .config import NVIDIA_SAMPLING, GenerationConfig

    text = dict(NVIDIA_SAMPLING) if a.nvidia_sampling else {}
    for key in ("text_temperature", "text_top_p", "text_repetition_penalty"):
        if getattr(a, key) is not None:
            text[key] = getattr(a, key)
    return GenerationConfig(reference=a.reference, extra_seconds=a.extra_seconds, max_extra_seconds=a.max_extra_seconds,
                            tts_guidance_scale=a.tts_guidance, tts_top_p=a.tts_top_p, tts_top_k=a.tts_top_k,
                            tts_noise_scale=a.tts_noise, turn_markers=a.turn_markers, **text)


def input_file(path: str) -> Path:
    p = Path(path).expanduser()
    if p.is_dir():
        raise UsageError(f"--audio {path} is a folder; give one recording (a file)")
    if not p.is_file():
        raise UsageError(f"--audio {path}: no such file")
    return p


def default_answer_file(recording: Path) -> Path:
    """``outputs/<recording name>-answer.wav`` under the current folder (made if missing; git-ignored in a checkout),
    numbered so that no file is overwritten."""
    folder = Path.cwd() / OUTPUTS
    checked_folder(str(folder), "the default output folder").mkdir(exist_ok=True)
    names = (f"{recording.stem}-answer{'' if n == 1 else f'-{n}'}.wav" for n in itertools.count(1))
    return next(p for p in (folder / name for name in names) if not p.exists())


def chosen_tools(a: argparse.Namespace) -> tuple:
    """``--tools builtin`` and ``--tools-module path.py``, checked before the model loads (at most 5 in all)."""
    from .tools import BUILTIN_TOOLS, load_tools_module
    from .tools.declare import checked_tools

    tools = list(BUILTIN_TOOLS) if a.tools == "builtin" else []
    if a.tools_module:
        tools += load_tools_module(a.tools_module)
    return checked_tools(tools)


def print_tool_calls(result) -> None:
    from .terminal import terminal_text

    for call in result.tool_calls:
        outcome = f"error: {call.error}" if call.error else json.dumps(call.result, ensure_ascii=False)
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        print(terminal_text(f"[tool] {call.name or '?'}({arguments}) -> {outcome}"))


def load_model(a: argparse.Namespace):
    """The checkpoint ``--model`` names, or with ``--demo`` the app's tiny random-weight model."""
    from . import load
    from .engine import demo_model

    if a.demo:
        print("loading the demo model (random weights: its answers are noise) ...", file=sys.stderr)
        return demo_model()(None)
    print(f"loading {a.model} ...", file=sys.stderr)
    return load(a.model, tokenizer=a.tokenizer, offline=a.offline)


def cmd_generate(a: argparse.Namespace) -> int:
    from .answer import make_answer
    from .audio import read_recording, write_wav
    from .terminal import terminal_text
    from .result import conversation_json

    recording = input_file(a.audio)
    answer_file = checked_output(a.output_audio, "--output-audio", a.overwrite) or default_answer_file(recording)
    json_file = checked_output(a.json, "--json", a.overwrite)
    distinct_files({"--audio": recording, "--output-audio": answer_file, "--json": json_file})
    gen = generation_config(a)
    checked_seed(a.seed)
    checked_prompt(a.system_prompt)
    samples, rate = read_recording(recording, gen.max_input_seconds)  # refused before the model loads
    tools = chosen_tools(a)
    speaker = chosen_voice(a) if a.voice else a.speaker
    t0 = time.perf_counter()
    model = load_model(a)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    bar = ProgressBar()
    t0 = time.perf_counter()
    try:
        result = model.generate(samples, rate, system_prompt=a.system_prompt, seed=a.seed, speaker=speaker,
                                config=gen, progress=None if a.quiet else bar, tools=tools)
    finally:
        if not a.quiet:
            bar.close()
    wall = time.perf_counter() - t0
    if result.user_transcript:
        print(f"[user] {terminal_text(result.user_transcript)}")
    print(terminal_text(result.text.strip()))
    if result.function_text.strip():
        print(f"[function] {terminal_text(result.function_text.strip())}")
    print_tool_calls(result)
    write_wav(answer_file, result.audio, result.sample_rate)
    print(f"wrote {answer_file} ({result.seconds:.2f} s at {result.sample_rate} Hz)", file=sys.stderr)
    if json_file:
        record = conversation_json(make_answer(model, result, wall), source="cli", model=a.model, demo_model=a.demo,
                                   input_file=recording.name, input_sample_rate=rate, input_seconds=len(samples) / rate,
                                   system_prompt=a.system_prompt, seed=a.seed, generation_config=gen,
                                   answer_file=answer_file.name)
        write_atomically(json_file, (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
        print(f"wrote {json_file}", file=sys.stderr)
    return 0


def cmd_batch(a: argparse.Namespace) -> int:
    """``voicechat batch``: everything about the test set and the output folder is checked before the model loads."""
    from .batch import BatchProgress, RunSettings, find_items, prepare_output, run_batch, summary_text
    from .limits import checked_prompt, checked_seed

    if a.sessions < 1:
        raise UsageError(f"--sessions {a.sessions}: give 1 or more")
    source, out = Path(a.input).expanduser(), Path(a.out).expanduser()
    fmt, items = find_items(source, a.format)
    if fmt == "fdb" and (a.extra_seconds is not None or a.reference):
        raise UsageError("a Full-Duplex-Bench answer is the input's own timeline: --extra-seconds and --reference "
                         "do not apply")
    checked_seed(a.seed)
    checked_prompt(a.system_prompt)
    settings = RunSettings(model="voicechat-demo" if a.demo else a.model, demo_model=a.demo, format=fmt,
                           system_prompt=a.system_prompt, seed=a.seed, speaker=a.speaker,
                           generation=generation_config(a), tools=chosen_tools(a))
    prepare_output(out, settings, source)
    print(f"{len(items)} items ({fmt}) -> {out}", file=sys.stderr)
    t0 = time.perf_counter()
    model = load_model(a)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    bar = None if a.quiet else BatchProgress(len(items))
    t0 = time.perf_counter()
    try:
        outcomes = run_batch(model, items, out, settings, a.sessions, bar)
    finally:
        if bar is not None:
            bar.close()
    print(summary_text(outcomes, time.perf_counter() - t0, out))
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def add_batch_parser(sub) -> None:
    from .batch import FORMATS

    b = sub.add_parser("batch", help="answer a folder, a JSONL manifest or a Full-Duplex-Bench root into one output "
                                     "folder, resumably (docs/batch.md)")
    b.add_argument("input", help="a folder of recordings (searched recursively), a JSONL manifest (one object per "
                                 "line: audio, and optional id, system_prompt, seed, speaker, extra_seconds) or a "
                                 "Full-Duplex-Bench root ({ID}/input.wav)")
    b.add_argument("--out", required=True, help="output folder: run.json, summary.jsonl and items/{ID}/; running the "
                                                "same command again skips the items already complete")
    b.add_argument("--format", choices=FORMATS, help="what INPUT is (default: detected)")
    b.add_argument("--sessions", type=int, default=1, help="conversations stepped together in one frame step "
                                                           "(default 1; docs/batching.md)")
    add_model_arguments(b)
    add_answer_arguments(b)
    b.set_defaults(func=cmd_batch)


# ---------------------------------------------------------------------------------------------------------------
# voices (voicechat/voices.py, docs/voices.md)
# ---------------------------------------------------------------------------------------------------------------
def checkpoint_config(a: argparse.Namespace):
    """The checkpoint's config alone (the voice library needs its codec rate, prompt length and default voice): a
    folder's, a Hub repo's JSON files (no weights downloaded), or with --demo the demo model's."""
    from .checkpoint import hub_download, load_config

    if a.demo:
        from .random_checkpoint import write_tiny_checkpoint

        with tempfile.TemporaryDirectory(prefix="voicechat-demo-") as scratch:
            return load_config(write_tiny_checkpoint(Path(scratch), seed=0))
    path = Path(a.model).expanduser()
    return load_config(path if path.is_dir() else hub_download(a.model, patterns=["*.json"], offline=a.offline))


def voice_library(a: argparse.Namespace, config):
    """The library at --voices, after the checkpoint's default voice."""
    from .voices import DEFAULT, VoiceLibrary

    return VoiceLibrary(Path(a.voices).expanduser(), [config.speaker_name or DEFAULT])


def chosen_voice(a: argparse.Namespace):
    """``--voice NAME``: the library's voice, found before the model loads."""
    if getattr(a, "speaker", None):
        raise UsageError("give --voice (a voice of the library) or --speaker (a latent name or a WAV), not both")
    return voice_library(a, checkpoint_config(a)).get(a.voice)


def cmd_voices(a: argparse.Namespace) -> int:
    config = checkpoint_config(a)
    library = voice_library(a, config)
    if a.action == "list":
        for voice in library.voices():
            print(voice.describe())
    elif a.action == "add":
        voice = library.add(a.name, Path(a.file).expanduser(), config=config)
        print(f"{library.folder}: {voice.describe()}")
    elif a.action == "rename":
        print(f"renamed {a.name} to {library.rename(a.name, a.new_name).name}")
    else:
        library.remove(a.name)
        print(f"removed {a.name} from {library.folder}")
    return 0


def add_library_argument(p: argparse.ArgumentParser) -> None:
    import os

    from .voices import LIBRARY_FOLDER

    p.add_argument("--voices", default=os.environ.get("VOICECHAT_VOICES", str(Path(OUTPUTS) / LIBRARY_FOLDER)),
                   help="the voice library's folder (default: $VOICECHAT_VOICES, else ./outputs/voices: the app's "
                        "when it is started in this folder)")


def add_voices_parser(sub) -> None:
    common = argparse.ArgumentParser(add_help=False)
    add_model_arguments(common)
    add_library_argument(common)
    v = sub.add_parser("voices", help="the voice library: list, add (from a recording), rename, remove")
    actions = v.add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[common], help="the checkpoint's voice, then the voices added")
    add = actions.add_parser("add", parents=[common], help="add a voice from a recording of 3 s or more of speech")
    add.add_argument("name", help="up to 32 letters, digits, spaces, - or _")
    add.add_argument("file", help="the recording (any format generate reads)")
    rename = actions.add_parser("rename", parents=[common], help="rename a voice you added")
    rename.add_argument("name", help="the voice's name now")
    rename.add_argument("new_name", help="its new name (the same rules as add's)")
    remove = actions.add_parser("remove", parents=[common], help="remove a voice you added")
    remove.add_argument("name", help="the voice to remove")
    v.set_defaults(func=cmd_voices)


def cmd_download(a: argparse.Namespace) -> int:
    from .checkpoint import resolve_checkpoint

    print(resolve_checkpoint(a.repo))
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    checked_output(a.json, "--json", a.overwrite)
    if not a.demo and a.model is None:
        raise UsageError("bench needs --model DIR (a checkpoint) or --demo")
    if a.max_minutes is not None and not a.sessions:
        raise UsageError("bench's --max-minutes goes with --sessions (a group's admission)")
    if a.lookahead and not a.sessions:
        raise UsageError("bench's --lookahead goes with --sessions (a group's steps)")
    with tempfile.TemporaryDirectory(prefix="voicechat-demo-") as scratch:  # --demo's checkpoint, while it runs
        if a.demo:
            from .random_checkpoint import write_tiny_checkpoint

            print("the demo model (random weights: its speed is a tiny model's)", file=sys.stderr)
            a.model = str(write_tiny_checkpoint(Path(scratch), seed=0))
        if a.sessions:  # many conversations on one model (voicechat/benchmarks/sessions.py)
            from .benchmarks.sessions import main as sessions_main

            return sessions_main(a)
        from .benchmarks.frame import main as bench_main

        return bench_main(a)


def cmd_serve(a: argparse.Namespace) -> int:
    check_port(a.port)
    check_range("idle_timeout", "--idle-timeout", a.idle_timeout, 0.0)
    check_range("max_ahead_seconds", "--max-ahead-seconds", a.max_ahead_seconds, 0.0)
    check_range("drain_seconds", "--drain-seconds", a.drain_seconds, 0.0)
    try:
        import uvicorn  # noqa: F401
        import websockets  # noqa: F401  (without it uvicorn answers WebSocket upgrades with 404)

        from .realtime import serve
    except ImportError as e:
        raise UsageError(f"the Realtime server needs {e.name}: pip install -r requirements.txt "
                         "(or pip install \".[app]\" in a checkout)") from None
    from .engine import check_limits

    try:
        check_limits(a.max_sessions, max_minutes=a.max_minutes, flags=True)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    if a.allow_voice_add and not a.api_key:
        raise UsageError("--allow-voice-add lets clients write voices into the library: give --api-key too")
    if not a.ray:
        for option in ("address", "replicas", "gpus_per_replica", "replicas_per_node"):
            if getattr(a, option) is not None:
                raise UsageError(f"--{option.replace('_', '-')} needs --ray (a Ray Serve deployment)")
        return serve(model=a.model, demo=a.demo, host=a.host, port=a.port, api_key=a.api_key, offline=a.offline,
                     idle_seconds=a.idle_timeout, max_sessions=a.max_sessions, voices=Path(a.voices).expanduser(),
                     voice_add=a.allow_voice_add, ahead_seconds=a.max_ahead_seconds, max_minutes=a.max_minutes,
                     drain_seconds=a.drain_seconds)
    if a.allow_voice_add:
        raise UsageError("--allow-voice-add works on the plain server only (a Ray replica has no voice library)")
    try:
        from .deploy import ArgumentError, run
    except ImportError as e:
        raise UsageError(f"--ray needs {e.name}: pip install \".[ray]\" in a checkout (Ray Serve)") from None
    try:
        return run(address=a.address, host=a.host, port=a.port, drain_seconds=a.drain_seconds, model=a.model,
                   demo=a.demo, offline=a.offline, api_key=a.api_key, idle_seconds=a.idle_timeout,
                   replicas=default(a.replicas, 1), max_sessions=default(a.max_sessions, 1),
                   max_minutes=a.max_minutes,
                   gpus_per_replica=default(a.gpus_per_replica, 0.0), replicas_per_node=a.replicas_per_node)
    except ArgumentError as e:
        raise UsageError(str(e)) from None


def default(value, otherwise):
    """An option's value, or ``otherwise`` when it was not given (the Ray options default to None: without --ray,
    giving one is an error)."""
    return otherwise if value is None else value


def check_port(port: int) -> None:
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a TCP port: give one of 1-65535 (0 picks a free one)")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Which model: --model, --offline and --demo."""
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"checkpoint directory or Hub repo id (default {DEFAULT_MODEL})")
    p.add_argument("--offline", action="store_true", help="never contact the Hugging Face Hub")
    p.add_argument("--demo", action="store_true", help="a tiny random-weight model built locally (no download; "
                                                       "answers are noise)")


def add_serve_parser(sub) -> None:
    import os

    s = sub.add_parser("serve", help="OpenAI Realtime (GA) WebSocket server at /v1/realtime (voicechat/realtime/)")
    add_model_arguments(s)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this computer only)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    s.add_argument("--api-key", default=os.environ.get("VOICECHAT_API_KEY"),
                   help="refuse connections without 'Authorization: Bearer KEY' (default: $VOICECHAT_API_KEY)")
    s.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_SECONDS, metavar="SECONDS",
                   help=f"close a connection that sends no audio for this long (default {DEFAULT_IDLE_SECONDS:g}; "
                        "0 = never)")
    s.add_argument("--drain-seconds", type=float, default=DEFAULT_DRAIN_SECONDS, metavar="SECONDS",
                   help=f"on SIGTERM, how long open conversations go on before they are closed (default "
                        f"{DEFAULT_DRAIN_SECONDS:g}; docs/operations.md)")
    s.add_argument("--max-ahead-seconds", type=float, default=DEFAULT_AHEAD_SECONDS, metavar="SECONDS",
                   help="refuse audio a client sends further ahead of real time than this (default "
                        f"{DEFAULT_AHEAD_SECONDS:g}; 0 = no limit; docs/limits.md §2)")
    s.add_argument("--max-sessions", type=int, default=None, metavar="N",
                   help="conversations stepped together on the model at once; one more gets server_busy "
                        "(default: as many as fit in memory at --max-minutes, at most 4; docs/batching.md)")
    s.add_argument("--max-minutes", type=float, default=None, metavar="MIN",
                   help="a conversation's most minutes: at them it ends with a session_failed error event, and each "
                        "conversation's memory is reserved up to them (default: the timeline's 10.9; "
                        "docs/batching.md §4)")
    add_library_argument(s)
    s.add_argument("--allow-voice-add", action="store_true",
                   help="let clients add voices to the library (the voicechat.voice.add event, docs/voices.md); "
                        "needs --api-key")
    r = s.add_argument_group("Ray Serve (docs/deploy.md; pip install \".[ray]\" in a checkout)",
                             "with --ray, --max-sessions is each replica's, 1 unless given: Ray needs it before the "
                             "models load")
    r.add_argument("--ray", action="store_true", help="serve as a Ray Serve application: replicas behind one address")
    r.add_argument("--address", help="the Ray cluster to deploy on (e.g. ray://head:10001 or head:6379; default: "
                                     "start a local cluster and stop it on exit)")
    r.add_argument("--replicas", type=int, help="replicas of the model, each with its own engine (default 1)")
    r.add_argument("--gpus-per-replica", type=float, help="GPUs Ray reserves for each replica (default 0: none, as "
                                                          "on a Mac or a CPU host; 1 on a CUDA host)")
    r.add_argument("--replicas-per-node", type=int, help="at most this many replicas on one Ray node (e.g. 1 on "
                                                         "Macs: one model per machine)")
    s.set_defaults(func=cmd_serve)


def cmd_live(a: argparse.Namespace) -> int:
    from .devices import DeviceChoiceError, device_table, import_sounddevice
    from .terminal import SAVED_FILES, LiveOptions, run_live

    if a.list_devices:
        print(device_table(import_sounddevice()))
        return 0
    if a.output_file and not a.input_file:
        raise UsageError("--output-file records what the speaker would play for --input-file; give --input-file too")
    if a.fast and not (a.input_file and a.output_file):
        raise UsageError("--fast runs faster than real time, so it needs --input-file and --output-file (no devices)")
    if a.echo_cancel and a.input_file:
        raise UsageError("--echo-cancel works between a speaker and a microphone; --input-file has neither")
    if a.input_file and not Path(a.input_file).is_file():
        raise UsageError(f"--input-file {a.input_file}: no such file")
    output = checked_output(a.output_file, "--output-file", a.overwrite)
    distinct_files({"--input-file": a.input_file and Path(a.input_file), "--output-file": output})
    if a.save:
        checked_folder(a.save, "--save", SAVED_FILES, a.overwrite)
    checked_seed(a.seed)
    checked_prompt(a.system_prompt)
    options = LiveOptions(
        model=a.model, demo=a.demo, system_prompt=a.system_prompt, seed=a.seed, tools=chosen_tools(a),
        input_device=a.input_device, output_device=a.output_device, save=a.save and Path(a.save),
        input_file=a.input_file and Path(a.input_file), output_file=a.output_file and Path(a.output_file),
        fast=a.fast, tail=a.tail, seconds=a.seconds, max_lag=a.max_lag, offline=a.offline, echo_cancel=a.echo_cancel,
        voice=chosen_voice(a) if a.voice else None)
    try:
        run_live(options)
    except DeviceChoiceError as e:
        raise UsageError(str(e)) from None
    return 0


def add_live_parser(sub) -> None:
    from .config import MAX_LAG_SECONDS

    v = sub.add_parser("live", help="talk live: microphone and speakers (or a recording played as the microphone)")
    add_model_arguments(v)
    v.add_argument("--system-prompt", default="", help="system prompt (default: none)")
    v.add_argument("--seed", type=int, default=0, help=SEED_HELP)
    v.add_argument("--voice", help="a voice of the library (python -m voicechat voices list)")
    add_library_argument(v)
    v.add_argument("--tools", choices=["builtin"], help="let the model call the built-in tools (date and time, "
                                                         "calculator, unit conversion)")
    v.add_argument("--tools-module", metavar="PATH.py",
                   help="let the model call the tools this Python file defines; at most 5 tools in all")
    v.add_argument("--input-device", help="microphone: a number or part of a name from --list-devices (default: "
                                          "the system's)")
    v.add_argument("--output-device", help="speaker: a number or part of a name from --list-devices")
    v.add_argument("--list-devices", action="store_true", help="list the audio devices and exit")
    v.add_argument("--save", metavar="DIR", help="write conversation.wav (you left, the model right) and "
                                                 "conversation.json here at the end")
    v.add_argument("--input-file", metavar="WAV", help="play this recording as the microphone")
    v.add_argument("--output-file", metavar="OUT.wav", help="write what the speaker would have played (no devices)")
    v.add_argument("--fast", action="store_true", help="with --input-file and --output-file: faster than real time")
    add_overwrite_argument(v)
    v.add_argument("--tail", type=float, default=4.0, help="seconds of silence after --input-file (default 4)")
    v.add_argument("--seconds", type=float, help="stop after this many seconds")
    v.add_argument("--max-lag", type=float, default=MAX_LAG_SECONDS,
                   help=f"stop when the model falls this many seconds behind real time (default {MAX_LAG_SECONDS:g}; "
                        f"0 = never); tool calls hold your audio on purpose and are not counted")
    v.add_argument("--echo-cancel", action="store_true",
                   help="remove the speaker's sound from the microphone (WebRTC AEC3; pip install livekit), so "
                        "speakers work without headphones")
    v.set_defaults(func=cmd_live)


def add_overwrite_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help="replace output files that exist (without it, such a file is an error before the model loads)")


def add_answer_arguments(g: argparse.ArgumentParser) -> None:
    """How a recording is answered: prompt, seed, voice, tools, timeline and sampling (generate and batch)."""
    g.add_argument("--system-prompt", default="", help="system prompt (default: none)")
    g.add_argument("--seed", type=int, default=0, help=SEED_HELP)
    g.add_argument("--speaker", help="speaker latent name of the checkpoint, or a reference WAV")
    g.add_argument("--tools", choices=["builtin"], help="let the model call the built-in tools (date and time, "
                                                         "calculator, unit conversion)")
    g.add_argument("--tools-module", metavar="PATH.py",
                   help="let the model call the tools this Python file defines (@voicechat.tools.tool functions or "
                        "voicechat.tools.Tool objects); at most 5 tools in all")
    g.add_argument("--reference", action="store_true",
                   help="NVIDIA's offline semantics: fixed length, prompt frames and frame 0 kept in the audio")
    g.add_argument("--extra-seconds", type=float,
                   help="append exactly this much silence (default: until the answer ends)")
    g.add_argument("--max-extra-seconds", type=float, default=10.0, help="bound on the appended silence (default 10)")
    g.add_argument("--nvidia-sampling", action="store_true",
                   help="sample the text channel like NVIDIA's wrapper (temperature 0.3, top-p 0.5, repetition 1.1)")
    g.add_argument("--text-temperature", type=float,
                   help="the text channel's sampling temperature (default 0: greedy, the most likely token)")
    g.add_argument("--text-top-p", type=float, help="sample the text from the smallest set of tokens holding this "
                                                    "probability, in (0, 1] (default 1)")
    g.add_argument("--text-repetition-penalty", type=float,
                   help="penalize the tokens already said by this factor (default 1: none)")
    g.add_argument("--tts-guidance", type=float, help="the speech's classifier-free guidance scale (default: the "
                                                      "checkpoint's)")
    g.add_argument("--tts-top-p", type=float, help="the speech's top-p, in (0, 1] (default: the checkpoint's)")
    g.add_argument("--tts-top-k", type=int,
                   help="sample each speech code from the K most likely (default: the checkpoint's)")
    g.add_argument("--tts-noise", type=float, help="the speech sampler's noise scale, 0 or more (default: the "
                                                   "checkpoint's)")
    g.add_argument("--turn-markers", action="store_true", help="NVIDIA's <|t|> / <$t$> turn markers in the text")
    g.add_argument("--tokenizer", help="tokenizer.json to use when the checkpoint ships none")
    g.add_argument("--quiet", action="store_true", help="no progress bar")


def parser(prog: str = "python -m voicechat") -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog=prog, description="NemotronLabs-VoiceChat-11B on MLX.")
    p.add_argument("--version", action="version", version=f"voicechat {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="answer one recording")
    add_model_arguments(g)
    g.add_argument("--audio", required=True,
                   help="input recording (WAV, FLAC, OGG, MP3, M4A/AAC, Opus, WebM, ...; any rate and channels)")
    g.add_argument("--output-audio", help="write the spoken answer here (22.05 kHz mono 16-bit WAV; default: "
                                          "<recording name>-answer.wav in the current folder)")
    g.add_argument("--json", help="write the conversation record here: transcript, texts, words with their frames, "
                                  "per-frame token ids and codes, settings, timings, tool calls (the app's "
                                  "conversation.json)")
    add_answer_arguments(g)
    add_overwrite_argument(g)
    g.add_argument("--voice", help="a voice of the library (python -m voicechat voices list)")
    add_library_argument(g)
    g.set_defaults(func=cmd_generate)
    add_batch_parser(sub)
    d = sub.add_parser("download", help="fetch a checkpoint into the Hugging Face cache and print its directory")
    d.add_argument("repo", nargs="?", default=DEFAULT_MODEL,
                   help="repo id; supported: " + ", ".join(SUPPORTED_CHECKPOINTS))
    d.set_defaults(func=cmd_download)
    b = sub.add_parser("bench",
                       help="per-frame speed of a checkpoint, offline and streaming (voicechat/benchmarks/frame.py)")
    from .benchmarks.frame import add_arguments

    from .benchmarks.sessions import session_counts

    add_arguments(b, demo=True)
    b.add_argument("--sessions", type=session_counts, default=None, metavar="N,N,...",
                   help="instead: that many conversations at once on the model, staggered, per count: tick p50/p95/"
                        "p99/max, ms per conversation, memory (voicechat/benchmarks/sessions.py)")
    b.add_argument("--max-minutes", type=float, default=None, metavar="MIN",
                   help="with --sessions: each conversation's most minutes, which admission reserves memory for, as "
                        "serve's option (default: the timeline's 10.9; docs/batching.md §4)")
    b.add_argument("--lookahead", type=int, choices=(0, 1), default=0,
                   help="with --sessions: ticks each step leaves running on the device while the host builds the "
                        "next (docs/batching.md §6); default 0, as the engine")
    add_overwrite_argument(b)
    b.set_defaults(func=cmd_bench)
    add_serve_parser(sub)
    add_live_parser(sub)
    add_voices_parser(sub)
    p.commands = sub.choices  # each command's own parser, for its usage line
    return p


def main(argv=None) -> int:
    p = parser(command_name())
    try:
        args, unknown = p.parse_known_args(argv)
        if unknown:  # said by the command's parser, so its usage line (and not the top level's) comes with it
            p.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as e:  # argparse already printed the usage error
        return 0 if e.code == 0 else 2
    try:
        return args.func(args)
    except (UsageError, AudioInputError, ToolError, SettingError, OutputError, TestSetError, VoiceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except VoiceChatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl+C: the shell's convention, 128 + SIGINT
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
