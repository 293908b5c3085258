// AudioWorklet: the answer's player. The main thread posts {type: "push", samples: Float32Array} as audio arrives
// (and "end" when no more will come); each render quantum is pulled from the jitter buffer (jitter.js). It reports
// the buffer's counts to the main thread about 20 times a second: the page's stats and the tests read them.
import { JitterBuffer } from './jitter.js';

const REPORTS_PER_SECOND = 20;

class VoicechatPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.buffer = new JitterBuffer(sampleRate, options.processorOptions.rule);
    this.reported = 0;
    this.port.onmessage = (event) => this.receive(event.data);
  }

  receive(message) {
    if (message.type === 'push') this.buffer.push(message.samples);
    else if (message.type === 'end') this.buffer.end();
    this.report();
  }

  process(inputs, outputs) {
    const channels = outputs[0];
    this.buffer.pull(channels[0]);
    for (let c = 1; c < channels.length; c += 1) channels[c].set(channels[0]);
    if (currentFrame - this.reported >= sampleRate / REPORTS_PER_SECOND) this.report();
    return true;
  }

  report() {
    this.reported = currentFrame;
    this.port.postMessage(this.buffer.stats());
  }
}

registerProcessor('voicechat-player', VoicechatPlayer);
