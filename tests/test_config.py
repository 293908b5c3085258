"""Config parsing: NVIDIA's nested format (NeMo-made fixture), mlx-vlm's runtime format (written by mlx-vlm 0.7.10's
own converter from the same checkpoint), and the errors for what cannot be read."""

import json
import math
from dataclasses import replace

import pytest

from conftest import NEMO, TESTS
from voicechat.checkpoint import load_config, read_rnnt_vocab, read_weights
from voicechat.config import (NANO_9B_V2, AudioConfig, CharEncoderConfig, CodecConfig, EncoderConfig, GemmaConfig,
                              GenerationConfig, MoGConfig, ModelConfig, PreprocessorConfig, RNNTConfig, TTSConfig)
from voicechat.config_formats import (NANO_9B_V2_CONFIG, RUNTIME_DEFAULTS, gemma_layer_types, parse_config, parse_llm,
                                      parse_quantization, split_top_p_or_k)
from voicechat.errors import ConfigError

PEERS = TESTS / "fixtures" / "peers"
TINY_LLM = NEMO / "tiny_model" / "Nemotron-H-tiny"


def nested_tiny() -> dict:
    return json.loads((NEMO / "tiny_model" / "config.json").read_text())


def tiny_llm() -> dict:
    return json.loads((TINY_LLM / "config.json").read_text())


def test_nested_nemo_fixture_resolves_llm_dir_relative_to_checkpoint():
    # the config names the LLM by an absolute path of the machine that built it; it is found by name next to it
    cfg = load_config(NEMO / "tiny_model")
    assert cfg.llm.pattern == "M-M*-" and cfg.llm.hidden_size == 64 and cfg.llm.chunk_size == 16
    assert cfg.llm.time_step_limit == (0.001, math.inf)  # no time_step_limit key: (time_step_min, inf)
    assert cfg.audio.encoder.conv_norm_type == "batch_norm" and cfg.audio.encoder.xscaling
    assert cfg.audio.encoder.att_context_size == (70, 0)
    assert cfg.tts.backbone.layer_types == ("sliding_attention", "full_attention")
    assert (cfg.tts.top_p, cfg.tts.top_k, cfg.tts.guidance_scale, cfg.tts.noise_scale) == (0.8, None, 0.5, 0.8)
    assert cfg.codec.samples_per_frame == 1764 and cfg.audio.rnnt is None
    assert cfg.speaker_reference.endswith("speaker_22k.wav") and cfg.speaker_name is None


def test_variant2_geometry_and_speaker_name():
    cfg = load_config(NEMO / "tiny_v2_aria")
    assert cfg.audio.preprocessor.features == 128 and cfg.audio.encoder.n_layers == 3
    assert cfg.llm.pattern == "M-*-M*-" and cfg.llm.n_groups == 4
    # no layer_types: Gemma-3's sliding_window_pattern rule, layer i global iff (i+1) % 3 == 0
    assert cfg.tts.backbone.layer_types == ("sliding_attention", "sliding_attention", "full_attention")
    assert cfg.speaker_name == "Aria" and cfg.tts.use_audio_prompt_frozen_projection


def test_runtime_config_written_by_mlx_vlm_matches_its_nested_source():
    source = json.loads((PEERS / "mlx_vlm_tiny_source_config.json").read_text())
    nested = parse_config(source, tiny_llm())
    runtime = parse_config(json.loads((PEERS / "mlx_vlm_tiny_config.json").read_text()))
    assert runtime.format == "runtime" and nested.format == "nested"
    # mlx-vlm's text_config drops chunk_size (a scan detail, not a result) and writes the limit's inf as 1e30
    assert runtime.llm == replace(nested.llm, chunk_size=128)
    assert runtime.audio.preprocessor == nested.audio.preprocessor
    assert runtime.audio.encoder == nested.audio.encoder
    assert runtime.tts.backbone == nested.tts.backbone
    assert runtime.tts.char_encoder == nested.tts.char_encoder and runtime.tts.mog == nested.tts.mog
    assert runtime.codec == nested.codec
    assert (runtime.bos_id, runtime.eos_id, runtime.pad_id) == (1, 2, 12)
    assert runtime.function_channel_weight == nested.function_channel_weight


def test_unknown_format_is_one_clear_error():
    with pytest.raises(ConfigError, match="no known NemotronLabs-VoiceChat format"):
        parse_config({"model_type": "llama", "hidden_size": 8})
    with pytest.raises(ConfigError, match="not a JSON object"):
        parse_config([1, 2])


def test_missing_key_names_its_path():
    cfg = nested_tiny()
    del cfg["model"]["speech_generation"]["model"]["tts_config"]["mog_head_config"]
    with pytest.raises(ConfigError, match="'mog_head_config'"):
        parse_config(cfg, tiny_llm())


