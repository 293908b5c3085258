"""voicechat/limits.py, the one place that checks a conversation's settings (docs/limits.md): each bad value is one
SettingError naming its setting, from ``GenerationConfig``, ``model.session``, ``model.generate`` and the engine,
before any model work. The CLI, the app and the Realtime server are tested as users run them in test_cli.py,
test_app.py and test_realtime.py."""

from __future__ import annotations

import math
import time
from functools import lru_cache

import numpy as np
import pytest

from conftest import HARNESS_WAV, NEMO
import voicechat
from voicechat import GenerationConfig, engine as eng
from voicechat.tools import Tool, system_prompt
from voicechat.limits import (MAX_PROMPT_CHARS, MAX_PROMPT_POSITIONS, SettingError, check_prompt_positions,
                              checked_seed)

LONG_PROMPT = " ".join(f"w{i}" for i in range(4000))  # under the character cap, past the positions' cap


@lru_cache(maxsize=None)
def model():
    return voicechat.load(NEMO / "tiny_model")


@pytest.mark.parametrize("field, value", [
    ("extra_seconds", -1.0), ("extra_seconds", math.nan), ("extra_seconds", 656.0),
    ("max_extra_seconds", math.inf), ("max_extra_seconds", 700.0), ("max_extra_seconds", -0.1),
    ("max_input_seconds", 0.0), ("text_temperature", -5.0), ("text_temperature", math.nan),
    ("text_top_p", 5.0), ("text_top_p", 0.0), ("text_repetition_penalty", 0.0), ("tts_guidance_scale", math.nan),
    ("tts_top_p", 1.5), ("tts_top_k", 0), ("tts_top_k", -1), ("tts_top_k", 2.5), ("tts_noise_scale", -1.0),
    ("text_temperature", "0.3"), ("text_top_p", True),
])
def test_generation_config_refuses_each_bad_value_naming_it(field, value):
    with pytest.raises(SettingError) as e:
        GenerationConfig(**{field: value})
    assert e.value.param == field and "\n" not in str(e.value) and repr(value) in str(e.value)


def test_generation_config_takes_the_edges_of_each_range():
    GenerationConfig(extra_seconds=0.0, max_extra_seconds=655.36, text_temperature=0.0, text_top_p=1.0,
                     text_repetition_penalty=1e-3, tts_guidance_scale=0.0, tts_top_p=1.0, tts_top_k=1,
                     tts_noise_scale=0.0)


def test_seeds_are_0_to_2_64_minus_1():
    assert [checked_seed(s) for s in (0, 2 ** 64 - 1, 3.0)] == [0, 2 ** 64 - 1, 3]
    for bad in (-1, 2 ** 64, 1.5, math.nan, math.inf, True, "3", None):
        with pytest.raises(SettingError, match="the seed must be a whole number from 0 to 2\\^64 - 1"):
            checked_seed(bad)


def test_the_prompt_positions_cap():
    check_prompt_positions(MAX_PROMPT_POSITIONS)
    with pytest.raises(SettingError, match=f"takes {MAX_PROMPT_POSITIONS + 1} timeline positions"):
        check_prompt_positions(MAX_PROMPT_POSITIONS + 1)


@pytest.mark.parametrize("kwargs, param, words", [
    (dict(seed=-1), "seed", "the seed must be"),
    (dict(seed=2 ** 64), "seed", "the seed must be"),
    (dict(system_prompt="y" * 100_000), "system_prompt", f"the system prompt has 100000 characters; the limit is "
                                                         f"{MAX_PROMPT_CHARS}"),
    (dict(system_prompt=LONG_PROMPT), "system_prompt", "timeline positions; the limit is 2048"),
    (dict(system_prompt="caf\udce9"), "system_prompt", "character 3 is not Unicode text"),
    (dict(system_prompt=b"bytes"), "system_prompt", "the system prompt must be text (got bytes)"),
])
def test_a_session_refuses_bad_settings_before_any_model_work(kwargs, param, words):
    """A 100 KB prompt made the prefill ask for tens of GB (a segmentation fault): now it is one line."""
    with pytest.raises(SettingError) as e:
        model().session(**kwargs)
    assert e.value.param == param and words in str(e.value)
    with pytest.raises(SettingError):
        model().generate(HARNESS_WAV, **kwargs)


@pytest.mark.parametrize("config, param", [(GenerationConfig(extra_seconds=60.0), "extra_seconds"),
                                           (GenerationConfig(max_extra_seconds=60.0), "max_extra_seconds")])
def test_work_past_the_timeline_is_refused_before_it_starts(config, param):
    """600 s of recording and 60 s of silence pass the 655 s timeline: refused at once, not after minutes."""
    ten_minutes = np.zeros(600 * 16000, np.float32)
    with pytest.raises(SettingError) as e:
        model().generate(ten_minutes, 16000, config=config)
    assert e.value.param == param and "more than the timeline's 8192" in str(e.value)


def test_tool_declarations_count_in_the_prompts_characters_before_the_tokenizer_runs():
    """A description of megabytes went to the tokenizer whole (24 s on the Realtime server's event loop): the prompt
    the model reads, declarations included, is measured in characters first."""
    long = Tool("lookup", "d" * MAX_PROMPT_CHARS)
    with pytest.raises(SettingError, match=f"with the tools' declarations has {len(system_prompt('', [long]))} "
                                           f"characters; the limit is {MAX_PROMPT_CHARS}") as e:
        model().session(tools=[long])
    assert e.value.param == "system_prompt"
    engine = eng.Engine(lambda progress_bar: model(), name="tiny").start()
    try:
        while engine.status().state != eng.READY:
            time.sleep(0.05)
        with pytest.raises(SettingError, match="with the tools' declarations has"):
            engine.open_live(eng.LiveRequest(system_prompt="Be brief.", tools=(long,)))
    finally:
        engine.close()


def test_the_engine_refuses_bad_settings_before_they_wait():
    """The app's recordings and every live conversation: the request is refused by submit / open_live (the
    caller's thread, the tokenizer only), so nothing waits in the queue for a failure."""
    engine = eng.Engine(lambda progress_bar: model(), name="tiny").start()
    try:
        while engine.status().state != eng.READY:
            time.sleep(0.05)
        with pytest.raises(SettingError, match="timeline positions"):
            engine.submit(eng.Request(np.zeros(16000, np.float32), 16000, system_prompt=LONG_PROMPT))
        with pytest.raises(SettingError, match="the seed must be"):
            engine.open_live(eng.LiveRequest(seed=-1))
        assert engine.pending() == 0
        job = engine.submit(eng.Request(np.zeros(16000, np.float32), 16000, system_prompt="Be brief."))
        assert [e.kind for e in job][-1] == eng.DONE  # the engine answers the next request
    finally:
        engine.close()
