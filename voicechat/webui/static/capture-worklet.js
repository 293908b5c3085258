// AudioWorklet: the microphone, resampled to 24 kHz (resample.js) and cut into 20 ms chunks of PCM16 little-endian
// (the Realtime API's input format), each posted to the main thread with its level (RMS and peak, 0..1) for the meter.
import { StreamResampler } from './resample.js';

const RATE = 24000;
const CHUNK = 480; // 20 ms at 24 kHz, as Moshi and Unmute send (docs/live.md §4)

class VoicechatCapture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.resampler = new StreamResampler(sampleRate, RATE);
    this.chunk = new Float32Array(CHUNK);
    this.filled = 0;
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || !channels.length) return true; // no microphone connected (yet)
    const mono = new Float32Array(channels[0].length);
    for (const channel of channels) for (let i = 0; i < mono.length; i += 1) mono[i] += channel[i] / channels.length;
    for (const x of this.resampler.process(mono)) {
      this.chunk[this.filled] = x;
      this.filled += 1;
      if (this.filled === CHUNK) this.send();
    }
    return true;
  }

  send() {
    const bytes = new Uint8Array(2 * CHUNK);
    const view = new DataView(bytes.buffer);
    let sum = 0;
    let peak = 0;
    for (let i = 0; i < CHUNK; i += 1) {
      const x = Math.max(-1, Math.min(1, this.chunk[i]));
      view.setInt16(2 * i, Math.round(x * 32767), true);
      sum += x * x;
      peak = Math.max(peak, Math.abs(x));
    }
    this.port.postMessage({ pcm: bytes, rms: Math.sqrt(sum / CHUNK), peak }, [bytes.buffer]);
    this.filled = 0;
  }
}

registerProcessor('voicechat-capture', VoicechatCapture);
