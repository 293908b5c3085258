"""The streaming session against NVIDIA's NeMo offline output and against the offline loop: a recording fed in any
chunks gives the same text ids, function ids and codes at every position, and the same samples.

Where the end of the input comes in: flush() ends the input as NeMo's offline code ends a recording (the STFT's
centred frames run to 1 + N // 160, the mel columns past the valid length are 0, NeMo's masks zero the padded
encoder frames), so the positions the end creates are NeMo's too and no position is exempt from the comparison.
"""

import os
import subprocess
import sys
from functools import lru_cache

import mlx.core as mx
import numpy as np
import pytest
import soundfile as sf

from conftest import HARNESS_RUNS, HARNESS_TTS, HARNESS_WAV, NEMO, TESTS, ReplayNoise
import voicechat
from voicechat import AudioInputError, GenerationConfig, TimelineFull
from voicechat.timeline import conversation as session_module
from voicechat.timeline.conversation import Session
from voicechat.answer import channel_pieces, make_answer
from voicechat.tokenizer import TextStream, TextTokenizer

pytestmark = pytest.mark.nemo  # checked against NVIDIA's NeMo on its tiny checkpoints (tests/fixtures/nemo)

PROMPT = "You are a helpful assistant."
TTS = {k: {f"tts_{name}": v for name, v in tts.items()} for k, tts in HARNESS_TTS.items()}
CHUNKS = [1, 160, 1000, 1280, 7919, None]  # None: the whole recording in one call
SAMPLES_PER_FRAME = 1764


@lru_cache(maxsize=None)
def model(name: str):
    return voicechat.load(NEMO / name)


@lru_cache(maxsize=None)
def recording() -> np.ndarray:
    x, rate = sf.read(HARNESS_WAV, dtype="float32")
    assert rate == 16000
    return x


def reference(run: str) -> dict:
    ref = dict(np.load(NEMO / "greedy" / "reference.npz")) if run in ("sampled", "greedy_aria", "sampled_aria") else {}
    ref.update(np.load(NEMO / run / "reference.npz"))
    return ref


def chunks(x: np.ndarray, size):
    size = size or len(x)
    return [x[i:i + size] for i in range(0, len(x), size)]


def streamed(m, x, size, config, noise=None, prompt=PROMPT, seed=0):
    """Feed ``x`` in chunks of ``size``, then flush: (frames, session)."""
    s = Session(m, prompt, seed, None, config, noise=noise)
    frames = [f for chunk in chunks(x, size) for f in s.feed(chunk, 16000)] + s.flush()
    return frames, s


@pytest.mark.parametrize("size", CHUNKS)
@pytest.mark.parametrize("run", sorted(HARNESS_RUNS))
def test_chunks_give_nemo_offline_output_at_every_position(run, size):
    """Each NeMo fixture: the session's ids and codes are NeMo's offline ones at every position (the prompt's
    positions, frame 0's zero codes, and the end's positions included), its samples within 1e-5 of ours offline."""
    name, tts = HARNESS_RUNS[run]
    m, ref = model(name), reference(run)
    config = GenerationConfig(reference=True, **TTS[tts])
    noise = ReplayNoise(ref) if "tts.noise.gumbel" in ref else None
    frames, s = streamed(m, recording(), size, config, noise)
    r = s.result()
    p = s.prompt_frames
    assert [f.position for f in frames] == list(range(p, s.position))
    assert np.array_equal(r.text_tokens, ref["stt.gen_text_full"][0])
    assert np.array_equal([f.text_id for f in frames], ref["stt.gen_text_full"][0][p:])
    assert np.array_equal(r.audio_codes, ref["out.gen_audio_codes"][0])
    assert np.array_equal(np.stack([f.codes for f in frames]), ref["out.gen_audio_codes"][0][p:])
    if noise is not None:
        assert not noise.draws  # every recorded draw consumed, in NeMo's order
    offline = m._generate(HARNESS_WAV, system_prompt=PROMPT, config=config,
                          noise=ReplayNoise(ref) if noise is not None else None)
    assert np.array_equal(r.function_tokens, offline.function_tokens)
    assert r.audio.shape == offline.audio.shape == ref["out.audio"][0].shape
    assert np.abs(r.audio - offline.audio).max() <= 1e-5
    assert np.abs(r.audio - ref["out.audio"][0]).max() < 1e-4  # NeMo's own float32 codec
    # each frame's samples are those that became final with it: the codec runs 6 samples behind the timeline, and
    # its last 6 come with the end of the input
    spoken = np.concatenate([f.audio for f in frames])
    assert np.array_equal(spoken, r.audio[p * SAMPLES_PER_FRAME - 6:len(r.audio) - 6])


