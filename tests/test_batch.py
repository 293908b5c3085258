"""``voicechat batch`` run as a user runs it (a subprocess) on a NeMo fixture: a folder, a manifest and a
Full-Duplex-Bench root built here; each item against ``generate`` on the same file; resuming a killed run; bad items;
the benchmark's output.wav and output.json as its scoring scripts read them (docs/batch.md)."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf
import soxr

from conftest import HARNESS_WAV, NEMO, TESTS, default_sigint, sigint_ignored
import voicechat
from voicechat.__main__ import main
from voicechat.audio import to_int16
from voicechat.batch import (Item, benchmark_transcript, benchmark_wav, detect_format, interruption_end, natural_key,
                             timed_words)
from voicechat.errors import TestSetError
from voicechat.config import FRAME_SECONDS, GenerationConfig

MODEL = NEMO / "tiny_model"
SAME_ANSWER = ("first_frame", "prompt_frames", "input_frames", "text_tokens", "function_tokens", "audio_codes",
               "assistant_text", "text_pieces", "answer_sample_rate")
RUN_DEPENDENT = ("created", "wall_seconds", "timings_s")  # what two runs of the same item may differ in


def batch(*args, check_rc=None):
    p = subprocess.run([sys.executable, "-m", "voicechat", "batch", *map(str, args)], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(TESTS.parent)}, timeout=600)
    if check_rc is not None:
        assert p.returncode == check_rc, p.stderr[-3000:]
    return p


def summary(out):
    lines = [json.loads(line) for line in (out / "summary.jsonl").read_text().splitlines()]
    assert lines[-1]["totals"] is True
    return {line["id"]: line for line in lines[:-1]}, lines[-1]


def generated(tmp_path, audio, *options):
    """``generate --json`` on one file: (record, answer WAV bytes)."""
    n = len(list(tmp_path.glob("generate-*.json")))
    js, wav = tmp_path / f"generate-{n}.json", tmp_path / f"generate-{n}.wav"
    assert main(["generate", "--model", str(MODEL), "--audio", str(audio), "--output-audio", str(wav), "--json",
                 str(js), "--quiet", *map(str, options)]) == 0
    return json.loads(js.read_text()), wav.read_bytes()


def assert_same_answer(item_folder, reference):
    record, wav = reference
    mine = json.loads((item_folder / "conversation.json").read_text())
    assert {k: mine[k] for k in SAME_ANSWER} == {k: record[k] for k in SAME_ANSWER}
    assert (item_folder / "answer.wav").read_bytes() == wav
    assert mine["source"] == "batch" and mine["answer_file"] == "answer.wav"


def write_question(path, rate=16000, channels=1, subtype="PCM_16"):
    samples, source_rate = sf.read(HARNESS_WAV, dtype="float32")
    x = soxr.resample(samples, source_rate, rate) if rate != source_rate else samples
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.stack([x] * channels, axis=1) if channels > 1 else x, rate, subtype=subtype)
    return path


# ----------------------------------------------------------------------------------------------------------------
# a folder of recordings: each item is generate's answer; bad items are listed and skipped; a rerun skips what is done
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # runs voicechat batch as a process
def test_a_folder_answers_each_recording_as_generate_does_and_lists_the_bad_ones(tmp_path):
    recordings, out = tmp_path / "set", tmp_path / "out"
    write_question(recordings / "question.wav")
    write_question(recordings / "more" / "stereo 48k.flac", rate=48000, channels=2)
    (recordings / "broken.wav").write_text("not audio")
    (recordings / "silent").mkdir()
    sf.write(recordings / "silent" / "empty.wav", np.zeros(0, np.int16), 16000)
    sf.write(recordings / "nan.wav", np.full(8000, np.nan, np.float32), 16000, subtype="FLOAT")
    (recordings / "notes.txt").write_text("not a recording: ignored")

    p = batch(recordings, "--out", out, "--model", MODEL, "--extra-seconds", 0.4, check_rc=1)  # 1: some failed
    items, totals = summary(out)
    assert list(items) == ["broken", "more/stereo 48k", "nan", "question", "silent/empty"]
    reasons = {i: line.get("reason") for i, line in items.items() if line["status"] == "failed"}
    assert reasons["broken"].startswith("broken.wav is not a readable audio file (")
    assert reasons == {**reasons, "nan": "nan.wav contains NaN or infinite samples",
                       "silent/empty": "empty.wav is empty"} and len(reasons) == 3
    for reason in reasons.values():
        assert reason in p.stderr
    for name, audio in [("question", recordings / "question.wav"), ("more/stereo 48k", recordings / "more" /
                                                                     "stereo 48k.flac")]:
        assert items[name]["status"] == "done"
        assert_same_answer(out / "items" / name, generated(tmp_path, audio, "--extra-seconds", 0.4))
        record = json.loads((out / "items" / name / "conversation.json").read_text())
        assert items[name]["frames"] == record["first_frame"] + len(record["text_tokens"])
        assert items[name]["timeline_seconds"] == round(items[name]["frames"] * FRAME_SECONDS, 3)
    assert (totals["items"], totals["done"], totals["failed"], totals["skipped"]) == (5, 2, 3, 0)
    timeline = sum(items[n]["timeline_seconds"] for n in ("question", "more/stereo 48k"))
    assert totals["timeline_seconds"] == round(timeline, 3)
    assert "5 items: 2 answered, 0 already complete, 3 failed" in p.stdout
    # into a pipe the bar writes a line per item finished
    assert [line.split("]")[1].split("  ")[0] for line in p.stderr.splitlines() if "in flight" in line] == [
        f" {n}/5 items" for n in range(1, 6)]
    assert "ETA" in p.stderr and "RTF" in p.stderr and "\r" not in p.stderr
    assert not list(out.rglob("*.tmp"))

    before = {path: path.read_bytes() for path in (out / "items").rglob("*") if path.is_file()}
    p = batch(recordings, "--out", out, "--model", MODEL, "--extra-seconds", 0.4, "--quiet", check_rc=1)
    items, totals = summary(out)
    assert [items[n]["status"] for n in ("question", "more/stereo 48k")] == ["skipped", "skipped"]
    assert (totals["done"], totals["skipped"], totals["failed"]) == (0, 2, 3)
    assert {path: path.read_bytes() for path in (out / "items").rglob("*") if path.is_file()} == before
    assert "in flight" not in p.stderr  # --quiet: no bar


# ----------------------------------------------------------------------------------------------------------------
# a manifest: per-item prompt, seed, extra seconds and id
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # runs voicechat batch as a process
def test_a_failing_item_is_one_line_with_its_whole_reason_whatever_its_name_holds(tmp_path):
    """A reason was cut at its first line break: an item named "bad\\nname" failed with the reason "bad"."""
    recordings, out = tmp_path / "set", tmp_path / "out"
    recordings.mkdir()
    for name in ("bad\nname.wav", "tab\there.wav"):
        (recordings / name).write_text("not audio")
    p = batch(recordings, "--out", out, "--model", MODEL, check_rc=1)
    items, totals = summary(out)
    assert totals["failed"] == 2
    for item_id, shown in [("bad\nname", "bad\\nname"), ("tab\there", "tab\\there")]:
        reason = items[item_id]["reason"]
        assert reason.startswith(f"{shown}.wav is not a readable audio file (") and reason.isprintable()
        assert f"{shown}: failed: {reason}" in p.stderr.splitlines()  # the progress line, and the summary's:
        assert f"  failed {shown}: {reason}" in p.stdout.splitlines() + p.stderr.splitlines()


@pytest.mark.slow  # runs voicechat batch as a process
def test_a_manifest_gives_each_item_its_own_settings(tmp_path):
    audio = write_question(tmp_path / "audio" / "q.wav")
    manifest, out = tmp_path / "set.jsonl", tmp_path / "out"
    (tmp_path / "voice.wav").write_bytes((NEMO / "speaker_22k.wav").read_bytes())  # beside the manifest
    manifest.write_text("\n".join([
        json.dumps({"audio": "audio/q.wav", "id": "brief", "system_prompt": "Be brief.", "seed": 3,
                    "extra_seconds": 0.8, "speaker": "voice.wav"}),
        "",
        json.dumps({"audio": "audio/q.wav", "id": "plain"}),
        json.dumps({"audio": "audio/missing.wav"}),
    ]) + "\n")
    batch(manifest, "--out", out, "--model", MODEL, "--extra-seconds", 0.4, "--seed", 1, "--quiet", check_rc=1)
    items, _ = summary(out)
    assert {i: line["status"] for i, line in items.items()} == {"brief": "done", "plain": "done",
                                                                "audio/missing": "failed"}
    assert items["audio/missing"]["reason"] == "missing.wav does not exist"
    assert_same_answer(out / "items" / "brief", generated(tmp_path, audio, "--system-prompt", "Be brief.", "--seed", 3,
                                                          "--extra-seconds", 0.8, "--speaker", tmp_path / "voice.wav"))
    assert_same_answer(out / "items" / "plain", generated(tmp_path, audio, "--seed", 1, "--extra-seconds", 0.4))
    record = json.loads((out / "items" / "brief" / "conversation.json").read_text())
    assert (record["system_prompt"], record["seed"], record["generation_config"]["extra_seconds"]) == (
        "Be brief.", 3, 0.8)


# ----------------------------------------------------------------------------------------------------------------
# many conversations at once: each item still generate's answer
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # runs voicechat batch as a process
def test_many_conversations_at_once_each_answer_as_generate_does(tmp_path):
    samples, rate = sf.read(HARNESS_WAV, dtype="float32")
    (tmp_path / "audio").mkdir()
    lines, options = [], []
    for k in range(6):  # other lengths, prompts, seeds and timelines: rows join and leave the group at other ticks
        sf.write(tmp_path / "audio" / f"q{k}.wav", samples[:len(samples) - 2400 * k], rate)
        prompt = {"system_prompt": "Be brief."} if k % 3 == 0 else {}
        extra = {"extra_seconds": 0.4 * k} if k % 2 else {}
        lines.append({"audio": f"audio/q{k}.wav", "seed": k, **prompt, **extra})
        options.append(["--seed", k, "--max-extra-seconds", 1.5, *[v for key, value in {**prompt, **extra}.items()
                                                                   for v in (f"--{key.replace('_', '-')}", value)]])
    lines.insert(3, {"audio": "audio/missing.wav"})
    manifest, out = tmp_path / "set.jsonl", tmp_path / "out"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    batch(manifest, "--out", out, "--model", MODEL, "--sessions", 4, "--max-extra-seconds", 1.5, "--quiet",
          check_rc=1)
    items, totals = summary(out)
    assert list(items) == ["audio/q0", "audio/q1", "audio/q2", "audio/missing", "audio/q3", "audio/q4", "audio/q5"]
    assert (totals["done"], totals["failed"]) == (6, 1)
    for k in range(6):
        assert_same_answer(out / "items" / "audio" / f"q{k}", generated(tmp_path, tmp_path / "audio" / f"q{k}.wav",
                                                                        *options[k]))


# ----------------------------------------------------------------------------------------------------------------
# a Full-Duplex-Bench root
# ----------------------------------------------------------------------------------------------------------------
def assert_benchmark_chunk_format(transcript: dict) -> None:
    """output.json as the benchmark's example files hold it and its scoring reads it (eval_pause_handling.py,
    eval_smooth_turn_taking.py: ``chunks``, each chunk's ``timestamp`` [start, end] in seconds, the first chunk's
    start and the last one's end); the text as get_transcript/asr.py joins it."""
    assert set(transcript) == {"text", "chunks"} and isinstance(transcript["text"], str)
    for chunk in transcript["chunks"]:
        assert set(chunk) == {"text", "timestamp"} and chunk["text"] and chunk["text"].split() == [chunk["text"]]
        start, end = chunk["timestamp"]
        assert isinstance(start, float) and isinstance(end, float) and 0 <= start <= end
    starts = [chunk["timestamp"][0] for chunk in transcript["chunks"]]
    assert starts == sorted(starts)
    assert transcript["text"] == " ".join(chunk["text"] for chunk in transcript["chunks"])


