"""The app in a real browser: Debian's chromium (/usr/bin/chromium) driven by Playwright, never a downloaded browser.

Uploads an example WAV (and an M4A), presses Run, and checks the transcript, the assistant text, the answer's audio
player and the timeline (a long answer's too: overview, scrolling, fixed row labels, no overlapping labels); records
with the fake microphone and runs it with Ctrl+Enter; shows the page of an app whose model is not there. Screenshots
go to outputs/screenshots/ (and to assets/screenshots/ for the README when VOICECHAT_UPDATE_SCREENSHOTS=1). The model
is `ScriptedModel` (tests/test_engine.py), a stand-in with a fixed answer.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[1]


def missing(chromium: str = CHROMIUM) -> str:
    """Every missing piece in one line (so that one install round is enough), or ""."""
    pieces = [] if Path(chromium).is_file() else [f"{chromium} (apt-get install chromium)"]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pieces.append("playwright (pip install -r tests/requirements.txt; never `playwright install`)")
    return "missing " + " and ".join(pieces) if pieces else ""


if missing():
    print(f"test_browser.py skipped: {missing()}", file=sys.__stderr__)
    pytest.skip(missing(), allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402

sys.path.insert(0, str(REPO))

import app  # noqa: E402
from test_app import EXAMPLE, EXAMPLE_FRAMES, free_port, write_m4a  # noqa: E402
from test_engine import ScriptedModel, loader_for  # noqa: E402
from voicechat import engine as eng  # noqa: E402
from voicechat.webui import record as record_tab  # noqa: E402

# docs/platform.md §6: headless Debian chromium; a fake microphone so the page never asks for a device
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream",
                 "--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required"]
SCREENSHOTS = [REPO / "outputs" / "screenshots"]
if os.environ.get("VOICECHAT_UPDATE_SCREENSHOTS") == "1":
    SCREENSHOTS.append(REPO / "assets" / "screenshots")


def test_the_skip_reason_names_every_missing_piece(tmp_path, monkeypatch):
    assert missing() == ""
    assert missing(str(tmp_path / "chromium")) == f"missing {tmp_path / 'chromium'} (apt-get install chromium)"
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # the import now fails, as when it is not installed
    both = missing(str(tmp_path / "chromium"))
    assert both.startswith(f"missing {tmp_path / 'chromium'} (apt-get install chromium) and playwright (pip install")


def serve(loader, name: str, outputs: Path, api_key=None):
    """The app on an engine with this loader, launched locally; yields its URL."""
    engine = eng.Engine(loader, name=name).start()
    demo = app.build_app(engine, outputs=outputs, api_key=api_key)
    app.launch(demo, outputs, server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
               quiet=True)
    yield demo.local_url
    demo.close()
    engine.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model = ScriptedModel(frame_delay=0.03)  # RTF about 0.4 on the screenshots
    for url in serve(loader_for(model), "scripted stand-in (browser test)", tmp_path_factory.mktemp("browser")):
        yield url, model


@pytest.fixture
def page(tmp_path):
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900}, permissions=["microphone"])
        yield context.new_page()
        context.close()


def save(locator_or_page, name: str) -> None:
    for folder in SCREENSHOTS:
        folder.mkdir(parents=True, exist_ok=True)
        kwargs = {"full_page": True} if hasattr(locator_or_page, "goto") else {}
        locator_or_page.screenshot(path=str(folder / name), animations="disabled", **kwargs)


def test_upload_run_and_see_the_answer(served, page):
    url, model = served
    page.goto(url, wait_until="networkidle")
    status = page.locator("#vc-status")
    expect(status).to_contain_text("Ready when you are")
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled()
    page.get_by_role("button", name="Advanced").click()  # the voice sliders start at the checkpoint's values
    for slider, value in (("guidance", 0.35), ("top-p", 0.9), ("noise", 0.004)):
        expect(page.locator(f"#vc-tts-{slider} input[type=number]")).to_have_value(str(value))
    page.get_by_role("button", name="Advanced").click()
    page.locator("#vc-input input[type=file]").set_input_files(str(EXAMPLE))
    expect(status).to_contain_text(f"Recording ready{EXAMPLE.name}: 3.7 s.", timeout=20000)  # checked on arrival
    expect(page.locator("#vc-input").get_by_role("button", name="Play", exact=True)).to_be_visible(timeout=20000)
    gate = model.gate = threading.Semaphore(0)  # hold the model mid-answer
    page.get_by_role("button", name="Run", exact=True).click()

    words = model.tokenizer.encode(model.answer)
    half = words[: len(words) // 2]
    for _ in range(model.frames_to_say(EXAMPLE_FRAMES, len(half), record_tab.NVIDIA_PROMPT)):
        gate.release()
    expect(page.locator("#vc-assistant textarea")).to_have_value(model.decoded(half), timeout=30000)
    expect(status).to_contain_text(re.compile(r"frame \d+ of up to \d+ · .*RTF"))
    expect(page.get_by_role("button", name="Cancel")).to_be_enabled()
    save(page, "app_running.png")
    page.keyboard.press("Control+Enter")  # Run is off while the answer runs: the key is answered, not dropped
    expect(page.locator("#vc-shortcut-note")).to_contain_text("Run is off (Listening and answering")
    model.gate = None
    for _ in range(1000):
        gate.release()

    expect(page.locator("#vc-assistant textarea")).to_have_value(model.answer, timeout=60000)
    expect(page.locator("#vc-transcript textarea")).to_have_value(model.transcript)
    expect(status).to_contain_text("Answer ready")
    answer = page.locator("#vc-answer")
    play, pause = (answer.get_by_role("button", name=name, exact=True) for name in ("Play", "Pause"))
    expect(play.or_(pause)).to_be_visible()  # the player (it may already be playing: autoplay)
    expect(answer.locator("a[href*='answer.wav']").first).to_be_attached()
    expect(page.locator("#vc-timeline .vc-tl-detail")).to_be_visible()
    expect(page.locator("#vc-timeline .vc-tl-mini")).to_be_hidden()  # all of it is in view: no overview
    expect(page.locator("#vc-downloads a[href$='conversation.json']")).to_be_visible()
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled()
    page.get_by_role("button", name="Timings").click()
    expect(page.get_by_text("total (wall)")).to_be_visible()
    save(page, "app.png")
    save(page.locator("#vc-timeline"), "timeline.png")


def test_the_tools_panel_lists_the_built_in_tools_and_shows_what_the_model_reads(served, page):
    url, _ = served
    page.goto(url, wait_until="networkidle")
    picker = page.locator("#tools-picker")
    expect(picker).to_be_visible()
    boxes = picker.get_by_role("checkbox")
    expect(boxes).to_have_count(3)
    for label, _name in record_tab.tool_choices():
        expect(picker.get_by_label(label, exact=True)).not_to_be_checked()  # none ticked: NVIDIA's prompt alone
    page.get_by_role("button", name="What the model reads (the system prompt with the tools)").click()
    reads = page.locator("#vc-model-prompt textarea")
    expect(reads).to_have_value(record_tab.NVIDIA_PROMPT)
    picker.get_by_label(record_tab.tool_choices()[1][0], exact=True).check()
    expect(reads).to_have_value(record_tab.model_prompt(record_tab.NVIDIA_PROMPT, ["calculate"]))
    page.get_by_label("Assistant persona").click()  # another persona: the prompt and its tool block follow
    page.get_by_role("option", name="Brief answers").click()
    expect(reads).to_have_value(record_tab.model_prompt(record_tab.PROMPT_PRESETS["Brief answers"], ["calculate"]))
    save(page.locator("#vc-tools"), "tools_panel.png")


def test_record_with_the_microphone_and_run_with_ctrl_enter(served, page):
    url, model = served
    model.gate = None
    page.goto(url, wait_until="networkidle")
    page.get_by_role("button", name="Record audio").click()  # switch the input to the (fake) microphone
    page.get_by_role("button", name="Record", exact=True).click()
    page.wait_for_timeout(2000)  # the length of the recording, not a wait for something to happen
    page.get_by_role("button", name="Stop", exact=True).click()
    # the server has the recording once its check has answered (the page's value alone can still be uploading)
    expect(page.locator("#vc-status")).to_contain_text("Recording ready", timeout=30000)
    page.keyboard.press("Control+Enter")
    expect(page.locator("#vc-status")).to_contain_text("Answer ready", timeout=60000)
    assert model.calls[-1]["sample_rate"] in (44100, 48000)  # the browser's own rate; the engine resamples


def test_an_m4a_upload_is_passed_through_and_answered(served, page, tmp_path):
    """Gradio's Audio (type="filepath", no format) hands the server the uploaded file itself: the app decodes the
    AAC with PyAV."""
    import soundfile as sf

    url, model = served
    model.gate = None
    x, rate = sf.read(str(EXAMPLE), dtype="float32")
    m4a = write_m4a(tmp_path / "question.m4a", x, rate)
    page.goto(url, wait_until="networkidle")
    page.locator("#vc-input input[type=file]").set_input_files(str(m4a))
    expect(page.locator("#vc-status")).to_contain_text("Recording readyquestion.m4a: 3.8 s.", timeout=20000)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#vc-status")).to_contain_text("Answer ready", timeout=60000)
    assert model.calls[-1]["sample_rate"] == 16000


def test_a_bad_upload_is_refused_when_it_arrives(served, page, tmp_path):
    url, model = served
    bad = tmp_path / "holiday.wav"
    bad.write_text("not really a wav file")
    page.goto(url, wait_until="networkidle")
    page.locator("#vc-input input[type=file]").set_input_files(str(bad))
    status = page.locator("#vc-status")
    expect(status).to_contain_text("This recording cannot be used", timeout=20000)
    expect(status).to_contain_text("holiday.wav is not a readable audio file")
    expect(status).not_to_contain_text("/")  # no server folder
    expect(page.locator("#vc-input input[type=file]")).to_be_attached()  # the input is empty again


LONG_ANSWER = ("An octopus has three hearts, blue blood and nine brains, one in each arm and one in the middle. "
               "Each arm can taste what it touches, and the animal changes colour in a fraction of a second. ")


def test_the_timeline_of_a_long_answer(served, page):
    """A minute of answer: the overview holds all of it in the page width, the detail scrolls under it, a click in
    the overview moves the detail there, the row labels stay in view, and no two labels overlap on screen."""
    url, model = served
    model.gate, model.frame_delay, saved_answer = None, 0.0, model.answer
    words = len(model.tokenizer.encode(LONG_ANSWER))
    model.answer = LONG_ANSWER * (375 // words + 1)  # a word every other frame: 750+ frames = 60+ s
    try:
        page.goto(url, wait_until="networkidle")
        page.locator("#vc-input input[type=file]").set_input_files(str(EXAMPLE))
        expect(page.locator("#vc-status")).to_contain_text("Recording ready", timeout=20000)
        page.get_by_role("button", name="Run", exact=True).click()
        expect(page.locator("#vc-status")).to_contain_text("Answer ready", timeout=120000)
    finally:
        model.answer, model.frame_delay = saved_answer, 0.03
    view = page.locator("#vc-timeline")
    expect(view.locator(".vc-tl-detail")).to_be_visible()
    scroll, mini, labels = view.locator(".vc-tl-scroll"), view.locator(".vc-tl-mini"), view.locator(".vc-tl-labels")
    assert int(view.locator(".vc-tl").get_attribute("data-frames")) * 0.08 > 60
    width = scroll.evaluate("s => s.clientWidth")
    assert scroll.evaluate("s => s.scrollWidth") > 3 * width  # the detail scrolls
    assert abs(mini.bounding_box()["width"] - width) <= 1  # the overview fits the same width
    save(view, "timeline_long.png")

    label_box = labels.get_by_text("Words", exact=True).bounding_box()
    box = mini.bounding_box()
    page.mouse.click(box["x"] + 0.9 * box["width"], box["y"] + box["height"] / 2)  # 90% into the answer
    left = scroll.evaluate("s => s.scrollLeft")
    ppf, frames = (float(view.locator(".vc-tl").get_attribute(a)) for a in ("data-px-per-frame", "data-frames"))
    assert left == pytest.approx(0.9 * frames * ppf - width / 2, abs=2)  # centred on the point clicked
    window = view.locator(".vc-tl-window")
    assert float(window.get_attribute("x")) == pytest.approx(left / ppf, abs=0.1)  # the overview shows where
    assert float(window.get_attribute("width")) == pytest.approx(width / ppf, abs=0.1)
    assert labels.get_by_text("Words", exact=True).bounding_box() == label_box  # the row labels did not move
    scroll.evaluate("s => { s.scrollLeft = 0; }")
    expect(window).to_have_attribute("x", "0")  # scrolling the detail moves the window back

    boxes = view.locator(".vc-tl-word").evaluate_all(
        "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.top, r.left, r.right]; })")
    lanes: dict = {}
    for top, x0, x1 in boxes:
        lanes.setdefault(round(top), []).append((x0, x1))
    assert len(boxes) > 300
    for spans in lanes.values():
        spans.sort()
        overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if a[1] > b[0] + 0.5]
        assert not overlaps, overlaps[:3]


@pytest.fixture(scope="module")
def without_a_model(tmp_path_factory):
    """The app started with a model that is neither cached nor downloadable (offline, an unknown repo)."""
    yield from serve(app.model_loader("nobody/no-such-voicechat", offline=True), "nobody/no-such-voicechat",
                     tmp_path_factory.mktemp("no-model"))


def test_without_a_model_the_page_says_so_and_run_is_off(without_a_model, page):
    page.goto(without_a_model, wait_until="networkidle")
    status = page.locator("#vc-status")
    expect(status).to_contain_text("The model is not loaded", timeout=30000)
    expect(status).to_contain_text("`hf download nobody/no-such-voicechat --local-dir ~/models/no-such-voicechat`, "
                                   "then `python app.py --model ~/models/no-such-voicechat`")
    expect(status).not_to_contain_text("Ready when you are")
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_disabled()
    save(page, "app_no_model.png")
    page.locator("#vc-input input[type=file]").set_input_files(str(EXAMPLE))
    expect(page.locator("#vc-input").get_by_role("button", name="Play", exact=True)).to_be_visible(timeout=20000)
    expect(status).to_contain_text("The model is not loaded")  # an upload does not hide it
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_disabled()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """The app started with --api-key sesame."""
    yield from serve(loader_for(ScriptedModel(frame_delay=0.002)), "scripted stand-in (key)",
                     tmp_path_factory.mktemp("keyed"), api_key="sesame")


def test_with_an_api_key_the_page_asks_for_it_once_then_works(keyed, page):
    """app.py --api-key guards every route (docs/limits.md §3): a browser gets the key form, then a cookie."""
    page.goto(keyed + "?view=api", wait_until="networkidle")
    expect(page.get_by_text("This app needs its API key.")).to_be_visible()
    page.get_by_label("API key").fill("wrong")
    page.get_by_role("button", name="Open").click()
    expect(page.get_by_text("That is not the app's API key.")).to_be_visible()
    page.get_by_label("API key").fill("sesame")
    page.get_by_role("button", name="Open").click()
    page.wait_for_url(keyed + "?view=api")  # back where it was asked
    status = page.locator("#vc-status")
    expect(status).to_contain_text("Ready when you are", timeout=30000)
    page.locator("#vc-input input[type=file]").set_input_files(str(EXAMPLE))  # Gradio's upload route, with the cookie
    expect(status).to_contain_text(f"Recording ready{EXAMPLE.name}: 3.7 s.", timeout=20000)
    page.get_by_role("tab", name="Talk live").click()
    expect(page.locator("#live-status")).not_to_contain_text("Checking the model", timeout=30000)  # /live/status
    expect(page.locator("#live-key-row")).to_be_hidden()  # the cookie carries the key: the tab does not ask
