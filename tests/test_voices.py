"""The voice library (voicechat/voices.py, docs/voices.md): a voice added from a recording speaks as the recording
given as ``speaker`` does (and as NVIDIA's NeMo does with that WAV), bad recordings are refused in one line, names
are managed as the file system needs, previews say the fixed sentence."""

import json
import os
import subprocess
import sys
import threading
from functools import lru_cache

import numpy as np
import pytest
import soundfile as sf

from conftest import HARNESS_TTS, HARNESS_WAV, NEMO, TESTS
from test_app import guarded  # noqa: F401  (the app started with --api-key)
import voicechat
from voicechat import AudioInputError, GenerationConfig
from voicechat.voices import (DEFAULT, KEEP_SILENCE_SECONDS, PREVIEW_FRAMES_PER_TOKEN, Voice, VoiceError,
                              VoiceLibrary, audio_prompt, checkpoint_voices, preview, preview_script)

ROOT = TESTS.parent
SPEAKER_WAV = NEMO / "speaker_22k.wav"
PROMPT = "You are a helpful assistant."
GREEDY_TTS = {f"tts_{k}": v for k, v in HARNESS_TTS["greedy"].items()}
GREEDY = GenerationConfig(**GREEDY_TTS)


@lru_cache(maxsize=None)
def model(name: str):
    return voicechat.load(NEMO / name)


def library(tmp_path, m) -> VoiceLibrary:
    return VoiceLibrary(tmp_path / "voices", checkpoint_voices(m))


def speech(seconds: float, rate: int = 22050, level: float = 0.3, seed: int = 0) -> np.ndarray:
    """A voiced sound: a buzz at 150 Hz (more with ``seed``) with harmonics, amplitude-modulated like syllables."""
    t = np.arange(round(seconds * rate)) / rate
    buzz = sum(np.sin(2 * np.pi * (150 + 20 * seed) * k * t) / k for k in range(1, 6))
    syllables = 0.6 + 0.4 * np.sin(2 * np.pi * 4 * t)
    return (level * buzz * syllables / 2.3).astype(np.float32)


@pytest.mark.nemo
def test_a_voice_from_the_speaker_wav_gives_nemos_answer(tmp_path):
    """tiny_model's NeMo oracle was made with speaker_22k.wav as the speaker: the library's voice of that WAV gives
    NeMo's ids and codes at every position."""
    m = model("tiny_model")
    voice = library(tmp_path, m).add("Fixture", SPEAKER_WAV, config=m.config)
    ref = dict(np.load(NEMO / "greedy" / "reference.npz"))
    r = m._generate(HARNESS_WAV, system_prompt=PROMPT, speaker=voice,
                    config=GenerationConfig(reference=True, **GREEDY_TTS))
    assert np.array_equal(r.text_tokens, ref["stt.gen_text_full"][0])
    assert np.array_equal(r.audio_codes, ref["out.gen_audio_codes"][0])


def test_a_voice_added_from_a_wav_speaks_as_the_wav(tmp_path):
    m = model("tiny_model_aria")
    lib = library(tmp_path, m)
    added = lib.add("Fixture", SPEAKER_WAV, config=m.config)
    again = VoiceLibrary(lib.folder, lib.speakers).get("Fixture")  # read back from the folder, as after a restart
    assert np.array_equal(again.prompt, added.prompt) and again.sample_rate == 22050
    wav, rate = sf.read(SPEAKER_WAV, dtype="float32")
    assert np.array_equal(again.prompt, wav[:37 * 1764])  # no long silence to cut; the 3 s the TTS reads
    by_wav = m.generate(HARNESS_WAV, system_prompt=PROMPT, speaker=str(SPEAKER_WAV), config=GREEDY)
    by_voice = m.generate(HARNESS_WAV, system_prompt=PROMPT, speaker=again, config=GREEDY)
    assert np.array_equal(by_voice.text_tokens, by_wav.text_tokens)
    assert np.array_equal(by_voice.audio_codes, by_wav.audio_codes)
    aria = m.generate(HARNESS_WAV, system_prompt=PROMPT, config=GREEDY)
    assert not np.array_equal(aria.audio_codes, by_voice.audio_codes)  # the voice is heard
    assert (by_voice.settings["voice"], aria.settings["voice"], by_wav.settings["voice"]) == \
        ("Fixture", "Aria", "speaker_22k.wav")


