"""The Talk live tab's browser code on its own, in Debian's chromium (Playwright): the playback jitter buffer's
80 + 10 ms rule under an injected stall and a burst (voicechat/webui/static/jitter.js), the player worklet on a real
AudioContext, the lag guard (lag.js) and the microphone's resampler (resample.js) against analytic signals.
The modules are imported by a page served from voicechat/webui/static, as the app serves them."""

from __future__ import annotations

import functools
import http.server
import threading

import numpy as np
import pytest

from test_browser import CHROMIUM, CHROMIUM_ARGS  # noqa: F401  (skips this module without chromium/playwright)
from playwright.sync_api import sync_playwright  # noqa: E402

from voicechat.webui.talk import STATIC  # noqa: E402

RATE = 24000
MS = RATE // 1000  # samples per millisecond at 24 kHz


@pytest.fixture(scope="module")
def page():
    handler = functools.partial(QuietHandler, directory=str(STATIC))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/jitter.js")  # any page of that origin
        yield page
        browser.close()
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


# the buffer is fed a ramp (sample i has the value i: exact in float32), so what comes out says which samples played
BUFFER = """
const { JitterBuffer } = await import('/jitter.js');
const buffer = new JitterBuffer(24000);
let next = 0;
const push = (n) => { buffer.push(Float32Array.from({ length: n }, () => next++)); };
const pull = () => { const out = new Float32Array(128); const n = buffer.pull(out); return [n, out[0], out[n - 1]]; };
"""


def run(page, body: str):
    return page.evaluate(f"async () => {{ {BUFFER} {body} }}")


def test_playback_starts_at_80_plus_10_ms_and_an_underrun_raises_the_start_by_5_ms(page):
    log = run(page, """
    const log = {};
    push(80 * 24);                      log.at80 = [pull(), buffer.stats()];
    push(10 * 24 - 1);                  log.at90minus1 = [pull(), buffer.stats()];
    push(1);                            log.at90 = [pull(), buffer.stats()];
    const quanta = [];                  // the stall: nothing more arrives; play until the queue runs dry
    while (buffer.playing) quanta.push(pull());
    log.stall = [quanta, buffer.stats()];
    push(95 * 24 - 1);                  log.at95minus1 = [pull(), buffer.stats()];
    push(1);                            log.at95 = [pull(), buffer.stats()];
    return log;""")
    (n, _, _), stats = log["at80"]
    assert n == 0 and stats["starts"] == 0 and stats["queued"] == 80 * MS
    (n, _, _), stats = log["at90minus1"]
    assert n == 0 and stats["starts"] == 0 and stats["queued"] == 90 * MS - 1
    (n, first, last), stats = log["at90"]
    assert (n, first, last) == (128, 0, 127) and stats["starts"] == 1 and stats["startMs"] == 90
    quanta, stats = log["stall"]
    played = [q[0] for q in quanta]
    assert played == [128] * 15 + [90 * MS - 16 * 128]  # all 90 ms came out, in order: 2160 = 16 x 128 + 112
    assert [q[1] for q in quanta] == [128 * (i + 1) for i in range(16)]
    assert stats["underruns"] == 1 and stats["partialMs"] == 15 and stats["startMs"] == 95
    assert stats["played"] == stats["received"] == 90 * MS and stats["dropped"] == 0 and not stats["playing"]
    (n, _, _), stats = log["at95minus1"]
    assert n == 0 and stats["starts"] == 1  # 90 ms no longer starts it
    (n, first, _), stats = log["at95"]
    assert n == 128 and first == 90 * MS and stats["starts"] == 2  # it goes on where the stall left off


def test_an_underrun_raises_the_start_level_by_5_ms_up_to_80_ms(page):
    partials = run(page, """
    const partials = [];
    for (let i = 0; i < 17; i++) {
      push(buffer.startLevel);
      while (buffer.playing || buffer.queued) pull();
      partials.push(buffer.stats().partialMs);
    }
    return partials;""")
    assert partials == [15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 80, 80, 80]


def test_an_overflow_drops_the_oldest_audio_down_to_the_start_level_and_allows_5_ms_more(page):
    log = run(page, """
    push(90 * 24); pull();              // playing, 2160 - 128 = 2032 queued
    const before = buffer.stats();
    push(80 * 24);                      // 3952 > 80 + 10 + 10 ms = 2400: drop down to 90 ms = 2160
    const after = buffer.stats();
    const newest = pull();
    push(100 * 24 + 1);                 // 2032 + 2401 > 80 + 10 + 15 ms = 2520: drop down to 2160 again
    return [before, after, newest, buffer.stats(), pull()];""")
    before, after, next_quantum, again, last = log
    assert before["queued"] == 90 * MS - 128 and before["maxMs"] == 10
    assert after["queued"] == 90 * MS and after["dropped"] == 90 * MS - 128 + 80 * MS - 90 * MS
    assert after["maxMs"] == 15 and after["underruns"] == 0
    total = 90 * MS + 80 * MS
    assert next_quantum == [128, total - 90 * MS, total - 90 * MS + 127]  # the newest 90 ms remain, oldest first
    assert again["queued"] == 90 * MS and again["maxMs"] == 20
    total += 100 * MS + 1
    assert last[1] == total - 90 * MS
    assert again["received"] == again["played"] + again["dropped"] + again["queued"]


def test_the_end_plays_out_what_is_queued_without_an_underrun(page):
    stats = run(page, """
    push(30 * 24); pull();              // below the start level: waits
    buffer.end();
    while (pull()[0]) {}
    return buffer.stats();""")
    assert stats["played"] == stats["received"] == 30 * MS and stats["underruns"] == 0


