// The record-and-run answer, played while it is generated (voicechat/webui/stream.py): the element's value names the answer
// (data-stream); this module reads it over WS /live/answer/{token} and plays it through the Talk live tab's player.
// No sample is dropped: an answer's jitter buffer has no overflow rule (max = Infinity); its start and underrun rules
// are the live ones. window.voicechatAnswer is this object (tests read `player.stats`).
import { Player } from './audio.js';
import { RULE_MS } from './jitter.js';

const ANSWER_RULE = { ...RULE_MS, max: Infinity };
const MODES = {
  live: 'Playing the answer as it is generated.',
  whole: 'This machine is slower than real time: the answer plays once it is complete.',
};

export function mountAnswer(element, watch) {
  const answer = new AnswerPlayer(element);
  window.voicechatAnswer = answer;
  answer.update();
  watch('value', () => answer.update());
  return answer;
}

class AnswerPlayer {
  constructor(element) {
    this.element = element;
    this.token = '';
    this.socket = null;
    this.player = null; // a promise of the Player
    this.current = null; // the Player, once open (its `stats`: the counts of the answer playing)
  }

  update() {
    const token = (this.element.querySelector('.vc-answer-stream') || { dataset: {} }).dataset.stream || '';
    if (token && token !== this.token) this.play(token);
  }

  async play(token) {
    this.close();
    this.token = token;
    const url = new URL(`/live/answer/${token}`, window.location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const socket = this.socket = new WebSocket(url);
    socket.binaryType = 'arraybuffer';
    socket.onmessage = (message) => {
      if (typeof message.data !== 'string') {
        const samples = new Float32Array(message.data);
        this.player.then((player) => player.push(samples));
        return;
      }
      const news = JSON.parse(message.data);
      if (news.rate) {
        this.player = Player.open(news.rate, ANSWER_RULE);
        this.player.then((player) => { this.current = player; });
      }
      if (news.mode) this.say(MODES[news.mode]);
      if (news.end) this.player.then((player) => player.end());
    };
  }

  say(text) {
    const line = this.element.querySelector('.vc-answer-stream-text');
    if (line) line.textContent = text;
  }

  close() {
    if (this.socket) this.socket.close();
    if (this.player) this.player.then((player) => player.close());
    this.socket = this.player = this.current = null;
  }
}
