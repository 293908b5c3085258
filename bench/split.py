"""Where one frame's time goes, per network: graph building (Python) vs evaluation, compiled vs not.

    python -m bench.split --model DIR

For each of the streaming perception (one 80 ms frame), the LLM step (with both heads), the TTS backbone step, the
MoG code generation, one codec frame and the transcript's first joint call it prints the median time to build the
lazy graph and to evaluate it, with the per-frame functions compiled (``VOICECHAT_COMPILE=1``) and not; then a whole
session frame (one 80 ms feed); then the floor of the LLM step: its quantized matmuls alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import mlx.core as mx

ROWS = 30


def measure(name: str, build, n: int = ROWS) -> None:
    for _ in range(5):
        mx.eval(build())
    built, ran = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        out = build()
        t1 = time.perf_counter()
        mx.eval(out)
        built.append(t1 - t0)
        ran.append(time.perf_counter() - t1)
    b, e = 1e3 * statistics.median(built), 1e3 * statistics.median(ran)
    print(f"{name:44s} build {b:7.2f} ms  eval {e:7.2f} ms  total {b + e:7.2f} ms", flush=True)


def clear_compiled(net) -> None:
    for holder in (net.stt_model.llm, net.tts_model.tts_model.backbone, net.tts_model.tts_model,
                   net.tts_model.audio_codec):
        holder._compiled.functions.clear()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    args = p.parse_args()

    from voicechat import load
    from voicechat.llm import lm
    from voicechat.tts.eartts import warmup_inputs
    from voicechat.tts.mog import KeyNoise

    model = load(args.model)
    c, net = model.config, model.net
    stt, tts, codec = net.stt_model, net.tts_model.tts_model, net.tts_model.audio_codec
    dtype = stt.embed_tokens.scales.dtype if hasattr(stt.embed_tokens, "scales") else stt.embed_tokens.weight.dtype
    codes = model._warmup_codec_codes(None)
    from voicechat.timeline.conversation import Session
    from voicechat.stt.perception import PerceptionStream
    from voicechat.benchmarks.frame import PROMPT, bench_input, speech_script

    x = bench_input(400)
    for mode in ("1", "0"):
        os.environ["VOICECHAT_COMPILE"] = mode
        clear_compiled(net)
        listener = PerceptionStream(stt.perception)
        mx.eval(listener.push(x[:1280 * 100]), listener.arrays())  # caches full (70 frames of keys)
        chunks = iter(range(1280 * 100, len(x), 1280))

        def perceive():
            i = next(chunks)
            return [*listener.push(x[i:i + 1280]), *listener.arrays()]

        measure(f"compile={mode} perception, one 80 ms frame", perceive)
        state = lm.LMState(stt, c)
        lm.prefill(stt, c, state, mx.array([[c.bos_id, c.eos_id]]))
        mx.eval(state.arrays)
        audio, prev = mx.random.normal((1, c.llm.hidden_size)).astype(dtype), mx.array([c.pad_id])
        func_prev = prev if stt.function_head is not None else None

        def llm_step():
            text, func = lm.step(stt, c, state, audio, prev, func_prev)
            return [mx.argmax(text if func is None else mx.stack([text, func]), axis=-1), *state.arrays]

        measure(f"compile={mode} LLM step (both heads, argmax)", llm_step)
        latent = net.tts_model.audio_prompt_latents.get(c.speaker_name)
        tts_state, _ = tts.warmup(warmup_inputs(codes, c.pad_id, c.eos_id, c.tts.speech_pad_id), latent, KeyNoise(0))
        prev_code = mx.array(codes[-1])
        measure(f"compile={mode} TTS backbone step", lambda: [tts.step_hidden(tts_state, prev_code, c.pad_id),
                                                              *tts_state.arrays()])
        hidden = tts.step_hidden(tts_state, prev_code, c.pad_id)
        mx.eval(hidden)
        measure(f"compile={mode} TTS code generation", lambda: tts.generate_codes(hidden, KeyNoise(0)))
        histories = codec.decoder.initial_histories(1)
        frame = mx.array(codes[-2:-1][None].astype(np.int32))
        measure(f"compile={mode} codec frame", lambda: list(codec.decode_frame(frame, *histories)))
        if c.audio.rnnt is not None:
            enc = mx.random.normal((1, c.audio.encoder.d_model)).astype(dtype)
            g, _ = stt.rnnt_decoder.predict(None, None)
            measure(f"compile={mode} transcript: one joint call",
                    lambda: mx.argmax(stt.rnnt_joint(stt.rnnt_joint.enc(enc), g)))
        session = Session(model, PROMPT, script=speech_script(model, model.prompt_length(PROMPT)))
        frames = iter(range(0, len(x), 1280))

        def session_frame():
            i = next(frames)
            t0 = time.perf_counter()
            session.feed(x[i:i + 1280], 16000)
            return time.perf_counter() - t0

        for _ in range(10):
            session_frame()
        walls = [session_frame() for _ in range(ROWS)]
        print(f"{'compile=' + mode + ' session frame (80 ms feed)':44s} wall {1e3 * statistics.median(walls):7.2f} ms "
              f"(p95 {1e3 * sorted(walls)[int(0.95 * (len(walls) - 1))]:.2f})", flush=True)
    quantized = [m for _, m in stt.llm.named_modules() if hasattr(m, "scales")]
    if quantized:
        inputs = {}

        def matmuls():
            out = []
            for m in quantized:
                d = m.weight.shape[1] * 32 // m.bits
                inputs.setdefault(d, mx.random.normal((1, d)).astype(dtype))
                out.append(m(inputs[d]))
            return out

        measure(f"{len(quantized)} quantized LLM matmuls (the floor)", matmuls, n=10)


if __name__ == "__main__":
    main()