def test_pretrained_llm_hub_id_uses_the_public_geometry_and_unknown_names_fail():
    cfg = nested_tiny()
    cfg["model"]["stt"]["model"]["pretrained_llm"] = NANO_9B_V2
    with pytest.raises(ConfigError, match="output_dim 64 != LLM hidden_size 4480"):
        parse_config(cfg)  # cross-checked against the perception projection
    cfg["model"]["stt"]["model"]["perception"]["output_dim"] = 4480
    llm = parse_config(cfg).llm
    assert (llm.hidden_size, len(llm.pattern), llm.pattern.count("*"), llm.mamba_inner) == (4480, 56, 4, 10240)
    assert llm.time_step_limit == (0.0, math.inf)  # the Nano-9B-v2 config's own limit, as NVIDIA's code runs it
    cfg["model"]["stt"]["model"]["pretrained_llm"] = "someone/other-llm"
    with pytest.raises(ConfigError, match="someone/other-llm"):
        parse_config(cfg)


def test_unsupported_settings_are_refused_not_ignored():
    for path, value in [(("perception", "preprocessor", "normalize"), "per_feature"),
                        (("perception", "encoder", "subsampling"), "striding"),
                        (("predict_user_text",), True)]:
        cfg = nested_tiny()
        d = cfg["model"]["stt"]["model"]
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
        with pytest.raises(ConfigError):
            parse_config(cfg, tiny_llm())


def test_a_frame_other_than_80_ms_is_refused():
    """The checkpoint's frame_length states the timeline's one frame (voicechat/frame.py); another is one clear
    error, not a second frame length beside the one every room counts in."""
    cfg = nested_tiny()
    assert parse_config(cfg, tiny_llm()).frame_length == 0.08
    cfg["data"]["frame_length"] = 0.04
    with pytest.raises(ConfigError, match="frame is 0.04 s; voicechat runs NVIDIA's 0.08 s timeline"):
        parse_config(cfg, tiny_llm())


def test_top_p_or_k_follows_the_python_type():
    assert split_top_p_or_k(0.95) == (0.95, None)
    assert split_top_p_or_k(1) == (None, 1)
    assert split_top_p_or_k(1.0) == (1.0, None)
    with pytest.raises(ConfigError):
        split_top_p_or_k("0.9")


def test_quantization_both_spellings():
    nested = parse_quantization({"group_size": 64, "bits": 4,
                                 "modules": {"stt_model.embed_tokens": {"group_size": 32, "bits": 8}}})
    runtime = parse_quantization({"group_size": 64, "bits": 4, "stt_model.embed_tokens": {"group_size": 32, "bits": 8},
                                  "stt_model.lm_head": False})
    assert nested.spec_for("stt_model.embed_tokens") == runtime.spec_for("stt_model.embed_tokens")
    assert (nested.spec_for("stt_model.embed_tokens").bits, nested.spec_for("x").bits) == (8, 4)
    assert runtime.spec_for("stt_model.lm_head") is None
    with pytest.raises(ConfigError, match="mode"):
        parse_quantization({"group_size": 32, "bits": 4, "mode": "mxfp4"})


def test_rnnt_vocabulary_file_list_or_map(tmp_path):
    (tmp_path / "rnnt_tokenizer").mkdir()
    f = tmp_path / "rnnt_tokenizer" / "vocab.json"
    f.write_text(json.dumps(["<unk>", "▁a", "b"]))
    assert read_rnnt_vocab(tmp_path) == ["<unk>", "▁a", "b"]
    f.write_text(json.dumps({"b": 2, "<unk>": 0, "▁a": 1}))
    assert read_rnnt_vocab(tmp_path) == ["<unk>", "▁a", "b"]
    f.write_text(json.dumps({"b": 3, "<unk>": 0}))
    with pytest.raises(ConfigError, match="contiguous"):
        read_rnnt_vocab(tmp_path)


def test_gemma_layer_rule():
    types = gemma_layer_types(28, 6)
    assert [i for i, t in enumerate(types) if t == "full_attention"] == [5, 11, 17, 23]


def test_generation_config_defaults_are_greedy_text():
    g = GenerationConfig()
    assert g.text_temperature == 0.0 and not g.reference and g.tts_top_p is None


# ----------------------------------------------------------------------------------------------------------------
# one default per field: a config that leaves a key out gets the dataclass default, in both formats
# ----------------------------------------------------------------------------------------------------------------
ENCODER = {"feat_in": 80, "n_layers": 2, "d_model": 64, "subsampling": "dw_striding", "conv_context_size": "causal"}
BACKBONE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4}
CHARS = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4}
MOG = {"intermediate_size": 128, "num_layers": 2, "low_rank": 8, "num_predictions": 16}
TTS_SIZES = {"latent_size": 32, "codebook_size": 64, "num_quantizers": 31}
CODEC = {"latent_size": 32, "base_hidden_size": 16, "codebook_size": 64, "num_quantizers": 31}
RNNT_DECODER = {"prednet": {"pred_hidden": 32}, "vocab_size": 3}
RNNT_JOINT = {"jointnet": {"encoder_hidden": 64, "joint_hidden": 32}, "num_classes": 3}