@pytest.mark.slow  # runs voicechat batch as a process
def test_a_full_duplex_bench_root_is_scored_as_the_benchmark_reads_it(tmp_path):
    root, out = tmp_path / "candor_pause_handling", tmp_path / "out"
    write_question(root / "1" / "input.wav", rate=48000)  # the benchmark's pause-handling example is 48 kHz
    write_question(root / "10" / "input.wav")
    write_question(root / "2" / "input.wav", rate=24000)
    (root / "1" / "pause.json").write_text('[{"text": "[PAUSE]", "timestamp": [1.0, 1.5]}]')
    (root / "10" / "turn_taking.json").write_text('[{"text": "[TURN-TAKING]", "timestamp": [2.0, 2.1]}]')
    (root / "2" / "interrupt.json").write_text('[{"context": "c", "interrupt": "i", "timestamp": [0.5, 1.2]}]')
    (root / "1" / "output.json").write_text('{"text": "an earlier model", "chunks": []}')  # not carried over
    (root / "2" / "rating.json").write_text('{"analysis": "an earlier model", "rating": 4}')  # neither
    (root / "README.md").write_text("the benchmark's roots may hold notes")
    assert detect_format(root) == "fdb"

    p = batch(root, "--out", out, "--model", MODEL, "--system-prompt", "Be brief.", check_rc=0)
    assert "3 items (fdb)" in p.stderr
    items, _ = summary(out)
    assert list(items) == ["1", "2", "10"] and all(line["status"] == "done" for line in items.values())
    # what the scoring scripts list: every entry of the root is a sample folder, holding files only
    scored = out / "items"
    assert sorted(p.name for p in scored.iterdir()) == ["1", "10", "2"]
    assert all(f.is_file() for sample in scored.iterdir() for f in sample.iterdir())
    assert (scored / "1" / "pause.json").read_bytes() == (root / "1" / "pause.json").read_bytes()
    assert (scored / "10" / "turn_taking.json").read_bytes() == (root / "10" / "turn_taking.json").read_bytes()
    assert sorted(f.name for f in (scored / "2").iterdir()) == [
        "answer.wav", "conversation.json", "interrupt.json", "output.json", "output.wav"]
    model = voicechat.load(MODEL)
    for sample in ("1", "2", "10"):
        folder, source = scored / sample, root / sample / "input.wav"
        result = model.generate(source, system_prompt="Be brief.", config=GenerationConfig(extra_seconds=0.0))
        record = json.loads((folder / "conversation.json").read_text())
        assert record["text_tokens"] == result.text_tokens.tolist()
        assert record["audio_codes"] == result.audio_codes.tolist()
        assert record["first_frame"] == result.first_frame == result.prompt_frames > 0
        # output.wav: 16 kHz mono 16-bit, exactly as long as input.wav: the answer from the first position that
        # hears the recording, resampled, then cut or padded with silence
        info, source_info = sf.info(folder / "output.wav"), sf.info(source)
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert info.frames == round(source_info.frames * 16000 / source_info.samplerate)
        expected = soxr.resample(result.audio, result.sample_rate, 16000)[:info.frames]
        output = sf.read(folder / "output.wav", dtype="int16")[0]
        np.testing.assert_array_equal(output[:len(expected)], to_int16(expected))
        assert not output[len(expected):].any()
        # output.json: the chunk format, words at the frames of their tokens, in seconds from the recording's start
        transcript = json.loads((folder / "output.json").read_text())
        assert_benchmark_chunk_format(transcript)
        assert transcript["chunks"], "the tiny model emits a token at most positions"
        heard_from, seconds = record["prompt_frames"], source_info.duration
        pieces = {frame: text for frame, _, text in record["text_pieces"]}
        assert record["turn_starts"] == record["turn_ends"] == []  # this random model opens no turn: words = split
        words = "".join(pieces.values()).split()
        begun = "".join(text for frame, text in pieces.items() if (frame - heard_from) * FRAME_SECONDS < seconds)
        if sample == "2":  # a user interruption: only the words from its end on, as the benchmark's ASR pass
            assert min(chunk["timestamp"][0] for chunk in transcript["chunks"]) >= 1.2
        else:
            assert [chunk["text"] for chunk in transcript["chunks"]] == words[:len(begun.split())]
        for chunk in transcript["chunks"]:
            start, end = chunk["timestamp"]
            first, last = heard_from + round(start / FRAME_SECONDS), heard_from + round(end / FRAME_SECONDS) - 1
            assert chunk["text"][0] in pieces[first]
            assert end == round(seconds, 3) or chunk["text"][-1] in pieces[last]
            assert end <= round(seconds, 3)