@pytest.fixture(scope="module")
def release_model(tmp_path_factory):
    """Our tiny checkpoint in the release layout: a function head (weight 2.0) and an RNNT head, which NeMo 3.0.0
    lacks."""
    from voicechat.random_checkpoint import write_checkpoint

    return voicechat.load(write_checkpoint(tmp_path_factory.mktemp("release") / "ckpt", "nested"))


@pytest.mark.parametrize("size", [1, 1000, None])
def test_function_channel_and_transcript_match_offline(size, release_model):
    config = GenerationConfig(reference=True)
    frames, s = streamed(release_model, recording(), size, config)
    offline = release_model.generate(recording(), 16000, system_prompt=PROMPT, config=config)
    r = s.result()
    assert np.array_equal(r.function_tokens, offline.function_tokens)
    assert np.array_equal(r.text_tokens, offline.text_tokens)
    assert np.array_equal(r.audio_codes, offline.audio_codes)
    assert r.user_transcript == offline.user_transcript != ""
    # the transcript also hears the prompt's (zero) frames, as NVIDIA's loop does (docs/model.md §1.2 J)
    assert "".join(f.transcript for f in s.prompt_output + frames) == r.user_transcript
    assert np.abs(r.audio - offline.audio).max() <= 1e-5
    assert len(set(r.function_tokens.tolist())) > 1  # random weights: the channel really carries ids


def test_the_answers_pieces_are_what_the_frames_gave(release_model):
    """The app's timeline and the records (``channel_pieces``) show at each position the text that the session's
    frame gave there, on both channels (random weights: both carry many ids)."""
    frames, s = streamed(release_model, recording(), 1280, GenerationConfig())
    c, answer = release_model.config, make_answer(release_model, s.result(), 1.0)
    text = [(f.position, f.text_id, f.text) for f in frames if f.text_id not in (c.pad_id, c.bos_id, c.eos_id)]
    func = [(f.position, f.function_id, f.function_text) for f in frames if f.function_id != c.pad_id]
    assert [(p.frame, p.token_id, p.text) for p in answer.text_pieces] == text and len(text) > 5
    assert [(p.frame, p.token_id, p.text) for p in answer.function_pieces] == func and len(func) > 5


def test_pieces_joined_are_the_text_even_where_the_clean_up_joins_them():
    """With transformers' space clean-up, "s" after " '" turns "Hello '" into "Hello's": the piece of " '" gives
    nothing (the clean-up could still drop its space), the piece of "s" gives "'s"; the pieces, joined, are the
    decode of all the ids, and none takes text back."""
    tok = TextTokenizer(model("tiny_model").tokenizer.path)
    tok.clean_up_spaces = True
    ids = tok.encode("Hello") + tok.encode(" '") + tok.encode("s")
    pad = tok.token_to_id("<s>")
    pieces = channel_pieces(tok, [pad, *ids], 10, {pad})
    assert [p.frame for p in pieces] == list(range(11, 11 + len(ids)))
    assert tok.decode(ids[:-1]) == "Hello '" and tok.decode(ids) == "Hello's"
    assert "".join(p.text for p in pieces) == "Hello's" and pieces[-1].text == "'s"


