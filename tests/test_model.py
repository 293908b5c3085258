"""The whole offline loop through the public API, against NVIDIA's NeMo 3.0.0 on its own checkpoints: identical
text ids at every timeline position, identical codes in every frame, the waveform within 1e-4 (docs/model.md §1.2)."""

import json
from functools import lru_cache

import mlx.core as mx
import numpy as np
import pytest
import soundfile as sf

from conftest import HARNESS_RUNS, HARNESS_TTS, HARNESS_WAV, NEMO, ReplayNoise
import voicechat
from voicechat import AudioInputError, Cancelled, GenerationConfig
from voicechat.timeline.recording import QUIET_FRAMES_AFTER_ANSWER, answer_finished
from voicechat.timeline.loop import sample_text_tokens

pytestmark = pytest.mark.nemo  # checked against NVIDIA's NeMo on its tiny checkpoints (tests/fixtures/nemo)

PROMPT = "You are a helpful assistant."
SETTINGS = {k: {f"tts_{name}": v for name, v in tts.items()} for k, tts in HARNESS_TTS.items()}  # GenerationConfig
GREEDY = SETTINGS["greedy"]
RUNS = {run: (name, SETTINGS[tts]) for run, (name, tts) in HARNESS_RUNS.items()}


@lru_cache(maxsize=None)
def model(name: str):
    return voicechat.load(NEMO / name)


def reference(run: str) -> dict:
    ref = dict(np.load(NEMO / "greedy" / "reference.npz")) if run in ("sampled", "greedy_aria", "sampled_aria") else {}
    ref.update(np.load(NEMO / run / "reference.npz"))
    return ref


@pytest.mark.parametrize("run", sorted(RUNS))
def test_end_to_end_parity_with_nemo(run):
    name, tts = RUNS[run]
    ref = reference(run)
    noise = ReplayNoise(ref) if "tts.noise.gumbel" in ref else None
    r = model(name)._generate(HARNESS_WAV, system_prompt=PROMPT, config=GenerationConfig(reference=True, **tts),
                             noise=noise)
    assert np.array_equal(r.text_tokens, ref["stt.gen_text_full"][0])  # every position, prompt positions included
    assert np.array_equal(r.audio_codes, ref["out.gen_audio_codes"][0])  # frame 0 all zeros, prompt frames kept
    assert r.audio.shape == ref["out.audio"][0].shape
    assert np.abs(r.audio - ref["out.audio"][0]).max() < 1e-4
    assert r.first_frame == 0 and r.prompt_frames == len(ref["stt.prompt_tokens"][0])
    if noise is not None:
        assert not noise.draws  # every recorded draw was consumed, in NeMo's order


def test_text_string_matches_nemo_with_turn_markers():
    meta = json.loads((NEMO / "greedy" / "reference_meta.json").read_text())
    r = model("tiny_model").generate(HARNESS_WAV, system_prompt=PROMPT,
                                     config=GenerationConfig(reference=True, turn_markers=True, **GREEDY))
    assert r.text == meta["text"][0]


def test_app_mode_is_the_reference_timeline_without_the_prompt():
    m = model("tiny_model")
    ref = m.generate(HARNESS_WAV, system_prompt=PROMPT, config=GenerationConfig(reference=True, **GREEDY))
    app = m.generate(HARNESS_WAV, system_prompt=PROMPT, config=GenerationConfig(extra_seconds=0.0, **GREEDY))
    p = ref.prompt_frames
    assert app.first_frame == p and np.array_equal(app.text_tokens, ref.text_tokens[p:])
    assert np.array_equal(app.audio_codes, ref.audio_codes[p:])
    # the causal codec decoder gets enough left context that the cut-out decode equals the full one
    assert app.audio.shape == (len(ref.audio) - p * 1764,)
    assert np.abs(app.audio - ref.audio[p * 1764:]).max() < 1e-5


