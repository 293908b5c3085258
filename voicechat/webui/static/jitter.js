// The answer's playback buffer, in plain JS so that it can be tested on its own (tests/test_live_player.py runs it in
// chromium). The rule is Moshi's and Unmute's (docs/live.md §4):
//   - playback starts once `initial` (80 ms) + `partial` (10 ms) are queued;
//   - an underrun (the queue ran dry while playing) stops playback until that level is queued again, and `partial`
//     grows by 5 ms, up to 80 ms;
//   - more than `initial` + `partial` + `max` queued (`max` starts at 10 ms) drops the oldest audio down to
//     `initial` + `partial`, and `max` grows by 5 ms, up to 80 ms.
// So the delay stays near 90 ms on a steady stream and grows only as much as the network or the machine needs.

export const RULE_MS = Object.freeze({
  initial: 80, partial: 10, partialStep: 5, partialMost: 80, max: 10, maxStep: 5, maxMost: 80,
});

export class JitterBuffer {
  constructor(sampleRate, rule = RULE_MS) {
    const n = (ms) => Math.round((ms * sampleRate) / 1000);
    this.sampleRate = sampleRate;
    this.initial = n(rule.initial);
    this.partial = n(rule.partial);
    this.partialStep = n(rule.partialStep);
    this.partialMost = n(rule.partialMost);
    this.max = n(rule.max);
    this.maxStep = n(rule.maxStep);
    this.maxMost = n(rule.maxMost);
    this.chunks = []; // Float32Arrays, oldest first; `offset` samples of chunks[0] are played already
    this.offset = 0;
    this.queued = 0;
    this.playing = false;
    this.ended = false; // no more audio will come: what is queued plays out without waiting for the start level
    this.counts = { received: 0, played: 0, dropped: 0, underruns: 0, starts: 0 };
  }

  get startLevel() { return this.initial + this.partial; }

  get overflowLevel() { return this.initial + this.partial + this.max; }

  // New audio at the end of the queue; an overflow drops the oldest.
  push(samples) {
    if (!samples.length) return;
    this.chunks.push(samples);
    this.queued += samples.length;
    this.counts.received += samples.length;
    if (this.queued > this.overflowLevel) {
      this.discard(this.queued - this.startLevel);
      this.max = Math.min(this.max + this.maxStep, this.maxMost);
    }
  }

  // Fill `out` (one render quantum) with queued audio, zeros where there is none; returns the samples of audio.
  pull(out) {
    if (!this.playing) {
      if (this.queued >= this.startLevel || (this.ended && this.queued > 0)) {
        this.playing = true;
        this.counts.starts += 1;
      } else {
        out.fill(0);
        return 0;
      }
    }
    const written = this.take(out);
    out.fill(0, written);
    if (written < out.length) {
      this.playing = false;
      if (!this.ended) {
        this.counts.underruns += 1;
        this.partial = Math.min(this.partial + this.partialStep, this.partialMost);
      }
    }
    return written;
  }

  end() { this.ended = true; }

  // What the page shows and the tests read, in samples and milliseconds.
  stats() {
    const ms = (samples) => (1000 * samples) / this.sampleRate;
    return { ...this.counts, queued: this.queued, bufferedMs: ms(this.queued), startMs: ms(this.startLevel),
             partialMs: ms(this.partial), maxMs: ms(this.max), playing: this.playing, ended: this.ended };
  }

  take(out) {
    let written = 0;
    while (written < out.length && this.chunks.length) {
      const chunk = this.chunks[0];
      const n = Math.min(out.length - written, chunk.length - this.offset);
      out.set(chunk.subarray(this.offset, this.offset + n), written);
      written += n;
      this.advance(n);
    }
    this.counts.played += written;
    return written;
  }

  discard(samples) {
    let left = samples;
    while (left > 0 && this.chunks.length) {
      const n = Math.min(left, this.chunks[0].length - this.offset);
      this.advance(n);
      left -= n;
    }
    this.counts.dropped += samples - left;
  }

  advance(n) {
    this.offset += n;
    this.queued -= n;
    if (this.offset === this.chunks[0].length) {
      this.chunks.shift();
      this.offset = 0;
    }
  }
}