def test_the_conversation_goes_on():
    """A, then silence, then B in one session equals the offline loop on the concatenation."""
    m, config = model("tiny_model_aria"), GenerationConfig(reference=True)  # the checkpoint's sampling TTS
    a = recording()
    b = recording()[::-1].copy()
    quiet = np.zeros(16000, np.float32)
    s = m.session(PROMPT, seed=7, config=config)
    frames = s.feed(a, 16000) + s.feed(quiet, 16000)
    after_a = s.position
    frames += [f for chunk in chunks(b, 999) for f in s.feed(chunk, 16000)] + s.flush()
    whole = m.generate(np.concatenate([a, quiet, b]), 16000, system_prompt=PROMPT, seed=7, config=config)
    r = s.result()
    assert after_a > s.prompt_frames + 30 and s.position > after_a + 20
    assert np.array_equal(r.text_tokens, whole.text_tokens)
    assert np.array_equal(r.audio_codes, whole.audio_codes)
    assert np.abs(r.audio - whole.audio).max() <= 1e-5


def test_the_timeline_limit_is_a_clear_error_before_it_is_crossed(monkeypatch):
    m = model("tiny_model")
    s = m.session(PROMPT, config=GenerationConfig(reference=True))
    limit = s.prompt_frames + 10
    monkeypatch.setattr(session_module, "TIMELINE_LIMIT", limit)
    monkeypatch.setattr(s.group, "max_positions", limit)  # its group's bound, read from the limit when it was made
    frame = np.zeros(1280, np.float32)
    done = [f for _ in range(9) for f in s.feed(frame, 16000)]
    assert s.position == limit - 1
    with pytest.raises(TimelineFull, match=f"pass {limit} timeline positions"):
        s.feed(np.zeros(1280 * 3, np.float32), 16000)  # would make 3 more
    assert s.position == limit - 1 and len(done) == 9  # nothing of the refused chunk was taken
    assert len(s.feed(frame, 16000)) == 1 and s.position == limit  # what still fits is served
    with pytest.raises(TimelineFull):
        s.flush()  # the end would add a position


def test_any_rate_is_resampled_as_a_stream():
    """48 kHz stereo int16 in odd chunks: the same frames as in one call (soxr's stream resampler carries its
    state), and within resampling's own difference of the offline loop on the same audio."""
    import soxr

    m, config = model("tiny_model"), GenerationConfig(reference=True, **TTS["greedy"])
    high = np.round(soxr.resample(recording(), 16000, 48000) * 20000).astype(np.int16)
    stereo = np.stack([high, high], axis=1)
    one, s1 = streamed_at(m, stereo, None, config)
    many, s2 = streamed_at(m, stereo, 4801, config)
    assert np.array_equal(s1.result().audio_codes, s2.result().audio_codes)
    assert np.array_equal(s1.result().audio, s2.result().audio)
    offline = m.generate(stereo, 48000, system_prompt=PROMPT, config=config)
    assert np.array_equal(s1.result().text_tokens, offline.text_tokens)
    assert len(s1.result().audio) == len(offline.audio)


def streamed_at(m, x, size, config):
    s = m.session(PROMPT, config=config)
    frames = [f for chunk in chunks(x, size) for f in s.feed(chunk, 48000)] + s.flush()
    return frames, s


def test_frames_carry_every_channel():
    m = model("tiny_model")
    s = m.session(PROMPT)  # app mode: the codec starts 8 frames before the user's first
    frames = s.feed(recording()[:1280 * 10 + 255], 16000)  # frame k needs samples up to 1280 k + 256
    assert [f.position for f in frames] == list(range(s.prompt_frames, s.prompt_frames + 10))
    for f in frames:
        assert f.codes.shape == (31,) and f.codes.dtype == np.int32
        assert f.audio.dtype == np.float32 and len(f.audio) == SAMPLES_PER_FRAME
        assert f.seconds["total"] > 0
        assert f.turn in (None, "start", "end")
    assert s.setup_seconds > 0 and s.sample_rate == 22050 and s.input_rate == 16000
    assert "".join(f.text for f in frames) == m.tokenizer.decode(
        [f.text_id for f in frames if f.text_id not in (m.config.pad_id, m.config.bos_id, m.config.eos_id)])


def test_stream_generator_and_stopping_it():
    m = model("tiny_model")
    s = m.session(PROMPT)
    it = s.stream(chunks(recording(), 2000), 16000)
    first = [next(it) for _ in range(3)]
    it.close()  # the caller stops: nothing more runs
    assert [f.position for f in first] == [s.prompt_frames + i for i in range(3)]
    assert s.position <= s.prompt_frames + 3 + 2  # at most the rest of the chunk that was being fed