@pytest.mark.slow  # runs voicechat batch as a process
def test_the_demo_model_answers_a_set_without_a_checkpoint(tmp_path):
    root, out = tmp_path / "root", tmp_path / "out"
    write_question(root / "1" / "input.wav")
    batch(root, "--out", out, "--demo", "--quiet", check_rc=0)
    record = json.loads((out / "items" / "1" / "conversation.json").read_text())
    assert (record["model"], record["demo_model"]) == ("voicechat-demo", True)
    assert_benchmark_chunk_format(json.loads((out / "items" / "1" / "output.json").read_text()))


# ----------------------------------------------------------------------------------------------------------------
# a killed run resumes and ends with an uninterrupted run's outputs
# ----------------------------------------------------------------------------------------------------------------
def outputs(out):
    """Every output file's content; records without what differs between two runs of the same item."""
    files = {}
    for path in sorted((out / "items").rglob("*")):
        if path.name == "conversation.json":
            files[path.relative_to(out)] = {k: v for k, v in json.loads(path.read_text()).items()
                                            if k not in RUN_DEPENDENT}
        elif path.is_file():
            files[path.relative_to(out)] = path.read_bytes()
    return files


KILL_ARGS = ["--model", MODEL, "--extra-seconds", 3, "--quiet"]


@pytest.fixture(scope="module")
def five_recordings(tmp_path_factory):
    """Five recordings and their uninterrupted run."""
    root = tmp_path_factory.mktemp("five")
    for i in range(5):
        write_question(root / "set" / f"q{i}.wav")
    batch(root / "set", "--out", root / "whole", *KILL_ARGS, check_rc=0)
    return root / "set", root / "whole"


