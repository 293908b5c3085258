"""The app's Voice control in a real browser (Debian's chromium, Playwright), on NeMo's tiny checkpoint with the
"Aria" latent: a voice added from the speaker WAV changes the answer, is still there after a restart and gives the
same answer then; a bad recording is refused in one line; a preview says the sentence; Talk live offers the voice.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import soundfile as sf

from test_browser import save  # (skips without chromium)
from test_talk_browser import browser, open_tab  # noqa: F401  (chromium with the fake microphone's file)
from playwright.sync_api import expect  # noqa: E402

import app  # noqa: E402
from conftest import NEMO  # noqa: E402
from test_app import EXAMPLE, free_port  # noqa: E402
from voicechat import engine as eng  # noqa: E402
from voicechat.voices import PREVIEW_SENTENCE  # noqa: E402

SPEAKER_WAV = NEMO / "speaker_22k.wav"
TIMEOUT = 120000  # ms: a run of the tiny model on a slow shared machine


def start_app(outputs: Path):
    """The app on NeMo's tiny "Aria" checkpoint, as ``python app.py --model DIR --outputs OUTPUTS`` starts it."""
    engine = eng.Engine(eng.hub_model(str(NEMO / "tiny_model_aria"), offline=True), name="tiny_model_aria").start()
    demo = app.build_app(engine, outputs=outputs)
    app.launch(demo, outputs, server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    return demo, engine


def stop_app(demo, engine) -> None:
    demo.close()
    engine.close()


def open_page(browser, url: str):  # noqa: F811
    page = browser.new_context(viewport={"width": 1280, "height": 1000}).new_page()
    page.goto(url, wait_until="networkidle")
    expect(page.locator("#vc-status")).to_contain_text("Ready when you are", timeout=TIMEOUT)
    return page


def choose(page, label: str) -> None:
    page.get_by_label("Voice", exact=True).click()
    page.get_by_role("option", name=re.compile("^" + re.escape(label))).click()


def run_once(page, outputs: Path) -> dict:
    """Run the example question; the conversation.json it saved."""
    before = set(outputs.glob("runs/*/conversation.json"))
    clear = page.locator("#vc-input").get_by_role("button", name="Clear")
    if clear.count():  # the last run's recording
        clear.click()
    page.locator("#vc-input input[type=file]").set_input_files(str(EXAMPLE))
    expect(page.locator("#vc-status")).to_contain_text("Recording ready", timeout=TIMEOUT)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#vc-status")).to_contain_text("Answer ready", timeout=TIMEOUT)
    (new,) = set(outputs.glob("runs/*/conversation.json")) - before
    return json.loads(new.read_text())


def test_a_voice_added_in_the_app_changes_the_answer_and_survives_a_restart(browser, tmp_path):  # noqa: F811
    outputs = tmp_path / "outputs"
    sf.write(tmp_path / "quiet.wav", np.zeros(3 * 22050, np.float32), 22050)
    demo, engine = start_app(outputs)
    try:
        page = open_page(browser, demo.local_url)
        expect(page.get_by_label("Voice", exact=True)).to_have_value("Aria (the checkpoint's voice)")
        in_aria = run_once(page, outputs)

        page.get_by_role("button", name="Voices: add one from a recording, hear one, rename, remove").click()
        line = page.locator("#vc-voice-status")
        name = page.locator("#vc-voice-name").get_by_role("textbox")
        page.locator("#vc-voice-recording input[type=file]").set_input_files(str(tmp_path / "quiet.wav"))
        name.fill("Quiet")
        page.locator("#vc-voice-add").click()
        expect(line).to_contain_text("Not added: the recording is silent (its loudest 20 ms is at -200 dBFS)")
        page.locator("#vc-voice-recording").get_by_role("button", name="Clear").click()
        page.locator("#vc-voice-recording input[type=file]").set_input_files(str(SPEAKER_WAV))
        name.fill("Fixture")
        page.locator("#vc-voice-add").click()
        expect(line).to_contain_text("Added Fixture (added 20", timeout=TIMEOUT)
        expect(page.get_by_label("Voice", exact=True)).to_have_value(re.compile("^Fixture"))
        assert (outputs / "voices" / "Fixture" / "prompt.wav").is_file()
        page.locator("#vc-voice-preview").click()
        expect(line).to_contain_text(f"Fixture: \u201c{PREVIEW_SENTENCE}\u201d", timeout=TIMEOUT)
        expect(page.locator("#vc-voice-heard a[href*='Fixture-']").first).to_be_attached()
        save(page.locator("#vc-voices"), "voices_panel.png")
        in_fixture = run_once(page, outputs)
        page.context.close()
    finally:
        stop_app(demo, engine)
    assert (in_aria["voice"], in_fixture["voice"]) == ("Aria", "Fixture")
    assert in_fixture["audio_codes"] != in_aria["audio_codes"]  # the voice is heard

    demo, engine = start_app(outputs)  # a restart on the same outputs folder
    try:
        page = open_page(browser, demo.local_url)
        expect(page.get_by_label("Voice", exact=True)).to_have_value("Aria (the checkpoint's voice)")
        choose(page, "Fixture (added 20")
        again = run_once(page, outputs)
        live = talk_live_record(browser, demo.local_url, "Fixture", tmp_path / "quiet.wav")
        choose(page, "Mic (added 20")  # added in Talk live: listed here once the dropdown is opened
        choose(page, "Fixture (added 20")
        page.get_by_role("button", name="Voices: add one from a recording, hear one, rename, remove").click()
        page.locator("#vc-voice-name").get_by_role("textbox").fill("Fixture Two")
        page.locator("#vc-voice-rename").click()
        expect(page.locator("#vc-voice-status")).to_contain_text("Renamed Fixture to Fixture Two.")
        expect(page.get_by_label("Voice", exact=True)).to_have_value(re.compile("^Fixture Two"))
        page.locator("#vc-voice-remove").click()
        expect(page.locator("#vc-voice-status")).to_contain_text("Removed Fixture Two.")
        expect(page.get_by_label("Voice", exact=True)).to_have_value("Aria (the checkpoint's voice)")
        assert not (outputs / "voices" / "Fixture Two").exists() and not (outputs / "voices" / "Fixture").exists()
        page.context.close()
    finally:
        stop_app(demo, engine)
    assert again["voice"] == "Fixture" and again["audio_codes"] == in_fixture["audio_codes"]
    assert again["text_tokens"] == in_fixture["text_tokens"]
    assert live["source"] == "live" and live["voice"] == "Fixture"
    assert (outputs / "voices" / "Mic" / "prompt.wav").is_file()  # what Talk live added stays


def talk_live_record(browser, url: str, voice: str, quiet: Path) -> dict:  # noqa: F811
    """In the Talk live tab: a silent file refused, a voice recorded from the (fake) microphone added and heard; then
    a short conversation in ``voice``, stopped and saved: its record."""
    page = open_tab(browser, url)
    select, line = page.locator("#live-voice"), page.locator("#live-voice-line")
    expect(select.locator("option")).to_have_count(2, timeout=TIMEOUT)
    assert select.locator("option").all_inner_texts()[0] == "Aria (the checkpoint's voice)"
    page.get_by_text("Add a voice from a recording").click()
    page.locator("#live-voice-file").set_input_files(str(quiet))
    page.locator("#live-voice-name").fill("Quiet")
    page.locator("#live-voice-add").click()
    expect(line).to_have_text("Not added: the recording is silent (its loudest 20 ms is at -200 dBFS); record a few "
                              "seconds of speech closer to the microphone", timeout=TIMEOUT)
    page.locator("#live-voice-record").click()
    expect(line).to_contain_text("Recorded 5 s from the microphone", timeout=TIMEOUT)
    page.locator("#live-voice-name").fill("Mic")
    page.locator("#live-voice-add").click()
    expect(line).to_contain_text("Added Mic (added 20", timeout=TIMEOUT)
    expect(line).to_contain_text("from microphone.webm")
    expect(select.locator("option")).to_have_count(3)
    expect(select).to_have_value("Mic")
    page.locator("#live-voice-hear").click()
    expect(line).to_have_text(f"Mic: \u201c{PREVIEW_SENTENCE}\u201d", timeout=TIMEOUT)
    expect(page.locator("#live-voice-audio")).to_have_attribute("src", re.compile("^/live/voice/heard/Mic-.*wav$"))
    save(page.locator("#live-panel"), "live_voices.png")
    select.select_option(voice)
    expect(page.locator("#live-start")).to_be_enabled(timeout=TIMEOUT)
    page.locator("#live-start").click()
    expect(page.locator("#live-status")).to_contain_text("Live: talk now", timeout=TIMEOUT)
    page.wait_for_function("() => +document.querySelector('#live-stats').dataset.frames > 10", timeout=TIMEOUT)
    page.locator("#live-stop").click()
    page.locator("#live-save").click()
    expect(page.locator("#live-save-json")).to_be_visible(timeout=TIMEOUT)
    saved = page.locator("#live-save-json").get_attribute("href")
    record = json.loads(page.request.get(url.rstrip("/") + saved).body())
    page.context.close()
    return record