def test_seeded_runs_with_a_voice_repeat_and_its_prompt_is_encoded_once(tmp_path):
    m = model("tiny_model_aria")
    voice = library(tmp_path, m).add("Fixture", SPEAKER_WAV, config=m.config)
    encoded = len(m._warmup_codes)
    runs = [m.generate(HARNESS_WAV, seed=7, speaker=voice) for _ in range(2)]  # the checkpoint's sampled TTS
    assert len(m._warmup_codes) <= encoded + 1
    assert np.array_equal(runs[0].audio_codes, runs[1].audio_codes) and np.array_equal(runs[0].audio, runs[1].audio)
    other = m.generate(HARNESS_WAV, seed=8, speaker=voice)
    assert not np.array_equal(other.audio_codes, runs[0].audio_codes)


def test_long_silences_at_the_ends_are_cut(tmp_path):
    rate = 22050
    sound = speech(2.5)
    x = np.concatenate([np.zeros(rate), sound, np.zeros(2 * rate)]).astype(np.float32)
    prompt = audio_prompt(x, rate, model("tiny_model_aria").config)
    keep = round(KEEP_SILENCE_SECONDS * rate)
    assert np.array_equal(prompt, x[rate - keep:rate + len(sound) + keep])  # 0.2 s kept each side, under 3 s


def test_a_recording_at_another_rate_is_resampled(tmp_path):
    m = model("tiny_model_aria")
    sf.write(tmp_path / "me.flac", speech(4.0, 48000), 48000)
    voice = library(tmp_path, m).add("Me", tmp_path / "me.flac", config=m.config)
    assert voice.sample_rate == 22050 and len(voice.prompt) == 37 * 1764 and voice.source == "me.flac"


@pytest.mark.parametrize("samples, rate, message", [
    (np.zeros(22050 * 4, np.float32), 22050, "the recording is silent"),
    (np.full(22050 * 4, 1e-4, np.float32), 22050, "the recording is silent"),
    (np.concatenate([np.zeros(22050), speech(1.2), np.zeros(22050)]), 22050,
     "holds 1.6 s of sound; a voice needs at least 2 s"),  # 1.2 s, and the 0.2 s kept on each side
    (np.clip(speech(4.0, level=1.5), -1, 1), 22050, "the recording is clipped"),
    (np.full(100, np.nan, np.float32), 22050, "NaN"),
    (np.zeros(0, np.float32), 16000, "empty"),
])
def test_bad_recordings_are_refused_in_one_line(tmp_path, samples, rate, message):
    m = model("tiny_model_aria")
    lib = library(tmp_path, m)
    with pytest.raises(AudioInputError, match=message) as e:
        lib.add("Bad", samples, rate, config=m.config)
    assert "\n" not in str(e.value)
    assert lib.names() == ["Aria"]  # nothing stored


def test_names_list_rename_remove(tmp_path):
    m = model("tiny_model_aria")
    lib = library(tmp_path, m)
    lib.add("Maya", speech(3.0), 22050, config=m.config, source="maya.wav")
    lib.add("Bo", speech(3.0, seed=1), 22050, config=m.config)
    assert lib.names() == ["Aria", "Maya", "Bo"]  # the checkpoint's first, then in the order added
    assert lib.get("Maya").describe().startswith("Maya (added 20") and "maya.wav" in lib.get("Maya").describe()
    for taken in ("maya", "ARIA", DEFAULT):
        with pytest.raises(VoiceError, match="already a voice called"):
            lib.add(taken, speech(3.0), 22050, config=m.config)
    for bad in ("../etc", "a/b", "", ".hidden", "x" * 33, "/tmp/speaker.wav"):
        with pytest.raises(VoiceError, match="is not a voice name"):
            lib.add(bad, speech(3.0), 22050, config=m.config)
    renamed = lib.rename("Maya", "Maya Two")
    assert lib.names() == ["Aria", "Maya Two", "Bo"] and renamed.source == "maya.wav"
    assert np.array_equal(lib.get("Maya Two").prompt, renamed.prompt)
    with pytest.raises(VoiceError, match="no voice called 'Maya'; the voices are: Aria, Maya Two, Bo"):
        lib.get("Maya")
    with pytest.raises(VoiceError, match="the checkpoint's voice"):
        lib.remove("Aria")
    lib.remove("Bo")
    assert lib.names() == ["Aria", "Maya Two"] and not (lib.folder / "Bo").exists()
    assert lib.get("Aria").speaker == "Aria" and lib.get(DEFAULT).speaker is None