def test_app_mode_appends_silence_until_the_answer_ends_or_the_bound():
    m = model("tiny_model")
    fixed = m.generate(HARNESS_WAV, system_prompt=PROMPT, config=GenerationConfig(extra_seconds=0.4, **GREEDY))
    assert len(fixed.text_tokens) == 28 + 5  # 2.16 s -> 28 encoder frames, + 5 frames of silence
    bounded = m.generate(HARNESS_WAV, system_prompt=PROMPT, config=GenerationConfig(max_extra_seconds=0.8, **GREEDY))
    # random weights never say EOS here, so the appended 0.8 s bound the run
    assert m.config.eos_id not in bounded.text_tokens and len(bounded.text_tokens) == 28 + 10
    assert len(bounded.audio) == len(bounded.text_tokens) * 1764


def test_stop_rule():
    cfg = model("tiny_model").config
    pad, eos, word = cfg.pad_id, cfg.eos_id, 300
    quiet = QUIET_FRAMES_AFTER_ANSWER
    text = [pad, pad] + [pad, word, word, eos] + [pad] * 40  # 2 prompt positions, EOS at position 5

    def finished(t, heard, ids=text):
        return answer_finished(ids, t, heard, pad, eos, prompt=2)

    assert not finished(5 + quiet - 1, heard=2 + 3)  # only quiet - 1 quiet frames so far
    assert finished(5 + quiet, heard=2 + 3)
    assert not finished(5 + quiet, heard=2 + 20)  # the user may still be talking
    assert finished(2 + 20, heard=2 + 20)
    again = list(text)
    again[5 + quiet + 1] = word  # the assistant speaks again after its EOS
    assert not finished(2 + 20, heard=2 + 20, ids=again)
    assert not finished(30, heard=5, ids=[pad] * 46)  # never spoke: the appended silence bounds it


def test_seeded_runs_are_identical_and_seeds_matter():
    m = model("tiny_model_aria")
    cfg = GenerationConfig(extra_seconds=0.3)  # the checkpoint's sampling TTS (top-p 0.8, noise 0.8)
    a = m.generate(HARNESS_WAV, system_prompt=PROMPT, seed=3, config=cfg)
    b = m.generate(HARNESS_WAV, system_prompt=PROMPT, seed=3, config=cfg)
    c = m.generate(HARNESS_WAV, system_prompt=PROMPT, seed=4, config=cfg)
    assert np.array_equal(a.audio_codes, b.audio_codes) and a.audio.tobytes() == b.audio.tobytes()
    assert not np.array_equal(a.audio_codes, c.audio_codes)


def test_no_system_prompt_predicts_from_position_zero():
    r = model("tiny_model").generate(HARNESS_WAV, config=GenerationConfig(reference=True, **GREEDY))
    assert r.prompt_frames == 0 and len(r.text_tokens) == 28
    assert np.array_equal(r.audio_codes[0], np.zeros(31))  # the reference keeps NeMo's never-written frame 0


def test_input_conversions_give_the_same_answer(tmp_path):
    m = model("tiny_model")
    cfg = GenerationConfig(extra_seconds=0.0, **GREEDY)
    x, rate = sf.read(HARNESS_WAV, dtype="int16")
    base = m.generate(x, rate, config=cfg)
    stereo = m.generate(np.stack([x, x], axis=1), rate, config=cfg)  # identical channels downmix to the same
    assert np.array_equal(base.audio_codes, stereo.audio_codes)
    flac = tmp_path / "q.flac"
    sf.write(flac, x, rate)
    assert np.array_equal(m.generate(flac, config=cfg).audio_codes, base.audio_codes)
    resampled = m.generate(sf.read(HARNESS_WAV)[0].repeat(3)[::1], 48000, config=cfg)  # 3x length at 3x rate
    assert len(resampled.text_tokens) == len(base.text_tokens)


