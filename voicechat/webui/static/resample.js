// A stream resampler for the microphone: any rate in, any rate out, chunk by chunk with no trace of the chunk edges.
// Band-limited interpolation with a Blackman-windowed sinc (16 zero crossings) whose cutoff sits a little under the
// lower rate's Nyquist frequency. The browser captures at the sound card's rate (an AudioContext at another rate
// cannot take a microphone in Firefox, docs/live.md §4), and the Realtime API wants 24 kHz.

const ZERO_CROSSINGS = 16;
const PHASES = 256; // kernel table points per input sample (linear interpolation between them)
const CUTOFF = 0.92; // of the lower rate's Nyquist frequency

function blackman(x) { // x in [-1, 1]
  return 0.42 + 0.5 * Math.cos(Math.PI * x) + 0.08 * Math.cos(2 * Math.PI * x);
}

export class StreamResampler {
  constructor(inRate, outRate) {
    this.step = inRate / outRate; // input samples per output sample
    const cutoff = 0.5 * Math.min(1, outRate / inRate) * CUTOFF; // cycles per input sample
    this.half = Math.ceil(ZERO_CROSSINGS / (2 * cutoff)); // kernel half-width, input samples
    this.table = new Float32Array(this.half * PHASES + 2);
    for (let i = 0; i < this.table.length; i += 1) {
      const d = i / PHASES;
      const x = 2 * cutoff * d;
      const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
      this.table[i] = d >= this.half ? 0 : 2 * cutoff * sinc * blackman(d / this.half);
    }
    this.history = new Float32Array(0); // input from absolute index `start` on
    this.start = 0;
    this.next = 0; // absolute input position of the next output sample
  }

  kernel(d) {
    const x = Math.abs(d) * PHASES;
    const i = Math.floor(x);
    if (i >= this.table.length - 1) return 0;
    return this.table[i] + (this.table[i + 1] - this.table[i]) * (x - i);
  }

  // float32 input -> the output samples it completes (each needs `half` input samples after it)
  process(input) {
    const buffer = new Float32Array(this.history.length + input.length);
    buffer.set(this.history);
    buffer.set(input, this.history.length);
    const end = this.start + buffer.length;
    const out = [];
    while (this.next + this.half < end) {
      const first = Math.max(Math.ceil(this.next - this.half), this.start);
      const last = Math.floor(this.next + this.half);
      let acc = 0;
      for (let k = first; k <= last; k += 1) acc += buffer[k - this.start] * this.kernel(this.next - k);
      out.push(acc);
      this.next += this.step;
    }
    const keep = Math.max(this.start, Math.floor(this.next - this.half));
    this.history = buffer.subarray(keep - this.start);
    this.start = keep;
    return Float32Array.from(out);
  }
}