def test_a_name_is_one_name_in_any_case(tmp_path):
    """Names were compared case-folded only when taken: `rename ss ß` passed (ß folds to ss) and made a voice no
    name could reach; "maya" did not find "Maya"."""
    m = model("tiny_model_aria")
    lib = library(tmp_path, m)
    lib.add("ss", speech(3.0), 22050, config=m.config)
    with pytest.raises(VoiceError, match="'ß' is not a voice name"):
        lib.rename("ss", "ß")
    lib.add("Maya", speech(3.0, seed=1), 22050, config=m.config)
    assert lib.get("MAYA").name == "Maya" and lib.get("aria").speaker == "Aria" and lib.get("Default").builtin
    assert lib.rename("maya", "MAYA").name == "MAYA" and lib.names() == ["Aria", "ss", "MAYA"]  # its case changed
    with pytest.raises(VoiceError, match="there is already a voice called ss"):
        lib.rename("maya", "SS")
    lib.remove("SS")
    lib.remove("maya")
    assert lib.names() == ["Aria"] and sorted(p.name for p in lib.folder.iterdir() if p.is_dir()) == []


def test_eight_adds_of_one_name_at_once_one_wins(tmp_path):
    """Eight threads adding raceN / RACEN: FileExistsError with the server's path came back, and both names ended up
    on disk."""
    m = model("tiny_model_aria")
    lib = library(tmp_path, m)
    start = threading.Barrier(8)
    outcomes = [None] * 8

    def add(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = lib.add("raceN" if i % 2 else "RACEN", speech(3.0, seed=i), 22050, config=m.config).name
        except Exception as e:  # noqa: BLE001 (the test looks at what each thread got)
            outcomes[i] = e

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    won = [o for o in outcomes if isinstance(o, str)]
    lost = [o for o in outcomes if not isinstance(o, str)]
    assert len(won) == 1 and len(lost) == 7, outcomes
    for error in lost:
        assert type(error) is VoiceError and str(error) == f"there is already a voice called {won[0]}; choose " \
            "another name" and str(tmp_path) not in str(error)
    assert [p.name for p in lib.folder.iterdir() if p.is_dir()] == won and lib.names() == ["Aria", won[0]]


def test_a_voice_past_its_time_limit_is_refused_at_the_limit_and_never_stored(tmp_path):
    """A server makes a voice on a thread within a time limit (docs/limits.md §2). A real recording near the 600 s
    bound, at 48 kHz, takes about a second to decode, check and resample: with a limit of 0.05 s the caller gets
    one line at the limit, while the thread still works; when the thread ends, nothing is stored. With the server's
    limit the same recording makes the voice."""
    import asyncio

    from voicechat.limits import WORK_SECONDS, TimedOut, TimeLimit
    from voicechat.voices import LOCK_FILE

    m = model("tiny_model_aria")
    lib = library(tmp_path, m)
    recording = tmp_path / "ten minutes.wav"
    sf.write(str(recording), speech(590.0, rate=48000), 48000, subtype="PCM_16")

    async def add(seconds: float) -> tuple:
        limit = TimeLimit("making the voice", seconds)
        try:
            return await limit.run(lambda: lib.add("Long", recording, config=m.config, keep=limit.keep)), None
        except TimedOut as e:
            return e, (tmp_path / "voices" / LOCK_FILE).exists()  # has the thread come to storing it yet?

    error, stored_yet = asyncio.run(add(0.05))  # asyncio.run ends once the thread has: its late result dropped
    assert str(error) == "making the voice took more than 0.05 s; nothing was kept" and stored_yet is False
    assert (tmp_path / "voices" / LOCK_FILE).exists()  # the thread came to storing it, and was told not to
    assert lib.names() == ["Aria"] and [p for p in lib.folder.iterdir() if p.is_dir()] == []
    voice, _ = asyncio.run(add(WORK_SECONDS))
    assert voice.name == "Long" and lib.names() == ["Aria", "Long"]


def test_a_long_upload_name_is_cut_not_an_error(tmp_path):
    from voicechat.webui.uploads import MAX_NAME_BYTES, upload_name

    assert upload_name("é" * 300 + ".m4a") == "é" * 58 + ".m4a"  # 116 + 4 bytes
    assert upload_name("x" * 300 + ".wav") == "x" * (MAX_NAME_BYTES - 4) + ".wav"
    assert upload_name("../../etc/passwd") == "passwd" and upload_name("a\x00b\n.wav") == "ab.wav"
    assert upload_name("..") == upload_name("") == "recording" and upload_name("x." + "y" * 300) == "x." + "y" * 118


def test_checkpoint_voices_put_the_default_first():
    assert checkpoint_voices(model("tiny_model_aria")) == ["Aria"]
    assert checkpoint_voices(model("tiny_model")) == [DEFAULT]  # its voice is a reference WAV
    assert model("tiny_model").voice_name(None) == DEFAULT


def test_the_preview_script_spaces_the_sentence():
    script, positions = preview_script([11, 12], bos_id=1, eos_id=2, pad_id=0)
    ids = [script(t)[0] for t in range(positions)]
    every = PREVIEW_FRAMES_PER_TOKEN
    assert ids[:1 + 4 * every] == [0] + sum(([i] + [0] * (every - 1) for i in (1, 11, 12, 2)), [])
    assert set(ids[1 + 4 * every:]) == {0}


def test_a_preview_says_the_sentence_in_the_voice(tmp_path):
    m = model("tiny_model_aria")
    voice = library(tmp_path, m).add("Fixture", SPEAKER_WAV, config=m.config)
    sentence = "Hello there."
    heard = preview(m, voice, sentence)
    script, positions = preview_script(m.tokenizer.encode(sentence), m.config.bos_id, m.config.eos_id, m.config.pad_id)
    assert heard.text_tokens.tolist() == [script(t)[0] for t in range(len(heard.text_tokens))]
    assert len(heard.text_tokens) >= positions - 1 and heard.settings["voice"] == "Fixture"
    assert heard.audio.size > 0
    aria = preview(m, Voice("Aria"), sentence)
    assert not np.array_equal(aria.audio_codes, heard.audio_codes)


# ----------------------------------------------------------------------------------------------------------------
# the command line, run as a user runs it
# ----------------------------------------------------------------------------------------------------------------
def cli(*args, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VOICECHAT_VOICES", None)
    return subprocess.run([sys.executable, "-m", "voicechat", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_voices_command_lists_adds_renames_removes(tmp_path):
    aria = ["--model", str(NEMO / "tiny_model_aria")]
    sf.write(tmp_path / "quiet.wav", np.zeros(22050 * 4, np.float32), 22050)
    steps = [(["list"], 0, "Aria (the checkpoint's voice)\n", ""),
             (["add", "Maya", str(SPEAKER_WAV)], 0, "outputs/voices: Maya (added 20", ""),
             (["add", "Quiet", "quiet.wav"], 2, "",
              "error: the recording is silent (its loudest 20 ms is at -200 dBFS)"),
             (["add", "maya", str(SPEAKER_WAV)], 2, "", "error: there is already a voice called Maya"),
             (["add", "../x", str(SPEAKER_WAV)], 2, "", "error: '../x' is not a voice name"),
             (["rename", "Maya", "Maya Two"], 0, "renamed Maya to Maya Two\n", ""),
             (["remove", "Aria"], 2, "", "error: Aria is the checkpoint's voice"),
             (["list"], 0, "Aria (the checkpoint's voice)\nMaya Two (added 20", ""),
             (["remove", "Nobody"], 2, "", "error: no voice called 'Nobody'; the voices are: Aria, Maya Two\n")]
    for args, code, out, err in steps:
        p = cli("voices", args[0], *aria, *args[1:], cwd=tmp_path)
        assert (p.returncode, p.stdout[:len(out)], p.stderr[:len(err)]) == (code, out, err), (args, p.stderr)
        assert len(p.stderr.splitlines()) <= 1  # one line, no traceback
    assert (tmp_path / "outputs" / "voices" / "Maya Two" / "prompt.wav").is_file()
    p = cli("voices", "remove", *aria, "Maya Two", cwd=tmp_path)
    assert p.returncode == 0 and not (tmp_path / "outputs" / "voices" / "Maya Two").exists()
    p = cli("voices", "list", "--model", str(NEMO / "tiny_model"), cwd=tmp_path)  # its voice is a reference WAV
    assert (p.returncode, p.stdout) == (0, "default (the checkpoint's voice)\n")


def test_generate_with_a_voice_writes_what_the_wav_speaker_writes(tmp_path):
    aria = ["--model", str(NEMO / "tiny_model_aria")]
    library = tmp_path / "lib"
    added = cli("voices", "add", *aria, "--voices", str(library), "Fixture", str(SPEAKER_WAV), cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    runs = {"voice": ["--voice", "Fixture", "--voices", str(library)], "wav": ["--speaker", str(SPEAKER_WAV)]}
    for name, args in runs.items():
        p = cli("generate", *aria, "--audio", str(HARNESS_WAV), "--extra-seconds", "0.4", "--quiet", "--output-audio",
                f"{name}.wav", "--json", f"{name}.json", *args, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
    assert (tmp_path / "voice.wav").read_bytes() == (tmp_path / "wav.wav").read_bytes()
    records = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in runs}
    assert records["voice"]["audio_codes"] == records["wav"]["audio_codes"]
    assert (records["voice"]["voice"], records["wav"]["voice"]) == ("Fixture", "speaker_22k.wav")
    p = cli("generate", *aria, "--audio", str(HARNESS_WAV), "--voice", "Nobody", "--voices", str(library),
            cwd=tmp_path)
    assert p.returncode == 2 and p.stderr == "error: no voice called 'Nobody'; the voices are: Aria, Fixture\n"


def test_live_with_a_voice_gives_the_sessions_codes_in_that_voice(tmp_path):
    """``live --voice`` with a recording as the microphone: the ids and codes of one session in the same voice fed
    the same samples, and the saved record names the voice."""
    m = model("tiny_model_aria")
    library = tmp_path / "lib"
    voice = VoiceLibrary(library, checkpoint_voices(m)).add("Fixture", SPEAKER_WAV, config=m.config)
    p = cli("live", "--model", str(NEMO / "tiny_model_aria"), "--input-file", str(HARNESS_WAV), "--output-file",
            "spoken.wav", "--fast", "--tail", "1", "--save", "call", "--voice", "Fixture", "--voices", str(library),
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    question, rate = sf.read(HARNESS_WAV, dtype="float32")
    session = m.session(speaker=voice)
    session.feed(np.concatenate([question, np.zeros(rate, np.float32)]), rate)
    session.flush()
    expected = session.result()
    record = json.loads((tmp_path / "call" / "conversation.json").read_text())
    assert record["voice"] == "Fixture"
    np.testing.assert_array_equal(record["text_tokens"], expected.text_tokens)
    np.testing.assert_array_equal(record["audio_codes"], expected.audio_codes)


def test_the_apps_api_key_guards_adding_and_hearing_voices(guarded):  # noqa: F811
    """With app.py --api-key, Talk live's voice routes need the key as /live/tool does; a bad name is refused in one
    line."""
    import httpx

    url = guarded[0]
    wav = {"file": ("me.wav", SPEAKER_WAV.read_bytes(), "audio/wav")}
    assert httpx.post(f"{url}live/voice/add", data={"name": "Me"}, files=wav, timeout=30).status_code == 401
    assert httpx.post(f"{url}live/voice/hear", json={"name": "Aria"}, timeout=30).status_code == 401
    keyed = httpx.post(f"{url}live/voice/add", data={"name": "../me"}, files=wav, timeout=30,
                       headers={"Authorization": "Bearer sesame"})
    assert keyed.status_code == 400 and keyed.json()["detail"].startswith("'../me' is not a voice name")
    long_name = {"file": ("n" * 300 + ".wav", b"not audio", "audio/wav")}  # was HTTP 500, a traceback
    keyed = httpx.post(f"{url}live/voice/add", data={"name": "Long"}, files=long_name, timeout=30,
                       headers={"Authorization": "Bearer sesame"})
    assert keyed.status_code == 400 and keyed.json()["detail"].startswith(f"{'n' * 116}.wav is not a readable audio")
