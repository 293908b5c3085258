"""``python -m voicechat``: generate on every layout, byte-identical seeded WAVs, and exit codes for bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from conftest import HARNESS_WAV, NEMO, TESTS
from voicechat.__main__ import main
from voicechat.random_checkpoint import LAYOUTS, write_checkpoint


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


def test_seeded_cli_runs_write_identical_bytes(layouts, tmp_path):
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"{i}.wav")
        assert main(["generate", "--model", str(layouts["nested"]), "--audio", str(HARNESS_WAV), "--output-audio",
                     str(paths[-1]), "--seed", "7", "--quiet", "--extra-seconds", "0.2"]) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_reference_mode_on_the_nemo_checkpoint(tmp_path, capsys):
    out = tmp_path / "r.wav"
    assert main(["generate", "--model", str(NEMO / "tiny_model"), "--audio", str(HARNESS_WAV), "--output-audio", str(out),
                 "--system-prompt", "You are a helpful assistant.", "--reference", "--quiet"]) == 0
    assert len(sf.read(out)[0]) == 39 * 1764  # NVIDIA's fixed length: 11 prompt + 28 audio frames
    assert "[user]" not in capsys.readouterr().out  # NeMo 3.0.0 checkpoints have no transcript head


@pytest.mark.parametrize("make, words", [
    (lambda p: p / "nope.wav", "no such file"),
    (lambda p: (p / "bad.wav").write_text("not audio") and p / "bad.wav", "not a readable audio file"),
    (lambda p: sf.write(p / "short.wav", np.zeros(200, np.int16), 16000) or p / "short.wav", "shorter than one"),
    (lambda p: sf.write(p / "nan.wav", np.full(4000, np.nan, np.float32), 16000, subtype="FLOAT") or p / "nan.wav",
     "NaN"),
])
def test_bad_input_exits_2_with_a_message(make, words, layouts, tmp_path, capsys):
    audio = make(tmp_path)
    assert main(["generate", "--model", str(layouts["nested"]), "--audio", str(audio), "--quiet"]) == 2
    assert words in capsys.readouterr().err


def test_bad_usage_and_missing_model(tmp_path, capsys):
    assert main(["generate"]) == 2  # --audio is required
    assert main(["generate", "--model", str(tmp_path / "missing"), "--audio", str(HARNESS_WAV)]) == 1
    assert "neither a checkpoint directory nor a Hugging Face repo id" in capsys.readouterr().err


def test_module_entry_point(layouts):
    p = subprocess.run([sys.executable, "-m", "voicechat", "generate", "--model", str(layouts["nested"]),
                        "--audio", str(HARNESS_WAV), "--quiet", "--extra-seconds", "0"],
                       capture_output=True, text=True, cwd=TESTS.parent, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("[user] ")
