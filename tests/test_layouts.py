"""The fourth checkpoint layout (voicechat/layouts.py): folders written by mlx-audio 0.6.2's own converter.

NVIDIA's NeMo checkpoints (tests/fixtures/nemo) are converted at test time by mlx-audio's real converter, run in
its venv (bench/mlx_audio_convert.py; the peer harness's setup.sh builds the venv). The
converted folder must give back NeMo's tensors, config and outputs. Skipped when that venv is absent: the converted
tiny folder is 4.6 MB, too large to commit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from conftest import HARNESS_TTS, HARNESS_WAV, NEMO
import voicechat
from voicechat import GenerationConfig
from bench.mlx_audio_convert import convert
from voicechat.checkpoint import load_config, load_into, read_weights
from voicechat.config_formats import parse_rnnt
from voicechat.layouts import PROJECTION
from voicechat.stt.rnnt import RNNTDecoder, RNNTGreedy, RNNTJoint


def mlx_audio_python() -> str | None:
    """VOICECHAT_MLX_AUDIO_PYTHON, else the peer harness's venv ($PEER_AUDIO, default <tempdir>/peer_audio)."""
    venv = os.environ.get("PEER_AUDIO") or os.path.join(tempfile.gettempdir(), "peer_audio")
    python = os.environ.get("VOICECHAT_MLX_AUDIO_PYTHON") or os.path.join(venv, "bin", "python")
    if not os.path.isfile(python):
        return None
    probe = subprocess.run([python, "-c", "import mlx_audio.sts.models.nemotron_voicechat.convert"],
                           capture_output=True)
    return python if probe.returncode == 0 else None


PYTHON = mlx_audio_python()
pytestmark = [pytest.mark.nemo, pytest.mark.skipif(
    PYTHON is None, reason="mlx-audio 0.6.2's venv is absent (the peer harness's setup.sh builds it, or set "
                           "VOICECHAT_MLX_AUDIO_PYTHON): its converter makes the converted folders at test time")]
ARIA = NEMO / "tiny_model_aria"
RNNT = NEMO / "rnnt"
PROMPT = "You are a helpful assistant."


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    return convert(ARIA, tmp_path_factory.mktemp("aria"), PYTHON)


def nemo_with_rnnt(directory: Path, joint_dropout: float) -> Path:
    """tiny_model_aria plus the RNNT of tests/fixtures/nemo/rnnt (NeMo's RNNTDecoder / RNNTJoint), its joint's Linear
    named as NeMo names it for ``joint_dropout``."""
    shutil.copytree(ARIA, directory)
    merge = json.loads((RNNT / "merge_info.json").read_text())
    merge["_rnnt_merge_info"]["joint_config"]["jointnet"]["dropout"] = joint_dropout
    cfg = json.loads((directory / "config.json").read_text())
    cfg["_rnnt_merge_info"] = merge["_rnnt_merge_info"]
    (directory / "config.json").write_text(json.dumps(cfg))
    rnnt = {k.replace("joint_net.2.", "joint_net.1." if joint_dropout == 0 else "joint_net.2."): v
            for k, v in read_weights(RNNT).items()}
    mx.save_safetensors(str(directory / "model.safetensors"), {**mx.load(str(ARIA / "model.safetensors")), **rnnt})
    return directory


def test_weights_come_back_as_nemo_wrote_them(converted):
    """Every tensor of NeMo's file, bit for bit, in NeMo's name and layout, after mlx-audio's transposes and renames;
    except what both engines recompute (mel window and filterbank, flag tables), and the frozen projection that the
    converter drops (the identity in its place)."""
    nemo, mapped = read_weights(ARIA), read_weights(converted)
    recomputed = {k for k in nemo if k.endswith(("featurizer.fb", "featurizer.window", ".is_continuation",
                                                 ".special_flags", ".pad_tensor"))}
    assert len(recomputed) == 6 and not recomputed & set(mapped)
    assert set(mapped) == set(nemo) - recomputed
    for key in sorted(set(mapped) - {PROJECTION}):
        assert mapped[key].shape == nemo[key].shape and mapped[key].dtype == nemo[key].dtype, key
        assert mx.array_equal(mapped[key], nemo[key]).item(), key
    assert mx.array_equal(mapped[PROJECTION], mx.eye(nemo[PROJECTION].shape[0])).item()


def test_config_is_the_nemo_config(converted):
    nemo, mapped = load_config(ARIA), load_config(converted)
    assert mapped.format == "mlx-audio" and nemo.format == "nested"
    # mlx-audio's llm_config has no chunk_size: the scan's chunking, which does not change the model's outputs
    assert replace(mapped.llm, chunk_size=nemo.llm.chunk_size) == nemo.llm
    for part in ("audio", "tts", "codec"):
        assert getattr(mapped, part) == getattr(nemo, part), part
    assert (mapped.speaker_name, mapped.bos_token, mapped.eos_token, mapped.pad_token) == \
        (nemo.speaker_name, nemo.bos_token, nemo.eos_token, nemo.pad_token)