def test_a_steady_stream_with_a_stall_plays_every_sample_in_order(page):
    """80 ms frames every 80 ms, a 400 ms stall in the middle, a burst that brings the late frames, on a simulated
    clock: playback starts only with 90 ms (then 95 ms) queued, nothing is lost but what an overflow drops (counted),
    and what plays is in order."""
    result = run(page, """
    const log = [];
    let played = [];
    const frames = [];
    for (let k = 0; k < 40; k++) frames.push(k < 20 ? k * 80 : (k < 25 ? 2000 : k * 80));  // frames 20-24 come late
    let t = 0, f = 0;
    while (f < frames.length || buffer.queued) {
      while (f < frames.length && frames[f] <= t) { push(80 * 24); f++; }
      const was = buffer.playing, queued = buffer.queued, level = buffer.startLevel;
      const out = new Float32Array(128);
      const n = buffer.pull(out);
      if (!was && buffer.stats().starts > log.length) log.push([t, queued, level]);
      for (let i = 0; i < n; i++) played.push(out[i]);
      t += 128 / 24;
      if (t > 10000) break;
    }
    buffer.end();
    return [log, played.length, played.every((x, i) => i === 0 || x > played[i - 1]), buffer.stats()];""")
    starts, played, ordered, stats = result
    assert ordered
    assert [(level, queued >= level) for _, queued, level in starts][:2] == [(90 * MS, True), (95 * MS, True)]
    assert all(queued >= level for _, queued, level in starts)
    assert starts[0][0] >= 80  # the first frame alone (80 ms) does not start it
    assert stats["underruns"] >= 1 and played == stats["played"]
    assert stats["received"] == stats["played"] + stats["dropped"] + stats["queued"] == 40 * 80 * MS


def test_the_player_worklet_on_a_real_audio_context(page):
    """Player (audio.js) on a real AudioContext, a second of audio pushed at once, then the end; the worklet counts
    every sample. With the live rule the burst overflows (the oldest audio is dropped, and counted); with an answer's
    rule (no overflow, voicechat/webui/static/stream.js) every sample plays."""
    live, answer = page.evaluate("""async () => {
      const { Player } = await import('/audio.js');
      const { RULE_MS } = await import('/jitter.js');
      const play = async (rule) => {
        const player = await Player.open(24000, rule);
        for (let i = 0; i < 12; i++) player.push(new Float32Array(1920).fill(0.1));
        player.push(new Float32Array(960).fill(0.1));
        player.end();
        while (player.stats.received < 24000 || player.stats.queued) await new Promise((r) => setTimeout(r, 50));
        const stats = player.stats;
        await player.close();
        return stats;
      };
      return [await play(RULE_MS), await play({ ...RULE_MS, max: Infinity })];
    }""")
    assert live["received"] == live["played"] + live["dropped"] == 24000 and live["dropped"] > 0
    assert answer["received"] == answer["played"] == 24000 and answer["dropped"] == 0


def test_the_lag_guard_bounds_how_far_behind_a_conversation_may_fall(page):
    checks = page.evaluate("""async () => {
      const { LagGuard } = await import('/lag.js');
      const g = new LagGuard(2000);
      const out = [];
      g.frame(0, 100, false);
      out.push(g.tooFar(1000), g.tooFar(1900), g.tooFar(1901), g.behind(1500));
      g.frame(2000, 500, true);               // a tool exchange holds the user's audio: the backlog may grow
      out.push(g.tooFar(20000));
      g.frame(20000, 9000, false);            // it ended 9 s behind: the bound is 11 s, and tightens as it drains
      out.push(g.tooFar(21900), g.tooFar(22100));
      g.frame(23000, 6000, false);
      out.push(g.bound, g.tooFar(25000), g.tooFar(25001));
      g.frame(30000, 100, false);
      out.push(g.bound);
      return out;
    }""")
    assert checks == [False, False, True, 1600, False, False, True, 8000, False, True, 2100]


@pytest.mark.parametrize("rate", [48000, 44100, 16000])
def test_the_microphone_resampler_gives_24_khz_in_any_chunking(page, rate):
    """A 1 kHz sine at the sound card's rate -> the same sine at 24 kHz (within 1e-3, after the filter's first
    samples), whether it comes in 128-sample render quanta or at once; a 15 kHz tone above 12 kHz is filtered out."""
    out = page.evaluate("""async ([rate]) => {
      const { StreamResampler } = await import('/resample.js');
      const tone = (f) => Float32Array.from({ length: rate }, (_, i) => Math.sin(2 * Math.PI * f * i / rate));
      const run = (x, chunk) => {
        const r = new StreamResampler(rate, 24000);
        const parts = [];
        for (let i = 0; i < x.length; i += chunk) parts.push(...r.process(x.subarray(i, i + chunk)));
        return parts;
      };
      return [run(tone(1000), 128), run(tone(1000), rate), run(tone(15000), 128)];
    }""", [rate])
    chunked, whole, alias = (np.asarray(x, np.float64) for x in out)
    assert np.array_equal(chunked, whole)
    n = np.arange(len(chunked))
    assert len(chunked) > 23900  # all but the filter's look-ahead (under 2 ms) of one second
    expected = np.sin(2 * np.pi * 1000 * n / 24000)
    assert np.max(np.abs(chunked - expected)[100:]) < 1e-3
    if rate > 24000:
        assert np.sqrt(np.mean(alias[100:] ** 2)) < 1e-3
