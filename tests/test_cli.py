"""``python -m voicechat``: generate on every layout, byte-identical seeded WAVs, the conversation record, where
answers go, and exit codes for bad input and bad output paths (found before the model loads)."""

import argparse
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from conftest import HARNESS_WAV, NEMO, TESTS
from test_audio import write_with_pyav
import voicechat
from voicechat.__main__ import main, parser
from voicechat.terminal import terminal_text
from voicechat.random_checkpoint import LAYOUTS, write_checkpoint
from voicechat.result import CONVERSATION_FIELDS

# what the app's conversation.json held before the shared schema (app.py save_outputs): all of it is still there
APP_KEYS_BEFORE = {"app", "model", "demo_model", "created", "input_file", "input_sample_rate", "input_seconds",
                   "system_prompt", "seed", "generation_config", "user_transcript", "assistant_text", "function_text",
                   "frame_seconds", "first_frame", "prompt_frames", "input_frames", "text_tokens", "function_tokens",
                   "audio_codes", "text_pieces", "function_pieces", "answer_seconds", "answer_sample_rate", "timings_s",
                   "wall_seconds", "settings"} - {"app"}  # "app": "voicechat" became "source": "app" / "cli"


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    return {layout: write_checkpoint(root / layout, layout) for layout in LAYOUTS}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_generate_on_every_layout(layout, layouts, tmp_path, capsys):
    out, js = tmp_path / "a.wav", tmp_path / "a.json"
    code = main(["generate", "--model", str(layouts[layout]), "--audio", str(HARNESS_WAV), "--output-audio", str(out),
                 "--system-prompt", "Be brief.", "--json", str(js), "--extra-seconds", "0.4"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    assert lines[0].startswith("[user] ")  # these checkpoints have an RNNT head
    assert "frames/s" in captured.err and "RTF" in captured.err  # the progress bar
    data, rate = sf.read(out, dtype="int16")
    assert rate == 22050 and data.ndim == 1 and sf.info(out).subtype == "PCM_16"
    info = json.loads(js.read_text())
    assert len(data) == len(info["text_tokens"]) * 1764 == (28 + 5) * 1764
    assert info["settings"]["system_prompt"] == "Be brief." and len(info["audio_codes"][0]) == 31
    assert f"wrote {out} " in captured.err and f"wrote {js}" in captured.err


def test_json_is_the_documented_conversation_record(layouts, tmp_path, capsys):
    js = tmp_path / "c.json"
    assert main(["generate", "--model", str(layouts["nested"]), "--audio", str(HARNESS_WAV), "--output-audio",
                 str(tmp_path / "a.wav"), "--json", str(js), "--extra-seconds", "0.4", "--seed", "3", "--quiet"]) == 0
    printed = capsys.readouterr().out
    info = json.loads(js.read_text())
    assert list(info) == list(CONVERSATION_FIELDS) and APP_KEYS_BEFORE <= set(info)
    assert (info["schema"], info["source"], info["input_file"], info["answer_file"]) == (
        "voicechat.conversation/1", "cli", "question_16k.wav", "a.wav")
    assert (info["input_sample_rate"], info["input_seconds"], info["seed"]) == (16000, round(34484 / 16000, 3), 3)
    assert info["generation_config"]["extra_seconds"] == 0.4 and info["model"] == str(layouts["nested"])
    # the assistant's text may hold line breaks (a random model's tokens can be "\n"); the record keeps control
    # characters as they are, the terminal gets them escaped
    assert printed.startswith(f"[user] {info['user_transcript']}\n{terminal_text(info['assistant_text'].strip())}\n")
    # the words at their frames: each piece is the non-pad token of its frame, and together they are the text
    first, tokens = info["first_frame"], info["text_tokens"]
    assert info["text_pieces"] and all(tokens[frame - first] == token for frame, token, _ in info["text_pieces"])
    assert "".join(text for *_, text in info["text_pieces"]) == info["assistant_text"]
    kept = [i for i, t in enumerate(tokens) if t not in (1, 2, 12)]  # pad <SPECIAL_12>, bos <s>, eos </s>
    assert [frame - first for frame, *_ in info["text_pieces"]] == kept


def test_seeded_cli_runs_write_identical_bytes(layouts, tmp_path):
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"{i}.wav")
        assert main(["generate", "--model", str(layouts["nested"]), "--audio", str(HARNESS_WAV), "--output-audio",
                     str(paths[-1]), "--seed", "7", "--quiet", "--extra-seconds", "0.2"]) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_reference_mode_on_the_nemo_checkpoint(tmp_path, capsys):
    out = tmp_path / "r.wav"
    assert main(["generate", "--model", str(NEMO / "tiny_model"), "--audio", str(HARNESS_WAV),
                 "--output-audio", str(out), "--system-prompt", "You are a helpful assistant.", "--reference",
                 "--quiet"]) == 0
    assert len(sf.read(out)[0]) == 39 * 1764  # NVIDIA's fixed length: 11 prompt + 28 audio frames
    assert "[user]" not in capsys.readouterr().out  # NeMo 3.0.0 checkpoints have no transcript head


@pytest.mark.parametrize("make, words", [
    (lambda p: p / "nope.wav", "no such file"),
    (lambda p: p, "is a folder; give one recording (a file)"),
    (lambda p: (p / "bad.wav").write_text("not audio") and p / "bad.wav", "not a readable audio file"),
    (lambda p: sf.write(p / "short.wav", np.zeros(200, np.int16), 16000) or p / "short.wav", "shorter than one"),
    (lambda p: sf.write(p / "nan.wav", np.full(4000, np.nan, np.float32), 16000, subtype="FLOAT") or p / "nan.wav",
     "NaN"),
])
def test_bad_input_exits_2_with_a_message(make, words, tmp_path, capsys):
    audio = make(tmp_path)
    # checked before the model loads: the missing model would be exit 1
    assert main(["generate", "--model", str(tmp_path / "no model"), "--audio", str(audio), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("option, value, words", [
    ("--output-audio", "missing/a.wav", "the folder {tmp}/missing does not exist; create it first"),
    ("--json", "missing/deeper/a.json", "the folder {tmp}/missing/deeper does not exist"),
    ("--output-audio", ".", "is a folder; give a file name in it"),
    ("--json", ".", "is a folder; give a file name in it"),
])
def test_bad_output_path_exits_2_before_the_model_loads(option, value, words, tmp_path, capsys):
    target = str(tmp_path / value)
    assert main(["generate", "--model", str(tmp_path / "no model"), "--audio", str(HARNESS_WAV), option, target]) == 2
    err = capsys.readouterr().err
    assert words.format(tmp=tmp_path) in err and err.count("\n") == 1
    assert not (tmp_path / "missing").exists()
    assert main(["bench", "--model", str(tmp_path / "no model"), "--json", str(tmp_path / "missing/b.json")]) == 2


def test_bench_needs_a_model_or_the_demo_and_serve_a_cap_above_zero(capsys):
    assert main(["bench", "--frames", "2"]) == 2
    assert "bench needs --model DIR (a checkpoint) or --demo" in capsys.readouterr().err
    assert main(["serve", "--demo", "--max-minutes", "0"]) == 2
    assert "--max-minutes must be above 0, got 0.0" in capsys.readouterr().err


def test_without_output_audio_the_answer_goes_into_the_outputs_folder(layouts, tmp_path, monkeypatch, capsys):
    """Under ./outputs (git-ignored in a checkout), made when missing; never into the current folder itself."""
    monkeypatch.chdir(tmp_path)
    args = ["generate", "--model", str(layouts["nested"]), "--audio", str(HARNESS_WAV), "--quiet",
            "--extra-seconds", "0"]
    assert main(args) == 0
    first = tmp_path / "outputs" / "question_16k-answer.wav"
    assert f"wrote {first} (" in capsys.readouterr().err and sf.info(first).samplerate == 22050
    assert main(args) == 0  # never overwrites: the next answer gets the next name
    assert f"wrote {tmp_path / 'outputs' / 'question_16k-answer-2.wav'} (" in capsys.readouterr().err
    assert first.read_bytes() == (tmp_path / "outputs" / "question_16k-answer-2.wav").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs"]
    assert "/outputs/" in (TESTS.parent / ".gitignore").read_text().splitlines()


def test_a_voice_memo_in_m4a_is_answered(layouts, tmp_path, capsys):
    samples, rate = sf.read(HARNESS_WAV, dtype="float32")
    memo = write_with_pyav(tmp_path / "Voice Memo.m4a", "aac", np.stack([samples, samples]), rate)
    assert main(["generate", "--model", str(layouts["nested"]), "--audio", str(memo), "--output-audio",
                 str(tmp_path / "a.wav"), "--json", str(tmp_path / "a.json"), "--quiet", "--extra-seconds", "0"]) == 0
    assert capsys.readouterr().out.startswith("[user] ")
    info = json.loads((tmp_path / "a.json").read_text())
    assert info["input_file"] == "Voice Memo.m4a" and info["input_sample_rate"] == 16000


def test_bad_usage_and_missing_model(tmp_path, capsys):
    assert main(["generate"]) == 2  # --audio is required
    assert main(["generate", "--model", str(tmp_path / "missing"), "--audio", str(HARNESS_WAV)]) == 1
    assert "neither a checkpoint directory nor a Hugging Face repo id" in capsys.readouterr().err


def test_module_entry_point(layouts, tmp_path):
    p = subprocess.run([sys.executable, "-m", "voicechat", "generate", "--model", str(layouts["nested"]),
                        "--audio", str(HARNESS_WAV), "--quiet", "--extra-seconds", "0"], capture_output=True,
                       text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(TESTS.parent)}, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("[user] ") and (tmp_path / "outputs" / "question_16k-answer.wav").is_file()


def test_an_unknown_option_gets_the_commands_usage(capsys):
    assert main(["generate", "--audio", str(HARNESS_WAV), "--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert "usage: " in err and " generate [-h]" in err.splitlines()[0]
    assert err.strip().endswith("generate: error: unrecognized arguments: --no-such-option")


def test_demo_answers_without_a_checkpoint_and_the_log_gets_a_line_per_tenth(tmp_path):
    """``generate --demo`` (as app, live and serve have it) run with stderr into a file, as a log gets it."""
    log, temporary = tmp_path / "log.txt", tmp_path / "tmp"
    temporary.mkdir()
    with log.open("w") as err:
        p = subprocess.run([sys.executable, "-m", "voicechat", "generate", "--demo", "--audio", str(HARNESS_WAV),
                            "--json", "a.json", "--extra-seconds", "1"], stdout=subprocess.PIPE, stderr=err,
                           text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(TESTS.parent),
                                                         "HF_HUB_OFFLINE": "1", "TMPDIR": str(temporary)}, timeout=300)
    text = log.read_text()
    assert p.returncode == 0, text
    assert not list(temporary.glob("voicechat-*"))  # the demo checkpoint's folder is gone (mlx/ is MLX's own)
    assert json.loads((tmp_path / "a.json").read_text())["demo_model"] is True
    assert (tmp_path / "outputs" / "question_16k-answer.wav").is_file()
    progress = [line for line in text.splitlines() if "frames/s" in line]
    assert "\r" not in text and 2 <= len(progress) <= 11  # one line at each tenth of the run, the last one 100%
    assert progress[-1].startswith(f"[{'#' * 30}]")


def test_a_demo_server_leaves_no_temporary_folder_even_when_killed(tmp_path):
    """The demo checkpoint is written, loaded and removed before the server says it is ready: a SIGKILL (which no
    clean-up survives) leaves nothing behind (a 5.6 MB voicechat-demo-* folder per run, before issue 39)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    server = subprocess.Popen([sys.executable, "-m", "voicechat", "serve", "--demo", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(TESTS.parent), "HF_HUB_OFFLINE": "1",
                                   "TMPDIR": str(temporary)})
    try:
        assert any("Realtime API at" in line for line in server.stdout)
    finally:
        server.kill()
        server.wait(60)
    assert not list(temporary.glob("voicechat-*"))


def test_control_characters_of_a_models_text_are_shown_escaped():
    from voicechat.terminal import TerminalView

    assert terminal_text("a\x1b[31mb\x1cc\td\ne\x7f\x9b") == "a\\x1b[31mb\\x1cc\td\ne\\x7f\\x9b"
    assert terminal_text("Paris, 21 °C ✓") == "Paris, 21 °C ✓"
    out = io.StringIO()
    view = TerminalView(out, tty=False)
    view.say("assistant", "hi \x1b[2J there")
    view.note("[tool] f() -> \x1c")
    view.close("done")
    assert out.getvalue() == "assistant: hi \\x1b[2J there\n[tool] f() -> \\x1c\nstatus: done\n"


# ----------------------------------------------------------------------------------------------------------------
# hardening (issue 25, docs/limits.md): every bad value is one line, exit 2, before the model loads
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["--seed", "-1"], "the seed must be a whole number from 0 to 2^64 - 1"),
    (["--seed", str(2 ** 64)], "the seed must be a whole number from 0 to 2^64 - 1"),
    (["--extra-seconds", "nan"], "extra seconds must be a finite number"),
    (["--extra-seconds", "-1"], "extra seconds must be a finite number at least 0"),
    (["--extra-seconds", "1e9"], "at most 655.36"),
    (["--max-extra-seconds", "inf"], "max extra seconds must be a finite number"),
    (["--max-extra-seconds", "700"], "at most 655.36"),
    (["--text-temperature", "-5"], "the text temperature must be a finite number at least 0"),
    (["--text-temperature", "nan"], "the text temperature must be a finite number"),
    (["--text-top-p", "5"], "the text top-p must be a finite number above 0 and at most 1"),
    (["--tts-top-k", "0"], "the TTS top-k must be a whole number of at least 1"),
    (["--tts-top-k", "-1"], "the TTS top-k must be a whole number of at least 1"),
    (["--tts-guidance", "nan"], "the TTS guidance scale must be a finite number"),
    (["--tts-noise", "-1"], "the TTS noise scale must be a finite number at least 0"),
    (["--system-prompt", "y" * 100_000], "the system prompt has 100000 characters; the limit is 32768"),
    (["--system-prompt", "caf\udce9"], "the system prompt is not valid text"),
    (["--tools-module", str(HARNESS_WAV)], "is not a Python file (.py)"),
])
def test_bad_settings_exit_2_before_the_model_loads(args, words, tmp_path, capsys):
    # the missing model would be exit 1: these are refused before it is looked for
    assert main(["generate", "--model", str(tmp_path / "no model"), "--audio", str(HARNESS_WAV), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def run_cli(*args, cwd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voicechat", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(TESTS.parent)}, timeout=120, **kwargs)


def test_a_huge_prompt_is_one_line_not_a_crash(tmp_path):
    """100 KB of instructions made the prefill ask for tens of GB (exit 139); a prompt within the character cap
    but past MAX_PROMPT_POSITIONS is refused once the tokenizer has counted it, before any model work."""
    for prompt, words in [("y" * 100_000, "the system prompt has 100000 characters"),
                          ("x " * 3000, "the system prompt takes 6002 timeline positions; the limit is 2048"),
                          (b"caf\xe9 latin-1", "the system prompt is not valid text: character 3")]:
        p = run_cli("generate", "--model", str(NEMO / "tiny_model"), "--audio", str(HARNESS_WAV), "--output-audio",
                    str(tmp_path / "a.wav"), "--quiet", "--system-prompt", prompt, cwd=tmp_path)
        assert p.returncode == 2 and p.stdout == "", p.stderr
        assert p.stderr.splitlines()[-1].startswith("error: ") and words in p.stderr and "Traceback" not in p.stderr
        assert not (tmp_path / "a.wav").exists()


def test_outputs_never_replace_the_input_or_each_other(tmp_path):
    recording = tmp_path / "q.wav"
    recording.write_bytes(HARNESS_WAV.read_bytes())
    (tmp_path / "link.wav").symlink_to(recording)
    for args, words in [(["--output-audio", str(recording)], "--output-audio and --audio are the same file"),
                        (["--output-audio", str(tmp_path / "link.wav")], "--output-audio and --audio are the same"),
                        (["--json", str(recording)], "--json and --audio are the same file"),
                        (["--output-audio", "a.wav", "--json", str(tmp_path / "a.wav")],
                         "--json and --output-audio are the same file")]:
        p = run_cli("generate", "--model", "no model", "--audio", str(recording), *args, "--overwrite", cwd=tmp_path)
        assert p.returncode == 2 and words in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert recording.read_bytes() == HARNESS_WAV.read_bytes() and not (tmp_path / "a.wav").exists()


def test_special_and_unwritable_outputs_are_refused_before_the_model_loads(tmp_path):
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)  # writing the answer into it used to hang forever
    for target, words in [(fifo, "is not a regular file (a FIFO, device or socket)"),
                          ("/dev/full", "is not a regular file"),
                          ("/proc/voicechat-answer.wav", "cannot write in /proc")]:
        p = run_cli("generate", "--model", "no model", "--audio", str(HARNESS_WAV), "--output-audio", str(target),
                    cwd=tmp_path)
        assert p.returncode == 2 and words in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_failed_write_leaves_the_old_file_whole(tmp_path):
    """A write that fails part-way (here the file-size limit, as a full disk would) is one line, exit 1; the file
    that was there is untouched and no temporary file is left."""
    import resource
    import signal

    answer = tmp_path / "a.wav"
    answer.write_bytes(b"the previous answer")

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    p = run_cli("generate", "--model", str(NEMO / "tiny_model"), "--audio", str(HARNESS_WAV), "--output-audio",
                str(answer), "--overwrite", "--quiet", "--extra-seconds", "0", cwd=tmp_path, preexec_fn=small_files)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.splitlines()[-1] == f"error: could not write {answer} (File too large); nothing was written there"
    assert answer.read_bytes() == b"the previous answer" and not list(tmp_path.glob(".*.tmp"))


def test_live_outputs_are_checked_before_the_model_loads(tmp_path):
    recording = tmp_path / "q.wav"
    recording.write_bytes(HARNESS_WAV.read_bytes())
    (tmp_path / "a-file").write_text("")
    for args, words in [(["--output-file", str(recording)], "--output-file and --input-file are the same file"),
                        (["--output-file", "/dev/full"], "--output-file /dev/full is not a regular file"),
                        (["--output-file", "o.wav", "--save", str(tmp_path / "a-file")],
                         "is not a folder; give a folder for the files"),
                        (["--output-file", "o.wav", "--save", "/proc/voicechat/saved"],
                         "--save /proc/voicechat/saved: cannot write in /proc")]:
        p = run_cli("live", "--model", "no model", "--input-file", str(recording), "--fast", *args, "--overwrite",
                    cwd=tmp_path)
        assert p.returncode == 2 and words in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert recording.read_bytes() == HARNESS_WAV.read_bytes()


# ----------------------------------------------------------------------------------------------------------------
# the command's own help (issue 39): every option says what it does; --version
# ----------------------------------------------------------------------------------------------------------------
def every_argument(p: argparse.ArgumentParser, path: tuple = ()):
    """(command path, action) for every argument of ``p`` and of its subcommands, at any depth."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from every_argument(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_of_every_command_has_a_help_line():
    arguments = list(every_argument(parser()))
    commands = {path[0] for path, _ in arguments if path}
    assert {"generate", "batch", "download", "bench", "serve", "live", "voices"} <= commands
    assert sum(1 for path, _ in arguments if path[:1] == ("voices",)) > 10  # voices' own subcommands were walked
    missing = [" ".join([*path, "/".join(a.option_strings) or a.dest]) for path, a in arguments if not a.help]
    assert missing == []


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"voicechat {voicechat.__version__}\n"


# ----------------------------------------------------------------------------------------------------------------
# files (issue 39 §4): an output that exists is replaced only with --overwrite; outputs honour the umask
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command, option", [
    (["generate", "--audio", str(HARNESS_WAV)], "--output-audio"),
    (["generate", "--audio", str(HARNESS_WAV)], "--json"),
    (["live", "--input-file", str(HARNESS_WAV), "--fast", "--output-file", "{tmp}/o.wav"], "--output-file"),
    (["bench"], "--json"),
])
def test_an_existing_output_is_refused_without_overwrite(command, option, tmp_path, capsys):
    target = tmp_path / "there"
    target.write_bytes(b"the user's file")
    args = [a.format(tmp=tmp_path) for a in command]
    # the missing model would be exit 1: refused before it is looked for
    assert main([*args, "--model", str(tmp_path / "no model"), option, str(target)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {option} {target} exists; give --overwrite to replace it, or another name\n"
    assert target.read_bytes() == b"the user's file"


def test_live_save_refuses_a_folder_holding_a_saved_call(tmp_path, capsys):
    (tmp_path / "call").mkdir()
    (tmp_path / "call" / "conversation.json").write_text("{}")
    assert main(["live", "--model", str(tmp_path / "no model"), "--input-file", str(HARNESS_WAV), "--fast",
                 "--output-file", str(tmp_path / "o.wav"), "--save", str(tmp_path / "call")]) == 2
    assert "holds conversation.json already; give --overwrite" in capsys.readouterr().err


def test_overwrite_replaces_the_outputs(layouts, tmp_path, capsys):
    answer, record = tmp_path / "a.wav", tmp_path / "a.json"
    answer.write_bytes(b"old")
    record.write_bytes(b"old")
    assert main(["generate", "--model", str(layouts["nested"]), "--audio", str(HARNESS_WAV), "--output-audio",
                 str(answer), "--json", str(record), "--overwrite", "--quiet", "--extra-seconds", "0"]) == 0
    assert sf.info(answer).samplerate == 22050 and json.loads(record.read_text())["answer_file"] == "a.wav"


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_outputs_honour_the_umask(umask, layouts, tmp_path):
    """The answer, the record and every file of batch (voicechat/files.py) get 0666 less the umask, as any file a
    program makes (they were 0600 whatever the umask)."""
    old = os.umask(umask)
    try:
        assert main(["generate", "--model", str(layouts["nested"]), "--audio", str(HARNESS_WAV), "--output-audio",
                     str(tmp_path / "a.wav"), "--json", str(tmp_path / "a.json"), "--quiet",
                     "--extra-seconds", "0"]) == 0
        (tmp_path / "plain").touch()  # what open() makes under this umask: the reference
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(["a.wav", "a.json", "plain"], 0o666 & ~umask)