def test_bad_audio_is_a_clear_error():
    m = model("tiny_model")
    s = m.session()
    with pytest.raises(AudioInputError, match="NaN"):
        s.feed(np.array([0.0, np.nan] * 500, np.float32), 16000)
    s.feed(np.zeros(100, np.float32), 44100)
    with pytest.raises(AudioInputError, match="44100 Hz; got 16000 Hz"):
        s.feed(np.zeros(100, np.float32), 16000)
    with pytest.raises(AudioInputError, match="shape"):
        s.feed(np.zeros((2, 2, 2), np.float32), 44100)
    s.flush()
    with pytest.raises(AudioInputError, match="has ended"):
        s.feed(np.zeros(100, np.float32), 44100)


def test_text_stream_waits_for_a_whole_character():
    """A multi-byte character split over two byte-level tokens shows once, with the token that completes it."""
    tok = model("tiny_model").tokenizer
    ids = tok.encode("é")
    if len(ids) < 2:
        pytest.skip("this tokenizer encodes é as one token")
    stream = TextStream(tok, skip=set())
    assert [stream.add(i) for i in ids] == [""] * (len(ids) - 1) + ["é"]


@pytest.mark.parametrize("clean_up_spaces", [False, True])
def test_text_stream_pieces_joined_are_the_decode_of_all_the_ids(clean_up_spaces):
    """After every id the pieces so far, joined, are the start of the decode of all the ids so far (no piece takes
    text back), and with ``finish`` they are all of it, though only the last ids are decoded: random ids of the
    checkpoint's byte-level tokenizer (characters split over ids, special ids that decode to nothing), long enough to
    move the anchor many times; with transformers' space clean-up too, whose replacements join text across ids
    (' .' -> '.', " n" + "'t" -> "n't", "  '" + " s" -> "'s")."""
    tok = TextTokenizer(model("tiny_model").tokenizer.path)
    tok.clean_up_spaces = clean_up_spaces
    rng = np.random.default_rng(1)
    nothing = [tok.token_to_id("<s>")] * 12  # decode to nothing (special), between what the clean-up joins
    pieces = [tok.encode(t) for t in (" .", " ,", " 's", " '", " ' ", " n", "'t", " n't", "  ", " ", "'ve", " ?",
                                      "s", "é", "€", "😀", " the cat")] + [tok.encode(" '") + nothing + tok.encode("s")]
    held = 0
    for _ in range(20):
        stream, ids, given = TextStream(tok, skip=set()), [], ""
        for _ in range(int(rng.integers(200, 400))):  # a random id, or a piece that the clean-up or UTF-8 acts on
            new = [int(rng.integers(tok.vocab_size))] if rng.random() < 0.4 else pieces[int(rng.integers(len(pieces)))]
            for i in new:
                ids.append(i)
                given += stream.add(i)
                whole = tok.decode(ids)
                assert whole.startswith(given)
                held += given != whole
        assert given + stream.finish() == tok.decode(ids)
        assert len(stream.ids) < 64 < len(ids)  # the anchor moved: only the last ids were decoded
    assert held > 100  # text was held back (and given later) many times