@pytest.mark.parametrize("audio, rate, message", [
    ("missing.wav", None, "does not exist"),
    (np.zeros(0, np.float32), 16000, "empty"),
    (np.zeros(1000, np.float32), 16000, "shorter than one 80 ms frame"),
    (np.array([0.0, np.nan] * 1000, np.float32), 16000, "NaN"),
    (np.zeros(16000 * 3, np.float32), 16000, "limit is 2 s"),
    (np.zeros(16000, np.float32), None, "sample_rate is required"),
])
def test_bad_inputs_are_clear_errors(audio, rate, message, tmp_path):
    if isinstance(audio, str):
        audio = tmp_path / audio
    with pytest.raises(AudioInputError, match=message):
        model("tiny_model").generate(audio, rate, config=GenerationConfig(max_input_seconds=2.0))


def test_unreadable_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("this is not audio")
    with pytest.raises(AudioInputError, match="not a readable audio file"):
        model("tiny_model").generate(bad)


def test_progress_is_reported_per_frame_and_can_cancel():
    seen = []

    def progress(done, total, update):
        seen.append((done, total, update.stage))
        if done == 15:
            raise Cancelled("stop")

    with pytest.raises(Cancelled):
        model("tiny_model").generate(HARNESS_WAV, system_prompt=PROMPT,
                                     config=GenerationConfig(reference=True, **GREEDY), progress=progress)
    assert seen[0] == (0, 39, "prompt")  # announced before the prompt's work runs
    frames = seen[1:]
    assert [d for d, _, _ in frames] == list(range(1, 16))  # every timeline frame (the TTS runs on prompt frames too)
    assert {(t, s) for _, t, s in frames} == {(39, "frames")}


def test_the_transcript_comes_frame_by_frame(tmp_path):
    """The RNNT runs on each frame as it is heard: the per-frame pieces add up to the final transcript."""
    from voicechat.random_checkpoint import write_checkpoint

    m = voicechat.load(write_checkpoint(tmp_path / "ckpt", "nested"))  # has an RNNT head
    session = m.session()
    pieces = [f.transcript for f in session.feed(sf.read(HARNESS_WAV, dtype="float32")[0], 16000) + session.flush()]
    assert "".join(pieces) == session.transcript == session.result().user_transcript != ""
    assert sum(1 for p in pieces if p) > 1  # it grows while the recording plays


def test_release_layout_runs_every_channel(tmp_path):
    """Our own tiny checkpoint in the release layout has what NeMo 3.0.0 lacks: the function head (weight 2.0) and
    the RNNT transcript head; the loop fills both channels."""
    from voicechat.random_checkpoint import write_checkpoint

    m = voicechat.load(write_checkpoint(tmp_path / "ckpt", "nested"))
    r = m.generate(HARNESS_WAV, system_prompt=PROMPT, config=GenerationConfig(extra_seconds=0.0))
    assert m.config.function_channel_weight == 2.0 and m.net.stt_model.function_head is not None
    assert len(r.function_tokens) == len(r.text_tokens) == 28
    assert isinstance(r.user_transcript, str) and r.user_transcript  # random weights emit something
    assert r.sample_rate == 22050 and len(r.audio) == 28 * 1764


def test_text_sampling_rules():
    specials = mx.array([1, 2, 12])
    vocab = 16

    def sample(logits, history, gen, key=mx.random.key(0)):
        seen = mx.array([i in history and i not in (1, 2, 12) for i in range(vocab)])
        row = lambda v: mx.array([[v]], mx.float32)  # noqa: E731  (one row, its own settings)
        return sample_text_tokens(logits[None], mx.argmax(logits)[None], seen[None], specials,
                                  row(gen.text_temperature), row(gen.text_repetition_penalty), row(gen.text_top_p),
                                  key[None], gen.text_repetition_penalty != 1.0, gen.text_top_p < 1.0).item()

    logits = mx.array([0.0, 0.0, 0.0, 5.0, 4.9, -3.0] + [0.0] * 10)
    assert sample(logits, [], GenerationConfig()) == 3
    hot = GenerationConfig(text_temperature=1.0, text_top_p=0.01)
    assert sample(logits, [], hot) == 3  # top-p keeps only the best id
    # repetition penalty 10: id 3 (seen) drops from 5.0 to 0.5, so top-p now keeps only id 4
    pen = GenerationConfig(text_temperature=1.0, text_top_p=0.01, text_repetition_penalty=10.0)
    assert sample(logits, [3, 12], pen) == 4
    pad_best = mx.array([0.0] * 12 + [9.0] + [8.9] * 3)
    draws = {sample(pad_best, [], GenerationConfig(text_temperature=5.0), mx.random.key(s)) for s in range(20)}
    assert draws == {12}  # an argmax of pad/bos/eos is kept as is (BR's rule)
    spread = {sample(logits, [], GenerationConfig(text_temperature=5.0), mx.random.key(s)) for s in range(40)}
    assert len(spread) > 2