@pytest.mark.slow  # runs voicechat batch as a process
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_a_stopped_run_resumes_and_ends_as_an_uninterrupted_run(sig, five_recordings, tmp_path):
    recordings, whole = five_recordings
    out = tmp_path / "stopped"
    with sigint_ignored():  # started as by a runner in the background: the child still stops on Ctrl+C
        run = subprocess.Popen([sys.executable, "-m", "voicechat", "batch", str(recordings), "--out", str(out),
                                *map(str, KILL_ARGS)], env={**os.environ, "PYTHONPATH": str(TESTS.parent)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    while not (out / "items" / "q1" / "conversation.json").exists() and run.poll() is None:
        time.sleep(0.01)
    run.send_signal(sig)
    err = run.communicate()[1]
    complete = sorted(p.parent.name for p in (out / "items").glob("*/conversation.json"))
    assert complete[:2] == ["q0", "q1"] and len(complete) < 5, "stopped after two items, before the last"
    if sig == signal.SIGINT:  # Ctrl+C: exit 130 (128 + SIGINT, the shell's convention), nothing half-written left
        assert run.returncode == 130 and err.endswith("interrupted\n")
        assert not list(out.rglob("*.tmp"))
        listed = list(summary(out)[0])  # the items finished before the stop (the last one's line may not be in)
        assert listed == complete[:len(listed)] and len(listed) >= len(complete) - 1

    batch(recordings, "--out", out, *KILL_ARGS, check_rc=0)
    items, totals = summary(out)
    assert [items[f"q{i}"]["status"] for i in range(len(complete))] == ["skipped"] * len(complete)
    assert totals["done"] == 5 - len(complete)
    assert outputs(out) == outputs(whole)
    assert not list(out.rglob("*.tmp"))


# ----------------------------------------------------------------------------------------------------------------
# bad usage: one line, exit 2, before the model loads (a missing model would be exit 1)
# ----------------------------------------------------------------------------------------------------------------
def manifest(text: str):
    """Writes the manifest m.jsonl holding ``text`` into a folder, and gives its path."""
    return lambda p: (p / "m.jsonl").write_text(text) and p / "m.jsonl"


@pytest.mark.parametrize("make, options, words", [
    (lambda p: p / "nowhere", [], "nowhere: no such file or folder"),
    (lambda p: (p / "empty").mkdir() or p / "empty", [], "holds no recordings (folder format)"),
    (manifest('{"audio": "a.wav"}\n{"audio": \n'), [], "m.jsonl line 2 is not JSON"),
    (manifest('{"audio": "a.wav", "voice": "x"}\n'), [], "m.jsonl line 1: unknown key 'voice'"),
    (manifest('{"audio": "a.wav", "seed": "3"}\n'), [], "m.jsonl line 1: seed must be a whole number"),
    (manifest('["a.wav"]\n'), [], 'give an object with "audio"'),
    (manifest('{"audio": "a.wav", "seed": -1}\n'), [],
     "m.jsonl line 1: the seed must be a whole number from 0 to 2^64 - 1 (got -1)"),
    (manifest('{"audio": "a.wav", "extra_seconds": -2}\n'), [],
     "m.jsonl line 1: extra seconds must be a finite number at least 0"),
    (lambda p: write_question(p / "s" / "q.wav").parent, ["--seed", "-3"], "the seed must be a whole number"),
    (lambda p: (p / "m.jsonl").write_bytes(b"\xff\xfe\x00") and p / "m.jsonl", [], "m.jsonl is not a text file"),
    (lambda p: write_question(p / "q.wav"), [], "q.wav is one recording; give a folder or a manifest"),
    (manifest('{"audio": "a.wav", "id": "../up"}\n'), [], "the id '../up' must be a relative name"),
    (manifest('{"audio": "a.wav", "id": "."}\n'), [], "the id '.' must be a relative name"),
    (manifest('{"audio": "a.wav", "id": "/abs"}\n'), [], "the id '/abs' must be a relative name"),
    (lambda p: write_question(p / "s" / "q.wav") and write_question(p / "s" / "q.flac", subtype="PCM_16").parent,
     [], "two items have the id 'q' (q.flac and q.wav)"),
    (lambda p: write_question(p / "s" / "q.wav").parent, ["--sessions", "0"], "--sessions 0: give 1 or more"),
    (lambda p: write_question(p / "r" / "1" / "input.wav").parent.parent, ["--extra-seconds", "1"],
     "--extra-seconds and --reference do not apply"),
    (lambda p: write_question(p / "s" / "q.wav").parent, ["--out", "/nonexistent-folder/out"],
     "the folder /nonexistent-folder does not exist"),
])
def test_bad_usage_exits_2_before_the_model_loads(make, options, words, tmp_path, capsys):
    source = make(tmp_path)
    out = [] if "--out" in options else ["--out", str(tmp_path / "out")]
    assert main(["batch", str(source), *out, "--model", str(tmp_path / "no model"), *options]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_an_output_folder_of_another_run_is_refused(tmp_path, capsys):
    source = write_question(tmp_path / "s" / "q.wav").parent
    args = ["batch", str(source), "--out", str(tmp_path / "out"), "--model", str(tmp_path / "no model")]
    assert main(args) == 1  # run.json written, then the model is missing
    assert main(args) == 1  # the same settings: a resume
    capsys.readouterr()
    assert main([*args, "--seed", "5"]) == 2
    assert "holds a run with a different seed; give another --out" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# the pieces, on hand-made cases
# ----------------------------------------------------------------------------------------------------------------
def test_words_are_runs_of_non_space_text_with_their_first_and_last_frames():
    pieces = [(5, " Hel"), (6, "lo"), (8, ","), (9, " wor"), (10, "ld a"), (14, "gain"), (20, "New"), (21, " turn")]
    assert timed_words(pieces, turn_frames=[16, 18]) == [
        ("Hello,", 5, 8), ("world", 9, 10), ("again", 10, 14), ("New", 20, 20), ("turn", 21, 21)]
    transcript = benchmark_transcript(pieces, [16, 18], first_input_frame=4, input_seconds=1.3)
    # frame f starts at (f - 4) x 80 ms; "New" ends at the input's end, "turn" starts after it
    assert transcript == {"text": "Hello, world again New", "chunks": [
        {"text": "Hello,", "timestamp": [0.08, 0.4]}, {"text": "world", "timestamp": [0.4, 0.56]},
        {"text": "again", "timestamp": [0.48, 0.88]}, {"text": "New", "timestamp": [1.28, 1.3]}]}
    assert benchmark_transcript([], [], 0, 1.0) == {"text": "", "chunks": []}
    assert benchmark_transcript(pieces, [16, 18], 4, 1.3, words_from=0.45)["text"] == "again New"


def test_a_user_interruption_sample_gives_where_its_interruption_ends(tmp_path):
    (tmp_path / "interrupt.json").write_text('[{"context": "c", "interrupt": "i", "timestamp": [10.53, 13.144]}]')
    (tmp_path / "pause.json").write_text('[{"text": "[PAUSE]", "timestamp": [3.3, 4.0]}]')
    item = Item("1", tmp_path / "input.wav", annotations=(tmp_path / "interrupt.json", tmp_path / "pause.json"))
    assert interruption_end(item) == 13.144
    assert interruption_end(Item("1", tmp_path / "input.wav", annotations=(tmp_path / "pause.json",))) == 0.0
    (tmp_path / "interrupt.json").write_text('{"timestamp": 3}')
    with pytest.raises(TestSetError, match=r"^1/interrupt.json holds no \[\{"):
        interruption_end(item)


def test_the_benchmark_wav_is_the_inputs_timeline_at_16_khz():
    rate, frame = 22050, 1764
    audio = np.arange(10 * frame, dtype=np.float32) / (10 * frame)
    x = benchmark_wav(audio, rate, input_seconds=0.5)
    assert len(x) == 8000
    np.testing.assert_array_equal(x, soxr.resample(audio, rate, 16000)[:8000])
    longer = benchmark_wav(audio, rate, input_seconds=1.0)
    assert len(longer) == 16000 and not longer[len(soxr.resample(audio, rate, 16000)):].any()


def test_sample_folders_sort_as_numbers():
    assert sorted(["10", "2", "1", "a2", "a10"], key=natural_key) == ["1", "2", "10", "a2", "a10"]
