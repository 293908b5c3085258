"""A WebRTC call from Debian's chromium (Playwright) with its fake microphone, written with the plain browser API as
OpenAI documents it: RTCPeerConnection, getUserMedia, createDataChannel("oai-events"), the offer POSTed to
/v1/realtime/calls, setRemoteDescription with the answer."""

from __future__ import annotations

from test_browser import CHROMIUM, CHROMIUM_ARGS  # noqa: F401  (skips without chromium)
from playwright.sync_api import sync_playwright  # noqa: E402

from test_realtime import PROMPT, WORDS, tiny_model  # noqa: E402, F401 (a fixture)
from netns import TEST_HOST, LOOPBACK, inside_only, run_inside  # noqa: E402
from test_webrtc import RECORDING, turn_server  # noqa: E402, F401 (a fixture)

OUTER = "test_the_browser_calls_inside_a_namespace_of_its_own"

CALL = """async ({url, instructions}) => {
  const pc = new RTCPeerConnection();
  const audio = document.createElement("audio");
  audio.autoplay = true;
  document.body.append(audio);
  pc.ontrack = (e) => { audio.srcObject = e.streams[0]; };
  const microphone = await navigator.mediaDevices.getUserMedia({audio: true});
  pc.addTrack(microphone.getTracks()[0]);
  const events = [];
  const channel = pc.createDataChannel("oai-events");
  channel.onopen = () => channel.send(JSON.stringify({type: "session.update",
                                                      session: {type: "realtime", instructions}}));
  const done = new Promise((resolve) => channel.onmessage = (e) => {
    events.push(JSON.parse(e.data));
    if (events.at(-1).type === "response.done") resolve();
  });
  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  const answer = await fetch(url, {method: "POST", body: offer.sdp, headers: {"Content-Type": "application/sdp"}});
  await pc.setRemoteDescription({type: "answer", sdp: await answer.text()});
  await done;
  await new Promise((resolve) => setTimeout(resolve, 1000));  // the answer's audio plays at real time
  const stats = [...(await pc.getStats()).values()].find((s) => s.type === "inbound-rtp" && s.kind === "audio");
  pc.close();
  return {status: answer.status, events, packets: stats.packetsReceived, energy: stats.totalAudioEnergy};
}"""


def test_the_browser_calls_inside_a_namespace_of_its_own():
    run_inside(__file__, OUTER, f"{LOOPBACK} && {TEST_HOST}", timeout=600)


@inside_only(OUTER)  # ICE offers the machine's own address, never loopback: tests/netns.py
def test_chromium_calls_with_the_browser_api_and_hears_the_answer(turn_server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=[*CHROMIUM_ARGS, f"--use-file-for-fake-audio-capture={RECORDING}"])
        try:
            page = browser.new_context(permissions=["microphone"]).new_page()
            page.goto(turn_server.removesuffix("/v1") + "/health")  # the page's origin is the server's
            result = page.evaluate(CALL, {"url": turn_server + "/realtime/calls", "instructions": PROMPT})
        finally:
            browser.close()
    assert result["status"] == 201
    kinds = [e["type"] for e in result["events"]]
    assert kinds[:2] == ["session.created", "session.updated"] and "response.created" in kinds
    transcript = "".join(e["delta"] for e in result["events"] if e["type"] == "response.output_audio_transcript.delta")
    assert transcript == WORDS
    assert result["packets"] > 25  # over half a second of 20 ms Opus packets on the remote track ...
    assert result["energy"] > 0  # ... carrying the model's answer, not silence