def expected_minimal(tts_defaults: dict, model_defaults: dict, fmt: str, rnnt_vocab: tuple) -> ModelConfig:
    """The minimal configs below, built from the dataclasses with only their required fields."""
    return ModelConfig(
        llm=parse_llm(NANO_9B_V2_CONFIG),
        audio=AudioConfig(PreprocessorConfig(), EncoderConfig(feat_in=80, n_layers=2, d_model=64), 4480,
                          RNNTConfig(vocab_size=3, pred_hidden=32, encoder_hidden=64, joint_hidden=32,
                                     vocabulary=rnnt_vocab)),
        tts=TTSConfig(backbone=GemmaConfig(**BACKBONE, layer_types=gemma_layer_types(3, 6)),
                      char_encoder=CharEncoderConfig(**CHARS), mog=MoGConfig(**MOG), **TTS_SIZES, **tts_defaults),
        codec=CodecConfig(**CODEC), format=fmt, **model_defaults)


def test_a_minimal_nested_config_parses_to_the_dataclass_defaults():
    cfg = {"model": {"stt": {"model": {"pretrained_llm": NANO_9B_V2,
                                       "perception": {"preprocessor": {}, "encoder": ENCODER}}},
                     "speech_generation": {"model": {
                         "tts_config": {**TTS_SIZES, "backbone_config": BACKBONE, "mog_head_config": MOG,
                                        "cas_config": {"backbone_config": {"encoder": CHARS}}},
                         "codec_config": CODEC}}},
           "_rnnt_merge_info": {"decoder_config": RNNT_DECODER, "joint_config": RNNT_JOINT}}
    got = parse_config(cfg, rnnt_vocab=["a", "b", "c"])
    assert got == expected_minimal({}, {"pretrained_llm": NANO_9B_V2}, "nested", ("a", "b", "c"))


def test_a_minimal_runtime_config_parses_to_the_dataclass_and_runtime_defaults():
    cfg = {"model_type": "nemotron_voicechat", "text_config": NANO_9B_V2_CONFIG,
           "audio_config": {"preprocessor": {}, "encoder": ENCODER, "decoder": RNNT_DECODER, "joint": RNNT_JOINT},
           "tts_config": {**TTS_SIZES, **BACKBONE, "character_encoder": CHARS, "mog_head": MOG},
           "codec_config": {}}
    expected = expected_minimal(RUNTIME_DEFAULTS["tts"], RUNTIME_DEFAULTS["model"], "runtime", ())
    assert parse_config(cfg) == replace(expected, codec=CodecConfig())


def test_a_key_the_config_leaves_out_means_what_nemo_uses():
    # NeMo built the fixture from a config without `use_bias`: its encoder has biases (NeMo's default, True), and the
    # parsed config says so, while the release sets use_bias false explicitly
    raw = nested_tiny()["model"]["stt"]["model"]["perception"]["encoder"]
    assert "use_bias" not in raw
    assert load_config(NEMO / "tiny_model").audio.encoder.use_bias is True
    assert "stt_model.perception.encoder.layers.0.self_attn.linear_q.bias" in read_weights(NEMO / "tiny_model")


def test_derived_defaults_follow_the_other_fields():
    assert PreprocessorConfig(window_size=0.025).n_fft == 512 and PreprocessorConfig(window_size=0.01).n_fft == 256
    assert EncoderConfig(feat_in=8, n_layers=1, d_model=48).subsampling_conv_channels == 48
    encoder = EncoderConfig(feat_in=8, n_layers=1, d_model=48, subsampling_conv_channels=-1)
    assert encoder.subsampling_conv_channels == 48
    assert GemmaConfig(**BACKBONE, layer_types=("full_attention",) * 3).num_key_value_heads == 4
    llm = parse_llm({**NANO_9B_V2_CONFIG, "num_key_value_heads": None, "head_dim": None})
    assert (llm.num_key_value_heads, llm.head_dim) == (40, 4480 // 40)


def test_parsing_reads_no_files(tmp_path):
    # the LLM directory a nested config names is read by the checkpoint loader, never by the parser
    (tmp_path / "config.json").write_text(json.dumps(tiny_llm()))
    cfg = nested_tiny()
    cfg["model"]["stt"]["model"]["pretrained_llm"] = str(tmp_path)
    with pytest.raises(ConfigError, match="neither nvidia/NVIDIA-Nemotron-Nano-9B-v2 nor a directory"):
        parse_config(cfg)
    assert parse_config(cfg, tiny_llm()).llm.hidden_size == 64