def test_the_readme_streaming_example_runs(tmp_path):
    """docs/examples/stream_session.py on our tiny checkpoint (random weights: its words are noise) writes an answer
    of one 1764-sample piece per 80 ms of input and prints what it heard and said."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from voicechat.random_checkpoint import write_checkpoint

    root = Path(__file__).parents[1]
    ckpt = write_checkpoint(tmp_path / "ckpt", "nested")
    out = tmp_path / "answer.wav"
    run = subprocess.run([sys.executable, str(root / "docs" / "examples" / "stream_session.py"),
                          str(HARNESS_WAV), str(out), "--model", str(ckpt), "--tail", "0.4"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(root)})  # as after `pip install .`
    assert run.returncode == 0, run.stderr
    answer, rate = sf.read(out, dtype="float32")
    frames = -(-(len(recording()) + 6400) // 1280)  # recording + 0.4 s, in 80 ms frames (the last one padded)
    assert rate == 22050 and abs(len(answer) - frames * SAMPLES_PER_FRAME) <= 2 * SAMPLES_PER_FRAME
    assert "ready in" in run.stdout and "user said:" in run.stdout and "assistant said:" in run.stdout


@pytest.mark.parametrize("size", CHUNKS)
@pytest.mark.parametrize("name", ["tiny_model", "tiny_v2_aria"])
def test_streamed_encoder_frames_equal_the_whole_recordings(name, size):
    """The perception stream (steady frames compiled on a GPU) against the encoder run on the whole recording at once,
    NeMo's layout: the same frames, the padded end included, up to float32 rounding (the attention blocks differ: one
    query a block in the stream, 64 in the whole recording)."""
    from voicechat.stt.perception import PerceptionStream

    perception = model(name).net.stt_model.perception
    x = recording()
    whole, lengths, encoded = perception(mx.array(x)[None], mx.array([len(x)]))
    stream = PerceptionStream(perception)
    pieces = [stream.push(chunk) for chunk in chunks(x, size)] + [stream.finish()]
    projected = np.concatenate([np.array(p) for p, _ in pieces])
    frames = np.concatenate([np.array(e) for _, e in pieces])
    assert stream.valid_frames == int(lengths[0])
    assert np.abs(frames - np.array(encoded[0])).max() <= 1e-5
    assert np.abs(projected - np.array(whole[0])).max() <= 1e-5


def test_a_bfloat16_model_keeps_bfloat16_state(release_model):
    """In bfloat16 (the GPU's dtype) nothing turns the speech path or the LLM to float32 by accident (a float32 operand
    makes MLX convert every bfloat16 weight it meets, every frame): after a second of conversation the encoder's
    caches, the LLM's caches and the codec's histories are bfloat16; float32 are only what docs/model.md names: the
    Mamba SSM states and the codec head's overlap-add tail (pending samples and envelope)."""
    m = voicechat.load(release_model.directory, dtype=mx.bfloat16)
    s = m.session(system_prompt=PROMPT)
    s.feed(np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1, 16000)
    llm = m.config.llm
    ssm_shape = (1, llm.mamba_num_heads, llm.mamba_head_dim, llm.ssm_state_size)
    assert {a.dtype for a in s.listener.arrays()} == {mx.bfloat16}
    codec = s.group.codec  # a lone session is a group of one: its state is the group's row 0
    assert {a.dtype for a in codec.histories} == {mx.bfloat16}
    assert {a.dtype for a in (codec.pending, codec.pending_envelope)} == {mx.float32}
    floats = [a for a in s.group.lm.arrays if mx.issubdtype(a.dtype, mx.floating)]
    assert {a.dtype for a in floats if a.shape != ssm_shape} == {mx.bfloat16}
    assert {a.dtype for a in floats if a.shape == ssm_shape} == {mx.float32}
    assert {a.dtype for a in s.group.tts_state.arrays() if mx.issubdtype(a.dtype, mx.floating)} == {mx.bfloat16}
    assert s.feed(np.zeros(1280, np.float32), 16000)[0].audio.dtype == np.float32  # what the caller gets


KEPT_AFTER_THE_END = '''
import functools
import sys

import numpy as np

import voicechat


@functools.lru_cache(maxsize=None)  # as FastAPI's route cache: its keys live until the interpreter's last teardown
def cached(key) -> bool:
    return True


model = voicechat.load(sys.argv[1])
session = model.session(seed=0)
list(session.feed(np.zeros(24000, np.float32), 24000))  # a browser's rate: soxr's stream resampler
session.flush()
cached(session)  # kept for its result, as the app's recorder keeps a conversation
'''


def test_an_ended_session_kept_to_the_exit_leaves_nanobind_nothing_to_report(tmp_path):
    """An ended session gives up soxr's stream: kept until the interpreter's last teardown (the app's and serve's
    recorders, through FastAPI's cache) it made nanobind print "leaked instance" lines at every exit (issue 39)."""
    script = tmp_path / "kept.py"
    script.write_text(KEPT_AFTER_THE_END)
    p = subprocess.run([sys.executable, str(script), str(NEMO / "tiny_model")], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(TESTS.parent)}, timeout=300)
    assert p.returncode == 0 and p.stderr == "", p.stderr
