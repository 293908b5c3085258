"""Command line: ``python -m voicechat generate | download | bench | live``.

Exit codes: 0 ok, 2 bad usage or input, 1 any other failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .checkpoint import DEFAULT_MODEL, SUPPORTED_CHECKPOINTS
from .errors import AudioInputError, VoiceChatError


class UsageError(Exception):
    pass


class ProgressBar:
    """One stderr line, redrawn per frame: frames done, frames per second and the real-time factor."""

    def __init__(self, stream=None, width: int = 30):
        self.stream, self.width = stream or sys.stderr, width

    def __call__(self, done: int, total: int, update) -> None:
        filled = self.width * done // max(total, 1)
        rtf = 12.5 / update.frames_per_second if update.frames_per_second else float("inf")
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} frames  "
                          f"{update.frames_per_second:.1f} frames/s  RTF {rtf:.2f}  ")
        self.stream.flush()

    def close(self) -> None:
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


def result_json(result) -> dict:
    return {
        "user_transcript": result.user_transcript, "text": result.text, "function_text": result.function_text,
        "sample_rate": result.sample_rate, "seconds": round(result.seconds, 3), "first_frame": result.first_frame,
        "prompt_frames": result.prompt_frames, "input_frames": result.input_frames,
        "frame_seconds": result.frame_seconds, "text_tokens": result.text_tokens.tolist(),
        "function_tokens": result.function_tokens.tolist(), "audio_codes": result.audio_codes.tolist(),
        "timings_s": {k: round(v, 4) for k, v in result.timings.items()}, "settings": result.settings,
    }


def cmd_generate(a: argparse.Namespace) -> int:
    from . import load
    from .audio import write_wav

    if not Path(a.audio).is_file():
        raise UsageError(f"--audio {a.audio}: no such file")
    gen = generation_config(a)
    t0 = time.perf_counter()
    print(f"loading {a.model} ...", file=sys.stderr)
    model = load(a.model, tokenizer=a.tokenizer, offline=a.offline)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    bar = ProgressBar()
    try:
        result = model.generate(a.audio, None, system_prompt=a.system_prompt, seed=a.seed, speaker=a.speaker,
                                config=gen, progress=None if a.quiet else bar)
    finally:
        if not a.quiet:
            bar.close()
    if result.user_transcript:
        print(f"[user] {result.user_transcript}")
    print(result.text.strip())
    if result.function_text.strip():
        print(f"[function] {result.function_text.strip()}")
    if a.output_audio:
        write_wav(a.output_audio, result.audio, result.sample_rate)
        print(f"wrote {a.output_audio} ({result.seconds:.2f} s at {result.sample_rate} Hz)", file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(result_json(result), indent=1, ensure_ascii=False))
    return 0


def cmd_download(a: argparse.Namespace) -> int:
    from .checkpoint import resolve_checkpoint

    print(resolve_checkpoint(a.repo))
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from .benchmarks.frame import main as bench_main

    return bench_main(a)


def cmd_live(a: argparse.Namespace) -> int:
    from .devices import DeviceChoiceError, device_table, import_sounddevice
    from .live import LiveOptions, run_live

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
    options = LiveOptions(
        model=a.model, demo=a.demo, system_prompt=a.system_prompt, seed=a.seed, tools=a.tools,
        input_device=a.input_device, output_device=a.output_device, save=a.save and Path(a.save),
        input_file=a.input_file and Path(a.input_file), output_file=a.output_file and Path(a.output_file),
        fast=a.fast, tail=a.tail, seconds=a.seconds, max_lag=a.max_lag, offline=a.offline, echo_cancel=a.echo_cancel)
    try:
        run_live(options)
    except DeviceChoiceError as e:
        raise UsageError(str(e)) from None
    return 0


def add_live_parser(sub) -> None:
    from .live import DEFAULT_MAX_LAG

    v = sub.add_parser("live", help="talk live: microphone and speakers (or a recording played as the microphone)")
    v.add_argument("--model", default=DEFAULT_MODEL, help=f"checkpoint directory or Hub repo id (default {DEFAULT_MODEL})")
    v.add_argument("--demo", action="store_true", help="a tiny random-weight model (no download; answers are noise)")
    v.add_argument("--system-prompt", default="", help="system prompt (default: none)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--tools", choices=["builtin"], help="let the model call the built-in tools")
    v.add_argument("--input-device", help="microphone: a number or part of a name from --list-devices (default: "
                                          "the system's)")
    v.add_argument("--output-device", help="speaker: a number or part of a name from --list-devices")
    v.add_argument("--list-devices", action="store_true", help="list the audio devices and exit")
    v.add_argument("--save", metavar="DIR", help="write conversation.wav (you left, the model right) and "
                                                 "conversation.json here at the end")
    v.add_argument("--input-file", metavar="WAV", help="play this recording as the microphone")
    v.add_argument("--output-file", metavar="OUT.wav", help="write what the speaker would have played (no devices)")
    v.add_argument("--fast", action="store_true", help="with --input-file and --output-file: faster than real time")
    v.add_argument("--tail", type=float, default=4.0, help="seconds of silence after --input-file (default 4)")
    v.add_argument("--seconds", type=float, help="stop after this many seconds")
    v.add_argument("--max-lag", type=float, default=DEFAULT_MAX_LAG,
                   help=f"stop when the model falls this many seconds behind real time (default {DEFAULT_MAX_LAG:g}; "
                        f"0 = never); tool calls hold your audio on purpose and are not counted")
    v.add_argument("--echo-cancel", action="store_true",
                   help="remove the speaker's sound from the microphone (WebRTC AEC3; pip install livekit), so "
                        "speakers work without headphones")
    v.add_argument("--offline", action="store_true", help="never contact the Hugging Face Hub")
    v.set_defaults(func=cmd_live)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m voicechat", description="NemotronLabs-VoiceChat-11B on MLX.")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="answer one recording")
    g.add_argument("--model", default=DEFAULT_MODEL, help=f"checkpoint directory or Hub repo id (default {DEFAULT_MODEL})")
    g.add_argument("--audio", required=True, help="input recording (WAV, FLAC, OGG, MP3; any rate and channels)")
    g.add_argument("--output-audio", help="write the spoken answer here (22.05 kHz mono 16-bit WAV)")
    g.add_argument("--system-prompt", default="", help="system prompt (default: none)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--speaker", help="speaker latent name of the checkpoint, or a reference WAV")
    g.add_argument("--json", help="write transcript, texts, per-frame token ids, codes, settings and timings here")
    g.add_argument("--reference", action="store_true",
                   help="NVIDIA's offline semantics: fixed length, prompt frames and frame 0 kept in the audio")
    g.add_argument("--extra-seconds", type=float, help="append exactly this much silence (default: until the answer ends)")
    g.add_argument("--max-extra-seconds", type=float, default=10.0, help="bound on the appended silence (default 10)")
    g.add_argument("--nvidia-sampling", action="store_true",
                   help="sample the text channel like NVIDIA's wrapper (temperature 0.3, top-p 0.5, repetition 1.1)")
    g.add_argument("--text-temperature", type=float)
    g.add_argument("--text-top-p", type=float)
    g.add_argument("--text-repetition-penalty", type=float)
    g.add_argument("--tts-guidance", type=float, help="classifier-free guidance scale (checkpoint default)")
    g.add_argument("--tts-top-p", type=float)
    g.add_argument("--tts-top-k", type=int)
    g.add_argument("--tts-noise", type=float)
    g.add_argument("--turn-markers", action="store_true", help="NVIDIA's <|t|> / <$t$> turn markers in the text")
    g.add_argument("--tokenizer", help="tokenizer.json to use when the checkpoint ships none")
    g.add_argument("--offline", action="store_true", help="never contact the Hugging Face Hub")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.set_defaults(func=cmd_generate)
    d = sub.add_parser("download", help="fetch a checkpoint into the Hugging Face cache and print its directory")
    d.add_argument("repo", nargs="?", default=DEFAULT_MODEL,
                   help="repo id; supported: " + ", ".join(SUPPORTED_CHECKPOINTS))
    d.set_defaults(func=cmd_download)
    b = sub.add_parser("bench", help="per-frame speed of a checkpoint, offline and streaming (voicechat/benchmarks/frame.py)")
    from .benchmarks.frame import add_arguments

    add_arguments(b)
    b.set_defaults(func=cmd_bench)
    add_live_parser(sub)
    return p


def main(argv=None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage error
        return 0 if e.code == 0 else 2
    try:
        return args.func(args)
    except (UsageError, AudioInputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except VoiceChatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
