// The Talk live tab (webui/talk.py draws its elements): Start opens the microphone and a WebSocket to the app's own
// /v1/realtime (OpenAI's GA Realtime events, voicechat/realtime/), sends the microphone as 24 kHz PCM16 once the
// model has read its prompt, and plays the answer as it arrives through the jitter-buffered player. On the page, live:
// the user's transcript, the assistant's words, the function channel and tool calls, the microphone level and the
// stats. Stop ends it; Save writes the conversation on the server.
//
// window.voicechatLive is this object (tests read `player.stats`, users' scripts may too).
import { Microphone, Player, bytesToBase64, pcm16ToFloat } from './audio.js';
import { LagGuard } from './lag.js';
import { VoiceControls } from './voices.js';

const API = '/live';
const RATE = 24000; // the Realtime API's PCM16 rate, both ways
const STATS_WINDOW = 250; // frames (20 s) in the compute percentiles
const POLL_MS = 2000;
const TICK_MS = 250; // stats and the lag check

export function mountLive(root) {
  const live = new LiveTalk(root);
  window.voicechatLive = live;
  live.poll();
  return live;
}

const percentile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

class LiveTalk {
  constructor(root) {
    const $ = (id) => root.querySelector(`#${id}`);
    this.el = {
      root: root.querySelector('.vc-live'), status: $('live-status'), speed: $('live-speed'), start: $('live-start'),
      stop: $('live-stop'), meter: $('live-meter'), prompt: $('live-prompt'), transcript: $('live-transcript'),
      assistant: $('live-assistant'), function: $('live-function'), stats: $('live-stats'), save: $('live-save'),
      saved: $('live-saved'), tools: $('live-tools'), measure: $('live-measure'), key: $('live-key'),
      keyRow: $('live-key-row'), voice: $('live-voice'),
    };
    this.el.start.addEventListener('click', () => this.start());
    this.el.stop.addEventListener('click', () => this.stop('done', 'Stopped', 'You ended the conversation.'));
    this.el.save.addEventListener('click', () => this.save());
    this.el.measure.addEventListener('click', () => this.measure());
    this.voices = new VoiceControls(root, () => this.el.voice.value, (name) => this.voiceAdded(name),
      () => (this.server && this.server.key_required ? this.el.key.value : ''));
    window.addEventListener('pagehide', () => this.socket && this.socket.close(1000));
    this.state = 'idle'; // idle, connecting, queued, live, stopped
    this.server = null; // the last /live/status
    this.player = null;
    this.microphone = null;
    this.socket = null;
    this.sessionId = null;
  }

  // ---- before Start: the model, its speed, whether someone else talks -----------------------------------------
  async poll() {
    if (this.state === 'idle' || this.state === 'stopped') {
      try {
        const response = await fetch(`${API}/status`);
        this.server = await response.json();
        this.showServer();
      } catch (error) {
        this.card('error', 'The app does not answer', String(error));
      }
    }
    setTimeout(() => this.poll(), POLL_MS);
  }

  showServer() {
    const { model, speed, busy } = this.server;
    this.el.keyRow.hidden = !this.server.key_required;
    this.showVoices(this.server.voices);
    const busyNow = this.state === 'stopped' && busy.busy ? ` ${busy.text}` : ''; // the card keeps how it ended
    this.el.speed.textContent = (model.state === 'ready' ? speed.text : '') + busyNow;
    this.el.speed.dataset.verdict = speed.verdict;
    const ready = model.state === 'ready' && speed.state === 'measured' && !busy.busy && speed.verdict !== 'too slow';
    this.el.start.disabled = !ready;
    this.el.measure.disabled = model.state !== 'ready' || speed.state === 'measuring' || busy.busy ||
      !['idle', 'stopped'].includes(this.state);
    if (this.state !== 'idle') return; // the card tells how the last conversation ended
    if (model.state !== 'ready') {
      this.card(model.state === 'failed' ? 'error' : 'wait', 'The model is not loaded', model.message);
    } else if (speed.state !== 'measured') {
      this.card(speed.state === 'failed' ? 'error' : 'wait', 'Measuring this machine', '');
    } else if (busy.busy) {
      this.card('wait', 'Busy', busy.text);
    } else if (speed.verdict === 'too slow') {
      this.card('error', 'Too slow for live talk', 'See why below.');
    } else {
      this.card('idle', 'Ready: press Start and talk', '');
    }
  }

