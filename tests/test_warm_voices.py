"""A speaker's TTS warm-up is computed once per model and kept (docs/batching.md §1): a conversation whose speaker's
warm-up caches came from a conversation before equals the same conversation on a fresh model, which computes them;
a known voice's set-up skips the warm-up's stages; two speakers never share caches; the model keeps a few.

The reference is the conversation alone on a model freshly loaded (nothing kept): its set-up runs the warm-up
forward itself, as every set-up did before the caches were kept. tests/test_conversation.py checks that lone session
against NeMo's offline output."""

import numpy as np
import pytest

from conftest import HARNESS_WAV, NEMO
import voicechat
from voicechat.model import WARM_VOICES, content_key
from voicechat.network import prompt_frames
from voicechat.timeline.conversation import PREFILL_STAGE, WARMUP_STAGE_LAYERS

from test_loop import RATE, SPEAKER, Talk, alone, assert_same, drive, noise
from test_conversation import TTS, recording

CLONED = str(HARNESS_WAV)  # a voice cloned from a recording (the question's speaker), unlike either checkpoint's
# the voice of the conversation that runs while another joins: none of the voices the tests join with
RUNNING_VOICE = ((np.random.default_rng(9).standard_normal(3 * 22050) * 0.1).astype(np.float32), 22050)


def fresh(name: str):
    return voicechat.load(NEMO / name)


