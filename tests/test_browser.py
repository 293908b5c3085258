"""The app in a real browser: Debian's chromium (/usr/bin/chromium) driven by Playwright, never a downloaded browser.

Uploads an example WAV, presses Run, and checks the transcript, the assistant text, the answer's audio player and
the timeline; then saves screenshots to outputs/screenshots/ (and to assets/screenshots/ for the README when
VOICECHAT_UPDATE_SCREENSHOTS=1). The model is `ScriptedModel` (tests/test_engine.py), a stand-in with a fixed answer.
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
from test_app import EXAMPLE, EXAMPLE_FRAMES, free_port  # noqa: E402
from test_engine import ScriptedModel, loader_for  # noqa: E402
from voicechat import engine as eng  # noqa: E402

# ECOSYSTEM.md §4.2: headless Debian chromium; a fake microphone so the page never asks for a device
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


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model = ScriptedModel(frame_delay=0.03)  # RTF about 0.4 on the screenshots
    engine = eng.Engine(loader_for(model), name="scripted stand-in (browser test)").start()
    outputs = tmp_path_factory.mktemp("browser")
    demo = app.build_app(engine, outputs=outputs)
    app.launch(demo, outputs, server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
               quiet=True)
    yield demo.local_url, model
    demo.close()
    engine.close()


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
    page.locator("#vc-input input[type=file]").set_input_files(str(EXAMPLE))
    expect(page.locator("#vc-input").get_by_role("button", name="Play", exact=True)).to_be_visible(timeout=20000)
    gate = model.gate = threading.Semaphore(0)  # hold the model mid-answer
    page.get_by_role("button", name="Run", exact=True).click()

    status = page.locator("#vc-status")
    words = model.tokenizer.encode(model.answer)
    half = words[: len(words) // 2]
    for _ in range(model.frames_to_say(EXAMPLE_FRAMES, len(half))):
        gate.release()
    expect(page.locator("#vc-assistant textarea")).to_have_value(model.decoded(half), timeout=30000)
    expect(status).to_contain_text(re.compile(r"frame \d+ of \d+ · .*RTF"))
    expect(page.get_by_role("button", name="Cancel")).to_be_enabled()
    save(page, "app_running.png")
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
    expect(page.locator("#vc-timeline svg")).to_be_visible()
    expect(page.locator("#vc-downloads a[href$='conversation.json']")).to_be_visible()
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled()
    page.get_by_role("button", name="Timings").click()
    expect(page.get_by_text("total (wall)")).to_be_visible()
    save(page, "app.png")
    save(page.locator("#vc-timeline"), "timeline.png")


def test_record_with_the_microphone(served, page):
    url, model = served
    model.gate = None
    page.goto(url, wait_until="networkidle")
    page.get_by_role("button", name="Record audio").click()  # switch the input to the (fake) microphone
    page.get_by_role("button", name="Record", exact=True).click()
    page.wait_for_timeout(2000)
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.locator("#vc-input").get_by_role("button", name="Play", exact=True)).to_be_visible(timeout=20000)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#vc-status")).to_contain_text("Answer ready", timeout=60000)
    assert model.calls[-1]["sample_rate"] in (44100, 48000)  # the browser's own rate; the engine resamples
