// The Talk live tab's voice library controls (webui/talk.py draws them; POST /live/voice/add and /live/voice/hear
// answer): a recording from a file or 5 s of the microphone, a name, Add; Hear it plays the chosen voice saying a
// fixed sentence. The library is the app's (docs/voices.md): Record and run's Voices panel shows the same voices.
const API = '/live/voice';
const RECORD_MS = 5000;

export class VoiceControls {
  // chosen(): the name of the voice selected; added(name): the library changed, `name` is the new voice; key(): the
  // app's API key ('' when it has none), which adding and hearing need as /live/tool does
  constructor(root, chosen, added, key) {
    const $ = (id) => root.querySelector(`#${id}`);
    this.el = {
      file: $('live-voice-file'), record: $('live-voice-record'), name: $('live-voice-name'), add: $('live-voice-add'),
      hear: $('live-voice-hear'), line: $('live-voice-line'), audio: $('live-voice-audio'),
    };
    this.chosen = chosen;
    this.added = added;
    this.key = key;
    this.recorded = null; // the microphone's File, until a file is chosen or it is added
    this.el.record.addEventListener('click', () => this.record());
    this.el.add.addEventListener('click', () => this.add());
    this.el.hear.addEventListener('click', () => this.hear());
    this.el.file.addEventListener('change', () => { this.recorded = null; });
  }

  authorization() {
    const key = this.key();
    return key ? { Authorization: `Bearer ${key}` } : {};
  }

  say(text) {
    this.el.line.textContent = text;
  }

  async record() {
    this.el.record.disabled = true;
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const recorder = new MediaRecorder(stream);
      const parts = [];
      recorder.ondataavailable = (event) => parts.push(event.data);
      const stopped = new Promise((resolve) => { recorder.onstop = resolve; });
      recorder.start();
      this.say('Recording 5 s: speak now…');
      setTimeout(() => recorder.stop(), RECORD_MS);
      await stopped;
      stream.getTracks().forEach((track) => track.stop());
      this.recorded = new File(parts, 'microphone.webm', { type: recorder.mimeType });
      this.el.file.value = '';
      this.say('Recorded 5 s from the microphone: give it a name and press Add.');
    } catch (error) {
      this.say(`The microphone could not be recorded: ${error.name || 'Error'}: ${error.message}`);
    } finally {
      this.el.record.disabled = false;
    }
  }

  async add() {
    const recording = this.el.file.files[0] || this.recorded;
    if (!recording) {
      this.say('Choose a file or record 5 s first.');
      return;
    }
    const form = new FormData();
    form.append('name', this.el.name.value.trim());
    form.append('file', recording, recording.name);
    this.el.add.disabled = true;
    this.say('Adding…');
    try {
      const response = await fetch(`${API}/add`, { method: 'POST', body: form, headers: this.authorization() });
      const answer = await response.json();
      if (!response.ok) {
        this.say(`Not added: ${answer.detail}`);
        return;
      }
      this.recorded = null;
      this.el.file.value = '';
      this.say(`Added ${answer.added}; it is chosen now.`);
      await this.added(answer.name);
    } finally {
      this.el.add.disabled = false;
    }
  }

  async hear() {
    const name = this.chosen();
    this.el.hear.disabled = true;
    this.say(`${name} is speaking the sentence…`);
    try {
      const response = await fetch(`${API}/hear`, {
        method: 'POST', headers: { 'Content-Type': 'application/json', ...this.authorization() },
        body: JSON.stringify({ name }),
      });
      const answer = await response.json();
      if (!response.ok) {
        this.say(`Cannot play it: ${answer.detail}`);
        return;
      }
      this.say(answer.text);
      this.el.audio.src = answer.wav;
      this.el.audio.hidden = false;
      this.el.audio.play().catch(() => {}); // the controls stay, should the browser refuse to start it
    } finally {
      this.el.hear.disabled = false;
    }
  }
}