def test_sampled_text_is_reproducible_and_seeded():
    m = model("tiny_model")
    cfg = GenerationConfig(extra_seconds=0.3, **voicechat.NVIDIA_SAMPLING)
    a, b = (m.generate(HARNESS_WAV, system_prompt=PROMPT, seed=5, config=cfg) for _ in range(2))
    c = m.generate(HARNESS_WAV, system_prompt=PROMPT, seed=6, config=cfg)
    assert np.array_equal(a.text_tokens, b.text_tokens) and not np.array_equal(a.text_tokens, c.text_tokens)


def test_the_load_traces_every_per_frame_function_a_conversation_needs(traces):
    """With compilation on (a GPU), ``load`` warms every per-frame function up, so a first conversation traces
    nothing: a session fed 80 ms at a time as a microphone feeds it, past its caches' first growth; one whose first
    chunk ends inside a frame (a client's buffered burst); the offline loop, whose frames after the recording follow
    a recording of any length. A trace in a live frame is a stall of the conversation."""
    m = voicechat.load(NEMO / "tiny_model_aria")  # a fresh model: its compiled functions are made at this load
    at_load = len(traces)
    x = sf.read(HARNESS_WAV, dtype="float32")[0]
    x = np.concatenate([x] * (-(-300 * 1280 // len(x))))  # past the caches' first growth (256 positions)
    s = m.session(PROMPT, seed=0)
    for i in range(0, len(x) - 1279, 1280):
        s.feed(x[i:i + 1280], 16000)
    burst = m.session(PROMPT, seed=0)
    for chunk in [x[:3 * 1280 + 480]] + [x[i:i + 1280] for i in range(3 * 1280 + 480, 20 * 1280, 1280)]:
        burst.feed(chunk, 16000)
    m.generate(HARNESS_WAV, system_prompt=PROMPT)
    assert at_load > 0 and s.position > 300 and burst.position > burst.prompt_frames + 15
    assert [getattr(f, "__qualname__", f) for f in traces[at_load:]] == []


@pytest.mark.parametrize("run", ["sampled_aria", "v2_greedy_aria"])
def test_compiled_frame_functions_keep_parity(run, monkeypatch):
    """On a GPU the per-frame functions are fused with mx.compile (fixed-shape caches, masked attention over their
    capacity); forced on here, the loop stays NeMo-exact."""
    monkeypatch.setenv("VOICECHAT_COMPILE", "1")
    name, tts = RUNS[run]
    m = voicechat.load(NEMO / name)  # a fresh model: compiled functions are built on its first frame
    ref = reference(run)
    noise = ReplayNoise(ref) if "tts.noise.gumbel" in ref else None
    r = m._generate(HARNESS_WAV, system_prompt=PROMPT, config=GenerationConfig(reference=True, **tts), noise=noise)
    assert type(m.net.stt_model.llm._compiled.functions["decode"]).__name__ != "method"  # really compiled
    assert np.array_equal(r.text_tokens, ref["stt.gen_text_full"][0])
    assert np.array_equal(r.audio_codes, ref["out.gen_audio_codes"][0])
    assert np.abs(r.audio - ref["out.audio"][0]).max() < 1e-4