  // the library's voices (the checkpoint's first); the choice stays while it exists
  showVoices(voices) {
    const select = this.el.voice;
    const names = voices.map((v) => v.name);
    if (names.join('\n') === [...select.options].map((o) => o.value).join('\n')) return;
    const chosen = names.includes(select.value) ? select.value : names[0];
    select.replaceChildren(...voices.map((v) => new Option(v.label, v.name)));
    select.value = chosen;
  }

  async voiceAdded(name) {
    this.showVoices((await (await fetch(`${API}/status`)).json()).voices);
    this.el.voice.value = name;
  }

  async measure() {
    this.el.measure.disabled = true;
    this.server = await (await fetch(`${API}/measure`, { method: 'POST' })).json();
    this.showServer();
  }

  card(kind, title, detail) {
    this.el.status.className = `vc-status vc-${kind}`;
    this.el.status.dataset.kind = kind;
    this.el.status.querySelector('.vc-live-title').textContent = title;
    this.el.status.querySelector('.vc-live-detail').textContent = detail;
  }

  // ---- a conversation ------------------------------------------------------------------------------------------
  async start() {
    this.reset();
    this.state = 'connecting';
    this.el.start.disabled = this.el.measure.disabled = true;
    this.el.stop.disabled = false;
    this.card('wait', 'Starting', 'Opening the microphone and the player…');
    try {
      this.player = await Player.open(RATE);
      this.microphone = await Microphone.open((chunk) => this.heard(chunk));
    } catch (error) {
      this.stop('error', 'The microphone could not be opened', `${error.name || 'Error'}: ${error.message}. ` +
                'Allow the microphone for this page (it needs http://127.0.0.1 or https).');
      return;
    }
    if (this.state !== 'connecting') { // Stop was pressed meanwhile
      this.microphone.close();
      this.microphone = null;
      return;
    }
    const url = new URL('/v1/realtime?voicechat_frames=1', window.location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    // the app's --api-key rides a subprotocol: a browser cannot set the Authorization header of a WebSocket
    const key = this.server.key_required ? this.el.key.value : '';
    this.socket = new WebSocket(url, key ? ['realtime', `openai-insecure-api-key.${key}`] : []);
    this.socket.onmessage = (message) => this.receive(JSON.parse(message.data));
    this.socket.onclose = (event) => this.closed(event);
    this.ticker = setInterval(() => this.tick(), TICK_MS);
    this.card('wait', 'Connecting', 'The model reads the system prompt first.');
  }

  reset() {
    for (const key of ['transcript', 'assistant', 'function', 'saved']) this.el[key].textContent = '';
    this.el.save.disabled = true;
    this.sessionId = null;
    this.sent = 0; // samples at 24 kHz sent to the model
    this.compute = []; // per-frame compute (ms), the last STATS_WINDOW frames
    this.frames = 0;
    this.slow = 0; // frames that took longer than a frame (the server's frame_ms) to compute
    this.guard = new LagGuard(this.server.lag_limit_ms);
    this.exchange = false; // a tool exchange holds the user's audio
    this.userItems = new Map(); // item id -> its paragraph in the transcript
    this.turn = null; // the assistant's paragraph of the open response
    this.functionText = null;
  }

  // the microphone's 20 ms chunks: the meter always, the model once it listens
  heard({ pcm, rms }) {
    const db = 20 * Math.log10(Math.max(rms, 1e-5));
    this.el.meter.style.width = `${Math.max(0, Math.min(100, ((db + 60) / 60) * 100)).toFixed(0)}%`;
    if (this.state !== 'live' || this.socket.readyState !== WebSocket.OPEN) return;
    this.socket.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: bytesToBase64(pcm) }));
    this.sent += pcm.length / 2;
  }

  receive(event) {
    const handler = EVENTS[event.type];
    if (handler) handler.call(this, event);
  }

  tick() {
    this.showStats();
    if (this.state === 'live' && this.guard.tooFar(performance.now())) {
      const behind = (this.guard.behind(performance.now()) / 1000).toFixed(1);
      const mean = this.compute.reduce((a, b) => a + b, 0) / this.compute.length;
      const frame = this.server.frame_ms;
      const why = this.compute.length ? `a frame took ${mean.toFixed(0)} ms of computing on average, for ${frame} ms ` +
                                        'of audio' : 'no frame had come back yet';
      this.stop('error', 'Stopped: this machine fell behind', `The model was ${behind} s behind your voice (the ` +
                `limit is ${this.guard.limit / 1000} s): ${why}. The conversation so far can be saved.`);
    }
  }

  async stop(kind, title, detail) {
    if (this.state === 'stopped' || this.state === 'idle') return;
    this.state = 'stopped';
    clearInterval(this.ticker);
    this.card(kind, title, detail);
    this.el.stop.disabled = true;
    this.el.meter.style.width = '0%';
    if (this.socket && this.socket.readyState <= WebSocket.OPEN) this.socket.close(1000, 'stopped');
    const closing = [this.microphone, this.player].filter(Boolean).map((part) => part.close().catch(() => {}));
    this.microphone = null;
    await Promise.all(closing);
    this.showStats();
    this.el.save.disabled = !this.sessionId || !this.frames;
    if (this.server) this.showServer();
  }

  closed(event) {
    if (this.state === 'stopped') return;
    const refused = this.state === 'connecting' && event.code === 1006 && this.server && this.server.key_required;
    const reason = event.code === 1013 ? ['wait', 'Busy', 'Someone else is talking to the model live; try again ' +
                                          'when it ends.']
      : refused ? ['error', 'The API key was refused', 'Enter the key the app was started with (--api-key).']
        : ['error', 'The connection closed', `${event.reason || 'the server ended the conversation'} (code ${event.code})`];
    this.stop(...reason);
  }

  // ---- the page's texts -----------------------------------------------------------------------------------------
  paragraph(container, className) {
    const p = document.createElement('p');
    p.className = className;
    container.appendChild(p);
    return p;
  }

  append(container, p, text) {
    p.textContent += text;
    container.scrollTop = container.scrollHeight;
  }

  note(text) {
    this.append(this.el.function, this.paragraph(this.el.function, 'vc-live-call'), text);
    this.functionText = null; // the channel's next tokens start a new line
  }

  showStats() {
    if (!this.guard) return;
    const sorted = [...this.compute].sort((a, b) => a - b);
    const stats = this.player ? this.player.stats : (this.lastPlayer || {});
    if (this.player) this.lastPlayer = stats;
    const p50 = sorted.length ? percentile(sorted, 0.5) : 0;
    const p95 = sorted.length ? percentile(sorted, 0.95) : 0;
    const mean = sorted.length ? sorted.reduce((a, b) => a + b, 0) / sorted.length : 0;
    const behind = this.state === 'live' ? this.guard.behind(performance.now()) : 0;
    const values = {
      frames: this.frames, computeP50Ms: p50.toFixed(1), computeP95Ms: p95.toFixed(1),
      realtimeFactor: (mean / this.server.frame_ms).toFixed(2), slowFrames: this.slow, behindMs: behind.toFixed(0),
      bufferedMs: (stats.bufferedMs || 0).toFixed(0), receivedSamples: stats.received || 0,
      playedSamples: stats.played || 0, lateCount: stats.underruns || 0, droppedSamples: stats.dropped || 0,
      sentSamples: this.sent,
    };
    Object.assign(this.el.stats.dataset, values);
    const ms = (samples) => ((1000 * samples) / RATE).toFixed(0);
    this.el.stats.textContent = `${values.frames} frames · compute per ${this.server.frame_ms} ms frame: ` +
      `p50 ${values.computeP50Ms} ms, p95 ${values.computeP95Ms} ms · RTF ${values.realtimeFactor} · slow frames ${values.slowFrames} · ` +
      `behind ${values.behindMs} ms\nplayer: buffered ${values.bufferedMs} ms · played ` +
      `${(values.playedSamples / RATE).toFixed(1)} s · late ${values.lateCount} · dropped ${ms(values.droppedSamples)} ms` +
      ` · sent ${(this.sent / RATE).toFixed(1)} s`;
  }

  // the model called a tool the page declared: run it on the server, hand the output back to the model
  async runTool(event) {
    const key = this.server.key_required ? this.el.key.value : '';
    const response = await fetch(`${API}/tool`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) },
      body: JSON.stringify({ name: event.name, arguments: event.arguments }),
    });
    const { output } = await response.json();
    if (this.state !== 'live') return;
    this.socket.send(JSON.stringify({
      type: 'conversation.item.create', item: { type: 'function_call_output', call_id: event.call_id, output },
    }));
    this.note(`← ${event.name}: ${output}`);
  }

  // ---- saving ---------------------------------------------------------------------------------------------------
  async save() {
    this.el.save.disabled = true;
    this.el.saved.textContent = 'Saving…';
    const response = await fetch(`${API}/save/${this.sessionId}`, { method: 'POST' });
    const answer = await response.json();
    if (!response.ok) {
      this.el.saved.textContent = `Not saved: ${answer.detail}`;
      this.el.save.disabled = false;
      return;
    }
    this.el.saved.textContent = '';
    for (const [key, label] of [['wav', 'conversation.wav (you left, assistant right)'], ['json', 'conversation.json']]) {
      const link = document.createElement('a');
      link.id = `live-save-${key}`;
      link.href = answer[key];
      link.download = '';
      link.textContent = label;
      this.el.saved.appendChild(link);
    }
    this.el.saved.appendChild(document.createTextNode(`(also kept in the app's outputs folder, ${answer.folder})`));
  }
}