def stages_without_warm_up(prompt_positions: int) -> int:
    """A known voice's set-up: its prefill's stages, then the join's; the join alone without a prompt."""
    return -(-prompt_positions // PREFILL_STAGE) + 1


def stages_with_warm_up(m, prompt_positions: int) -> int:
    """A new voice's set-up: the codes' stage, the warm-up's stages, the prefill's, the join's (as tests/test_loop.py
    counts)."""
    layers = len(m.net.tts_model.tts_model.backbone.layers)
    return 1 + -(-layers // WARMUP_STAGE_LAYERS) + -(-prompt_positions // PREFILL_STAGE) + 1


def join_beside_a_running_one(m, talk: Talk) -> tuple[list, object, int]:
    """``talk`` joins a group where another conversation runs (so its set-up runs a stage a tick), then both run to
    the end -> (its frames, its session, its set-up's stages)."""
    group = m.sessions(2)
    running = Talk(noise(3.0, 9), 1280, 0, "Hi.", 5, RUNNING_VOICE).open(m, group)
    chunks = Talk(noise(3.0, 9), 1280).chunks()
    running.push(chunks.pop(0), RATE)
    group.step()
    assert not running.setting_up  # alone in the group, its set-up ran whole
    joining, joining_chunks = talk.open(m, group), talk.chunks()
    frames, stages = [], 0
    while joining.setting_up:
        running.push(chunks.pop(0), RATE)
        joining.push(joining_chunks.pop(0), RATE)
        frames += group.step().get(joining, [])
        stages += 1
    frames += drive(group, {running: chunks, joining: joining_chunks})[joining]
    return frames, joining, stages


@pytest.mark.parametrize("name, speaker", [("tiny_model", None), ("tiny_model", CLONED), ("tiny_model_aria", None),
                                           ("tiny_model_aria", str(SPEAKER))])
def test_a_known_voice_joins_without_the_warm_up_and_equals_a_fresh_models_conversation(name, speaker):
    """The checkpoint's voice (tiny_model: its reference WAV; tiny_model_aria: its latent "Aria", which its TTS
    reads) and a cloned voice. A first conversation in the voice (another seed and prompt) leaves its warm-up with
    the model; the second, with the sampled TTS (so its seed's draws are heard), joins in its prefill's stages alone
    and gives what it gives on a fresh model: ids and codes identical, samples within 1e-5."""
    m, x = fresh(name), recording()
    first = Talk(x[::-1].copy(), 1280, 0, "Be brief.", 3, speaker, dict(**TTS["sampled"]))
    second = Talk(x, 999, 0, "You are a helpful assistant.", 7, speaker, dict(**TTS["sampled"]))
    _, s, stages = join_beside_a_running_one(m, first)
    assert stages == stages_with_warm_up(m, s.prompt_frames)
    assert len(m._warm_voices) == 2  # the running conversation's voice and the first's
    frames, s, stages = join_beside_a_running_one(m, second)
    assert stages == stages_without_warm_up(s.prompt_frames) < stages_with_warm_up(m, s.prompt_frames)
    assert len(m._warm_voices) == 2
    solo, solo_session = alone(fresh(name), second)
    assert_same(solo, frames, solo_session, s, True)


def test_a_known_voice_without_a_prompt_joins_in_one_stage():
    m = fresh("tiny_model_aria")
    talk = Talk(noise(2.0, 1), 1280, 0, "", 2, RUNNING_VOICE)  # the running conversation's voice: known
    frames, s, stages = join_beside_a_running_one(m, talk)
    assert s.prompt_frames == 0 and stages == 1
    solo, solo_session = alone(fresh("tiny_model_aria"), talk)
    assert_same(solo, frames, solo_session, s, True)


def test_two_speakers_do_not_share_a_warm_up():
    """A cloned voice after the checkpoint's: its own warm-up (all its stages), its own entry, its own conversation
    (the fresh model's); the checkpoint's voice after it still its own."""
    m, x = fresh("tiny_model"), recording()
    checkpoint_voice = Talk(x, 1280, 0, "Hi.", 1, None)
    cloned = Talk(x, 1280, 0, "Hi.", 1, CLONED)
    join_beside_a_running_one(m, checkpoint_voice)
    frames, s, stages = join_beside_a_running_one(m, cloned)
    assert stages == stages_with_warm_up(m, s.prompt_frames) and len(m._warm_voices) == 3
    ours, theirs = (m._warm_voices[m._voice_key(*m._speaker(v))] for v in (CLONED, None))
    assert not np.array_equal(ours[0].keys, theirs[0].keys)
    solo, solo_session = alone(fresh("tiny_model"), cloned)
    assert_same(solo, frames, solo_session, s, True)
    frames, s, stages = join_beside_a_running_one(m, checkpoint_voice)
    assert stages == stages_without_warm_up(s.prompt_frames)
    solo, solo_session = alone(fresh("tiny_model"), checkpoint_voice)
    assert_same(solo, frames, solo_session, s, True)


def test_the_model_keeps_the_last_voices_each_in_its_positions_alone():
    """WARM_VOICES speakers at most, the one joined least recently dropped first; an entry holds the warm-up's
    positions alone (not its buffers' capacity): layers x (keys, values) x 2 CFG rows x heads x 37 x head dim."""
    m = fresh("tiny_model")
    rng = np.random.default_rng(0)
    voices = [((rng.standard_normal(22050) * 0.1).astype(np.float32), 22050) for _ in range(WARM_VOICES + 1)]
    key = lambda voice: m._voice_key(*m._speaker(voice))  # noqa: E731
    for voice in voices[:WARM_VOICES]:
        m.session(seed=1, speaker=voice)
    assert list(m._warm_voices) == [key(v) for v in voices[:WARM_VOICES]]
    m.session(seed=2, speaker=voices[0])  # known: the most recent now
    m.session(seed=1, speaker=voices[WARM_VOICES])
    assert list(m._warm_voices) == [key(v) for v in voices[2:WARM_VOICES]] + [key(voices[0]), key(voices[-1])]
    # the speakers' warm-up codes are kept the same way: the checkpoint's voice (the load's warm-up) and voices[1]
    # dropped, the others in the order they were last used
    codes = lambda voice: content_key(m._speaker(voice)[1])  # noqa: E731
    assert list(m._warmup_codes) == [codes(v) for v in voices[2:WARM_VOICES]] + [codes(voices[0]), codes(voices[-1])]
    tts = m.config.tts.backbone
    entry = m._warm_voices[key(voices[0])]
    per_layer = 2 * 2 * tts.num_key_value_heads * prompt_frames(m.config) * tts.head_dim * 4  # float32
    assert sum(a.nbytes for cache in entry for a in cache.arrays()) == len(tts.layer_types) * per_layer
