// How far behind real time a live conversation is, and when to stop it (the Talk live tab stops past the server's
// bound, 2 s, rather than drift). "Behind" is audio the server has received and the model has not heard yet: the server's
// backlog at its last frame, plus the time since that frame (the microphone kept sending meanwhile).
//
// A tool exchange holds the user's audio on purpose (docs/tools.md §5: the timeline pauses while the tool runs, then
// the held frames are heard in order), so the backlog it leaves is not a slow machine: no check while an exchange is
// open, and after it the bound is that backlog + the limit, tightening as the backlog drains. A machine that cannot
// catch up still trips it: its backlog keeps growing past the bound. The terminal's `voicechat live` applies the same
// rule (voicechat/terminal.py, LagGuard).

export class LagGuard {
  constructor(limitMs) { // the server's bound (/live/status lag_limit_ms: voicechat.config.MAX_LAG_SECONDS)
    this.limit = limitMs;
    this.bound = limitMs;
    this.exchange = false;
    this.backlog = 0;
    this.at = null; // when the last frame arrived (ms, the caller's clock)
  }

  // A frame arrived at `now` with the server's `backlogMs`; `exchangeOpen`: a tool exchange holds the user's audio.
  frame(now, backlogMs, exchangeOpen) {
    this.backlog = backlogMs;
    this.at = now;
    if (exchangeOpen) {
      this.exchange = true;
      return;
    }
    if (this.exchange) {
      this.exchange = false;
      this.bound = backlogMs + this.limit;
    }
    this.bound = Math.max(this.limit, Math.min(this.bound, backlogMs + this.limit));
  }

  behind(now) { return this.at === null ? 0 : this.backlog + (now - this.at); }

  tooFar(now) { return !this.exchange && this.behind(now) > this.bound; }
}
