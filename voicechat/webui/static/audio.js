// The page's side of the answer player (player-worklet.js): one AudioContext at the audio's own rate, so that the
// browser does the only resampling, to the sound card's rate. Used by the Talk live tab (24 kHz Realtime audio) and by
// the record-and-run tab (the answer at 22.05 kHz while it is generated).
import { RULE_MS } from './jitter.js';

export class Player {
  constructor(context, node) {
    this.context = context;
    this.node = node;
    this.stats = { received: 0, played: 0, dropped: 0, underruns: 0, starts: 0, queued: 0, bufferedMs: 0 };
    node.port.onmessage = (event) => { this.stats = event.data; };
  }

  // `rule`: the jitter buffer's (jitter.js RULE_MS by default; a whole answer that must not lose audio sets max to
  // Infinity)
  static async open(sampleRate, rule = RULE_MS) {
    const context = new AudioContext({ sampleRate, latencyHint: 'interactive' });
    await context.audioWorklet.addModule(new URL('./player-worklet.js', import.meta.url));
    const node = new AudioWorkletNode(context, 'voicechat-player', { numberOfInputs: 0, outputChannelCount: [1],
                                                                      processorOptions: { rule } });
    node.connect(context.destination);
    await context.resume();
    return new Player(context, node);
  }

  get sampleRate() { return this.context.sampleRate; }

  push(samples) {
    if (samples.length) this.node.port.postMessage({ type: 'push', samples }, [samples.buffer]);
  }

  end() { this.node.port.postMessage({ type: 'end' }); }

  async close() {
    this.node.disconnect();
    await this.context.close();
  }
}

// base64 PCM16 little-endian (the Realtime API's audio) -> float32 samples in [-1, 1)
export function pcm16ToFloat(base64) {
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  const out = new Float32Array(bytes.length >> 1);
  for (let i = 0; i < out.length; i += 1) out[i] = view.getInt16(2 * i, true) / 32768;
  return out;
}

// bytes -> base64 (the capture worklet's PCM16 little-endian chunks, for input_audio_buffer.append)
export function bytesToBase64(bytes) {
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

// The microphone, as the Realtime API wants it: echo cancellation, noise suppression and automatic gain asked for (as
// Moshi and Unmute ask, docs/live.md §4), captured at the sound card's rate, resampled to 24 kHz PCM16 in 20 ms chunks
// by capture-worklet.js; `onChunk({pcm, rms, peak})` gets each chunk.
export const MICROPHONE = { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 };

export class Microphone {
  constructor(stream, context, node) {
    this.stream = stream;
    this.context = context;
    this.node = node;
  }

  static async open(onChunk) {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: MICROPHONE });
    const context = new AudioContext({ latencyHint: 'interactive' });
    try {
      await context.audioWorklet.addModule(new URL('./capture-worklet.js', import.meta.url));
      const node = new AudioWorkletNode(context, 'voicechat-capture', { numberOfOutputs: 0 });
      node.port.onmessage = (event) => onChunk(event.data);
      context.createMediaStreamSource(stream).connect(node);
      await context.resume();
      return new Microphone(stream, context, node);
    } catch (error) {
      stream.getTracks().forEach((track) => track.stop());
      await context.close();
      throw error;
    }
  }

  // what the browser granted of MICROPHONE (a browser may ignore a constraint)
  settings() { return this.stream.getAudioTracks()[0].getSettings(); }

  async close() {
    this.stream.getTracks().forEach((track) => track.stop());
    this.node.port.onmessage = null;
    this.node.disconnect();
    await this.context.close();
  }
}
