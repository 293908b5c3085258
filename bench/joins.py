"""What a joining conversation's set-up holds the running conversations back: ``python -m bench.joins M
[--running 4] [--prompts 1,32,128,400] [--rounds 3]``.

``--running`` conversations run steadily in one group on the ``speech`` workload (each tick every one pushes its
80 ms, then one ``group.step()``). Then a conversation with a system prompt of about P positions asks to join
(``group.session``); the ticks go on until it has joined. Its set-up runs in stages between the ticks, one a tick
(``Session._set_up``, docs/batching.md §1): what a tick of the others waits for is the asking plus that tick's
stage. Per P and voice, over the rounds: a tick's wall time before the join (p50), the ticks with set-up work, the
longest and the median such wait, the whole set-up (all of it: what one piece between two ticks would hold them
back), and its parts: the TTS warm-up, the prompt's prefill and the join into the row (the session's clock). The
voice: ``known``, the running conversations' (the model keeps its TTS warm-up, so the set-up skips it), or ``new``,
one no conversation had (a noise recording of its own each round: its set-up runs the warm-up).
Milliseconds of wall time, timed around the set-up work itself (the ticks' own time on a shared machine varies more
than a stage takes).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import numpy as np

from voicechat import load
from voicechat.benchmarks.frame import speech_script
from voicechat.benchmarks.sessions import CountingGroup, session_counts
from voicechat.benchmarks.workload import FRAME, PROMPT, RATE, bench_input

PARTS = ("tts warm-up", "prompt prefill", "join")  # the set-up's kinds of work (Session._set_up's clock)
STEADY_TICKS = 5  # ticks timed before the join: what one tick of the running conversations takes
VOICES = ("known", "new")
_new_voices = itertools.count()


def voice(model, kind: str):
    """The joining conversation's speaker: the running ones' (None: the checkpoint's) or 3 s of noise never heard."""
    if kind == "known":
        return None
    rate = model.config.codec.sample_rate
    return (np.random.default_rng(next(_new_voices)).standard_normal(3 * rate) * 0.1).astype(np.float32), rate


def prompt_of(model, positions: int) -> str:
    """A system prompt of at least ``positions`` timeline positions (PROMPT's words repeated)."""
    words = PROMPT.split()
    text = lambda n: " ".join((words * (n // len(words) + 1))[:n])  # noqa: E731
    n = 1
    while model.prompt_length(text(n)) < positions:
        n += 1
    return text(n)


def one_join(model, running: int, prompt: str, seed: int, speaker=None) -> dict:
    """-> the joining conversation's prompt positions and the set-up's wait in each tick that had some (seconds)."""
    group = CountingGroup(model, running + 1)
    x = bench_input(400)
    step = round(FRAME * RATE)
    sessions = [group.session(PROMPT, i) for i in range(running)]
    for s in sessions:
        s.script = speech_script(model, s.prompt_frames)
    fed = 0

    def tick(ask=None) -> float:
        """One tick -> the set-up work in it (the asking, the stage)."""
        nonlocal fed
        t0 = time.perf_counter()
        if ask is not None:
            ask()
        asking = time.perf_counter() - t0
        for s in sessions:
            s.push(x[fed * step:(fed + 1) * step], RATE)
        fed += 1
        group.staged = 0.0
        group.step()
        return asking + group.staged

    while not all(s.started for s in sessions):
        tick()
    steady = []
    for _ in range(STEADY_TICKS):
        t0 = time.perf_counter()
        tick()
        steady.append(time.perf_counter() - t0)
    joining = []
    waits = [tick(lambda: joining.append(group.session(prompt, seed, speaker)))]
    while joining[0].setting_up:
        waits.append(tick())
    parts = {kind: sum(joining[0].clock.calls.get(kind, [])) for kind in PARTS}
    for s in [*sessions, *joining]:
        s.close()
    return {"positions": joining[0].prompt_frames, "waits": waits, "tick": statistics.median(steady), "parts": parts}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--running", type=int, default=4)
    p.add_argument("--prompts", type=session_counts, default=[1, 32, 128, 400],
                   help="system prompt positions of the joining conversation (at least)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    model = load(args.model)
    one_join(model, args.running, prompt_of(model, max(args.prompts)), 0)  # warm-up: the shapes once
    print(f"model {args.model}  {args.running} conversations running, one joins; ms over {args.rounds} rounds")
    print(f"{'prompt':>7s} {'voice':>6s} {'tick p50':>9s} {'ticks':>6s} {'wait max':>9s} {'wait p50':>9s} "
          f"{'whole set-up p50':>17s}" + "".join(f" {kind + ' p50':>17s}" for kind in PARTS))
    for positions, kind in itertools.product(args.prompts, VOICES):
        rows = [one_join(model, args.running, prompt_of(model, positions), r + 1, voice(model, kind))
                for r in range(args.rounds)]
        waits = [w for r in rows for w in r["waits"]]
        print(f"{rows[0]['positions']:7d} {kind:>6s} {statistics.median(r['tick'] for r in rows) * 1e3:9.1f} "
              f"{len(rows[0]['waits']):6d} {max(waits) * 1e3:9.1f} "
              f"{statistics.median(waits) * 1e3:9.1f} {statistics.median(sum(r['waits']) for r in rows) * 1e3:17.1f}"
              + "".join(f" {statistics.median(r['parts'][kind] for r in rows) * 1e3:17.1f}" for kind in PARTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