// ---- the server's events (this = the LiveTalk) ------------------------------------------------------------------
const EVENTS = {
  'session.created'(event) {
    this.sessionId = event.session.id;
    this.tools = this.el.tools.checked ? this.server.tools : [];
    this.socket.send(JSON.stringify({
      type: 'session.update', session: {
        type: 'realtime', instructions: this.el.prompt.value, tools: this.tools,
        audio: { output: { voice: this.el.voice.value } },
      },
    }));
  },
  'voicechat.falling_behind'(event) { // the server's warning, before the lag guard stops the conversation
    if (this.state !== 'live') return;
    if (event.falling_behind) {
      this.card('warn', 'Falling behind', `The model is ${(event.behind_ms / 1000).toFixed(1)} s behind your voice; ` +
                `at ${event.limit_ms / 1000} s the conversation stops. Others may be talking to it too: pause, or ` +
                'close other programs.');
    } else this.card('run', 'Live: talk now', 'The model has caught up with your voice.');
  },
  'voicechat.session.queued'(event) {
    this.state = 'queued';
    this.card('wait', 'Starting', `The model takes the conversation in at its next ${this.server.frame_ms} ms step.`);
  },
  'voicechat.session.ready'(event) {
    this.state = 'live';
    this.guard.frame(performance.now(), 0, false);
    const settings = this.microphone.settings();
    const missing = ['echoCancellation', 'noiseSuppression', 'autoGainControl'].filter((k) => settings[k] === false);
    this.card('run', 'Live: talk now', `The model read the system prompt in ${event.setup_seconds.toFixed(1)} s.` +
              (missing.length ? ` This browser did not give: ${missing.join(', ')}.` : ''));
  },
  'conversation.item.input_audio_transcription.delta'(event) {
    let p = this.userItems.get(event.item_id);
    if (!p) this.userItems.set(event.item_id, p = this.paragraph(this.el.transcript, 'vc-live-user'));
    this.append(this.el.transcript, p, event.delta);
  },
  'response.created'() {
    this.turn = this.paragraph(this.el.assistant, 'vc-live-turn');
  },
  'response.output_audio_transcript.delta'(event) {
    this.append(this.el.assistant, this.turn, event.delta);
  },
  'response.output_audio.delta'(event) {
    if (this.player) this.player.push(pcm16ToFloat(event.delta));
  },
  'response.function_call_arguments.done'(event) {
    this.note(`→ ${event.name}(${event.arguments})  [${event.call_id}]`);
    if (this.tools.some((tool) => tool.name === event.name)) this.runTool(event);
  },
  'voicechat.function_call.failed'(event) {
    this.note(`✗ a call the model wrote could not be used: ${event.error}`);
  },
  'voicechat.frame'(event) {
    this.frames += 1;
    const ms = event.compute_ms.total;
    this.compute.push(ms);
    if (this.compute.length > STATS_WINDOW) this.compute.shift();
    if (ms > this.server.frame_ms) this.slow += 1;
    for (const e of event.events) {
      if (e.kind === 'call_start') this.exchange = true;
      else if (e.kind === 'end') this.exchange = false;
      else if (e.kind === 'result') {
        for (const call of e.calls) if (call.error) this.note(`✗ ${call.name || 'a call'}: ${call.error}`);
      }
    }
    this.guard.frame(performance.now(), event.backlog_ms, this.exchange);
    if (event.function_text) {
      if (!this.functionText) this.functionText = this.paragraph(this.el.function, 'vc-live-channel');
      this.append(this.el.function, this.functionText, event.function_text);
    }
    if (event.audio && this.player) this.player.push(pcm16ToFloat(event.audio));
  },
  error(event) {
    const { code, message } = event.error;
    if (code === 'server_busy') this.card('wait', 'Busy', message);
    else if (code === 'session_failed') this.stop('error', 'The conversation failed', message);
    else if (code === 'server_shutting_down') this.stop('wait', 'The app is shutting down', message);
    else if (this.state !== 'live') this.stop('error', 'The conversation could not start', message);
    else this.note(`server: ${message}`);
  },
};