@pytest.mark.parametrize("run", ["greedy_aria", "sampled_aria"])
def test_generation_matches_nemo(converted, run):
    """The converted folder in voicechat gives NeMo 3.0.0's text id at every position, its codes in every frame and
    its waveform (what voicechat gives on the NeMo folder itself, tests/test_model.py)."""
    from conftest import ReplayNoise

    ref = {**np.load(NEMO / "greedy" / "reference.npz"), **np.load(NEMO / run / "reference.npz")}
    tts = {f"tts_{k}": v for k, v in HARNESS_TTS[run.split("_")[0]].items()}
    noise = ReplayNoise(ref) if "tts.noise.gumbel" in ref else None
    r = voicechat.load(converted)._generate(HARNESS_WAV, system_prompt=PROMPT,
                                            config=GenerationConfig(reference=True, **tts), noise=noise)
    assert np.array_equal(r.text_tokens, ref["stt.gen_text_full"][0])
    assert np.array_equal(r.audio_codes, ref["out.gen_audio_codes"][0])
    assert np.abs(r.audio - ref["out.audio"][0]).max() < 1e-4


def test_a_random_checkpoint_converts_and_answers_the_same(tmp_path):
    """voicechat's random checkpoint (release layout: function head, RNNT, the release's list of attention contexts,
    its tokenizer only at the top) goes through mlx-audio's converter, which is what lets the side-by-side benchmark
    run on random medium and full-size checkpoints; the converted folder gives voicechat the same answer."""
    from voicechat.random_checkpoint import write_tiny_checkpoint

    nested = write_tiny_checkpoint(tmp_path / "nested")
    converted = convert(nested, tmp_path / "conv", PYTHON)
    assert load_config(converted).format == "mlx-audio"
    x = np.random.default_rng(0).standard_normal(24000).astype(np.float32) * 0.1
    a, b = (voicechat.load(d).generate(x, 16000, seed=0) for d in (nested, converted))
    assert a.function_tokens is not None and a.user_transcript
    for field in ("text_tokens", "function_tokens", "audio_codes", "audio"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert a.user_transcript == b.user_transcript


@pytest.mark.parametrize("joint_dropout", [0.1, 0.0])
def test_rnnt_comes_back_and_transcribes_as_nemo(tmp_path, joint_dropout):
    """mlx-audio stores NeMo's LSTM as Wx / Wh / one summed bias and its joint Linear always at index 2: mapped back,
    the transcript head decodes NeMo's ids on NeMo's reference inputs."""
    out = convert(nemo_with_rnnt(tmp_path / "nemo", joint_dropout), tmp_path / "converted", PYTHON)
    merge = json.loads((RNNT / "merge_info.json").read_text())["_rnnt_merge_info"]
    cfg = load_config(out).audio.rnnt
    expected = parse_rnnt(merge["decoder_config"], merge["joint_config"], merge["joint_config"]["vocabulary"], 10)
    assert cfg == replace(expected, joint_dropout=joint_dropout > 0)
    weights = read_weights(out)
    decoder, joint = RNNTDecoder(cfg), RNNTJoint(cfg)
    load_into(decoder, weights, prefix="stt_model.rnnt_decoder.")
    load_into(joint, weights, prefix="stt_model.rnnt_joint.")
    greedy = RNNTGreedy(decoder, joint, cfg)
    ref = np.load(RNNT / "reference.npz")
    for name in ref["names"]:
        state = greedy.new_state()
        frames = mx.array(ref[f"{name}.frames"])
        for t in range(int(ref[f"{name}.length"])):
            greedy.decode_frame(state, frames[t:t + 1])
        assert state.tokens == ref[f"{name}.ids"].tolist(), name


def test_prequantized_folder_loads_quantized(converted, tmp_path):
    """``convert -q``: the LLM's matrices, the embedding and the head arrive 4-bit (group 64); voicechat quantizes
    exactly those modules with those settings and runs."""
    out, src = tmp_path / "q", converted.parent / "src"
    subprocess.run([PYTHON, "-m", "mlx_audio.sts.models.nemotron_voicechat.convert", "--source", str(src),
                    "--output", str(out), "-q"], check=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    packed = {k[: -len(".scales")] for k in mx.load(str(out / "model.safetensors")) if k.endswith(".scales")}
    model = voicechat.load(out)
    quantized = {k: m for k, m in model.net.named_modules()
                 if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))}
    assert packed and set(quantized) == packed
    assert {(m.bits, m.group_size) for m in quantized.values()} == {(4, 64)}
    r = model.generate(HARNESS_WAV, system_prompt=PROMPT, config=GenerationConfig(reference=True))
    assert len(r.text_tokens) == 39 and r.audio_codes.shape == (39, 31)
