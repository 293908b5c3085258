"""A checkpoint in NVIDIA's nested layout (NeMo-made, or ``random_checkpoint``'s) converted by mlx-audio 0.6.2's own
converter: one folder that both engines load.

    python -m bench.mlx_audio_convert --nemo tests/fixtures/nemo/tiny_model_aria --out DIR \\
        --mlx-audio-python /path/to/peer_audio/bin/python [--latent-from REF.npz]

Writes DIR/src (the NeMo folder, with the few statements below added) and DIR/mlx_audio (what ``python -m
mlx_audio.sts.models.nemotron_voicechat.convert --source DIR/src --output DIR/mlx_audio`` writes, run offline in
mlx-audio's venv). The peer harness's ``setup.sh`` builds that venv.

NeMo's checkpoints leave some keys to NeMo's code defaults, where mlx-audio's defaults are the release's; written
out so that both engines run NeMo's model (each is what NeMo 3.0.0 ran):
  * encoder ``use_bias: true`` and backbone ``sliding_window: 4096`` (NeMo / transformers defaults);
  * ``use_function_head: false``, ``duplex_function_channel_weight: 0`` (NeMo 3.0.0 has no function channel);
  * the LLM folder's ``num_hidden_layers`` (transformers derives it; mlx-audio reads it) and ``time_step_limit:
    [time_step_min, 1e30]`` (transformers' Nemotron-H clamps dt there; mlx-audio's converter drops an infinite bound
    and its default is (0, inf); voicechat reads 1e30 as inf);
  * ``pretrained_llm`` pointing at the LLM folder copied into src (mlx-audio reads its config and tokenizer there;
    the top-level tokenizer files are copied in when the LLM folder has none, as in voicechat's random checkpoints);
  * the encoder's ``att_context_size`` as one [left, right] pair when the config lists several (the release writes
    [[70, 0]]; NeMo and voicechat use the first at inference, mlx-audio 0.6.2 reads only a pair).
With ``--latent-from`` (a NeMo reference dump of a checkpoint that takes a speaker WAV), the ``Aria`` latent that
mlx-audio's warm-up needs is added: what NeMo feeds at the warm-up rows before BOS, ``embed_code(depthsum(codes
shifted by one frame))`` of the speaker prompt codes NeMo recorded (``tts.init.code``; docs/model.md §2.5.5).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

NEMO_IMPLICIT = {"encoder": {"use_bias": True}, "backbone": {"sliding_window": 4096},
                 "stt": {"use_function_head": False, "duplex_function_channel_weight": 0.0}}


def speaker_latent(weights: dict, prompt_codes: np.ndarray) -> np.ndarray:
    """[T, Q] speaker prompt codes -> [1, T, H]: embed_code of the per-frame sum over codebooks of the code vectors,
    codes shifted right by one frame (frame 0: code 0); the pad code K (the prompt's first and last rows) adds zero."""
    rvq = np.asarray(weights["tts_model.tts_model.rvq_embs"], np.float32)  # [Q, K, L]
    rvq = np.concatenate([rvq, np.zeros_like(rvq[:, :1])], axis=1)  # [Q, K + 1, L]
    shifted = np.concatenate([np.zeros_like(prompt_codes[:1]), prompt_codes[:-1]]).astype(np.int64)
    summed = sum(rvq[q][shifted[:, q]] for q in range(rvq.shape[0]))  # [T, L]
    embed = np.asarray(weights["tts_model.tts_model.embed_code.weight"], np.float32)  # [H, L]
    return (summed @ embed.T)[None].astype(np.float32)


def write_source(nemo: Path, src: Path, latent_from: Path | None) -> None:
    cfg = json.loads((nemo / "config.json").read_text())
    stt = cfg["model"]["stt"]["model"]
    speech = cfg["model"]["speech_generation"]["model"]
    llm_dir = src / Path(stt["pretrained_llm"]).name
    shutil.copytree(nemo / llm_dir.name, llm_dir)
    llm = json.loads((llm_dir / "config.json").read_text())
    llm.setdefault("num_hidden_layers", len(llm["hybrid_override_pattern"]))
    llm.setdefault("time_step_limit", [float(llm.get("time_step_min", 0.0)), 1e30])
    (llm_dir / "config.json").write_text(json.dumps(llm, indent=1))
    stt["pretrained_llm"] = stt["tokenizer_path"] = speech["pretrained_lm_name"] = speech["tokenizer_path"] = \
        str(llm_dir.resolve())
    for key, value in NEMO_IMPLICIT["stt"].items():
        stt.setdefault(key, value)
    encoder = stt["perception"]["encoder"]
    encoder.setdefault("use_bias", NEMO_IMPLICIT["encoder"]["use_bias"])
    if isinstance(encoder["att_context_size"][0], list):  # the release's list of contexts: the first one is used
        encoder["att_context_size"] = encoder["att_context_size"][0]
    speech["tts_config"]["backbone_config"].setdefault("sliding_window", NEMO_IMPLICIT["backbone"]["sliding_window"])
    weights_file = src / "model.safetensors"
    if latent_from is None:
        shutil.copy2(nemo / "model.safetensors", weights_file)
    else:
        import mlx.core as mx

        weights = dict(mx.load(str(nemo / "model.safetensors")))
        codes = np.load(latent_from)["tts.init.code"][0]
        weights["tts_model.audio_prompt_latents.Aria"] = mx.array(speaker_latent(weights, codes))
        mx.save_safetensors(str(weights_file), weights)
        cfg["model"]["inference_speaker_name"] = "Aria"
    (src / "config.json").write_text(json.dumps(cfg, indent=1))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (nemo / name).is_file():
            shutil.copy2(nemo / name, src / name)
            # both engines read the tokenizer at tokenizer_path; random checkpoints keep theirs only at the top
            if not (llm_dir / name).is_file():
                shutil.copy2(nemo / name, llm_dir / name)


def convert(nemo: Path, out: Path, mlx_audio_python: str, latent_from: Path | None = None) -> Path:
    """NeMo folder -> ``out/mlx_audio`` by mlx-audio's converter (``out`` is replaced)."""
    nemo, out = Path(nemo), Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "src").mkdir(parents=True)
    write_source(nemo, out / "src", latent_from)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    subprocess.run([mlx_audio_python, "-m", "mlx_audio.sts.models.nemotron_voicechat.convert", "--source",
                    str(out / "src"), "--output", str(out / "mlx_audio")], check=True, env=env)
    return out / "mlx_audio"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nemo", required=True, help="a NeMo-made checkpoint folder (config, weights, LLM folder)")
    p.add_argument("--out", required=True)
    p.add_argument("--mlx-audio-python", required=True, help="python of a venv with mlx-audio 0.6.2")
    p.add_argument("--latent-from", help="NeMo reference.npz with tts.init.code (for checkpoints without a latent)")
    a = p.parse_args()
    print(convert(Path(a.nemo), Path(a.out), a.mlx_audio_python, Path(a.latent_from) if a.latent_from else None))


if __name__ == "__main__":
    main()
