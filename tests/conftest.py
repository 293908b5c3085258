"""Shared test paths. NeMo fixtures: tests/fixtures/nemo (made by tests/fixtures/nemo/regenerate.sh)."""

import contextlib
import os
import signal
from pathlib import Path

import voicechat  # noqa: F401  (first, so that its BLAS preload comes before any test module imports mlx)
import mlx.core as mx
import numpy as np
import pytest

TESTS = Path(__file__).parent
NEMO = TESTS / "fixtures" / "nemo"
HARNESS_WAV = NEMO / "question_16k.wav"
# the harness's runs: checkpoint and TTS sampling ("greedy": top-k 1 keeps the best MoG component and noise 0 removes
# the normal draw, so no randomness is left; "sampled": NeMo's defaults, with every draw recorded)
HARNESS_TTS = {"greedy": dict(guidance_scale=0.5, top_k=1, noise_scale=0.0),
               "sampled": dict(guidance_scale=0.5, top_p=0.8, noise_scale=0.8)}
HARNESS_RUNS = {"greedy": ("tiny_model", "greedy"), "sampled": ("tiny_model", "sampled"),
                "greedy_aria": ("tiny_model_aria", "greedy"), "sampled_aria": ("tiny_model_aria", "sampled"),
                "v2_greedy_aria": ("tiny_v2_aria", "greedy")}


def default_sigint() -> None:
    """``preexec_fn`` of a child a test stops with SIGINT (Ctrl+C): a runner started in the background (`nohup`,
    `cmd &` in a script) ignores SIGINT, its children inherit that, and Python then raises no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def sigint_ignored():
    """This process ignores SIGINT meanwhile, as a runner started in the background does (children inherit it)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class ReplayNoise:
    """NeMo's recorded draws in NeMo's call order, alternating per MoG iteration: the Gumbel values G (already
    -log(-log(u+eps)+eps)), then the normals. Asking in another order fails."""

    def __init__(self, ref):
        gumbels, normals = ref["tts.noise.gumbel"], ref["tts.noise.randn"]
        assert len(gumbels) == len(normals)
        self.draws = [draw for g, n in zip(gumbels, normals) for draw in (("gumbel", g), ("normal", n))]

    def frame(self, n, components, latent):
        kinds, values = zip(*self.draws[:2 * n])
        del self.draws[:2 * n]
        assert kinds == ("gumbel", "normal") * n, "NeMo draws a Gumbel, then a normal, per iteration"
        return (mx.array(np.stack(values[0::2])).reshape(n, 1, components),
                mx.array(np.stack(values[1::2])).reshape(n, 1, latent))


@pytest.fixture
def traces(monkeypatch) -> list:
    """Compilation on (as on a GPU), and every trace of a compiled function from now on, in order: the functions
    ``mx.compile`` traced (it runs the Python function only to trace it, at each new input shape). Load a fresh
    model after it: its compiled functions are made then."""
    monkeypatch.setenv("VOICECHAT_COMPILE", "1")
    traced = []
    compile_ = mx.compile

    def counting_compile(fn):
        def traced_fn(*args):
            traced.append(fn)
            return fn(*args)
        return compile_(traced_fn)

    monkeypatch.setattr(mx, "compile", counting_compile)
    return traced


def pytest_addoption(parser):
    parser.addoption("--solo", choices=("include", "exclude", "only"), default="include",
                     help="the tests marked solo (they need the machine to themselves): run them with the others "
                          "(include), leave them out (exclude: the parallel run) or run only them (docs/testing.md)")


def pytest_collection_modifyitems(config, items):
    """The ``browser`` and ``audio`` markers (pyproject.toml) by what a test needs, so none is forgotten: a real
    chromium page (the ``page`` / ``browser`` fixtures) or the private sound server (``pulse``, tests/pulse.py).
    The heavy files first. Then ``--solo``: the tests it leaves out are deselected, not skipped (the other run of
    docs/testing.md has them)."""
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        if needs & {"page", "browser"}:
            item.add_marker("browser")
        if "pulse" in needs:
            item.add_marker("audio")
    # the files with a slow or browser test first: a parallel run hands out files in this order, so the long ones
    # start early and the workers end together (docs/testing.md §1)
    heavy = {item.path for item in items if item.get_closest_marker("slow") or item.get_closest_marker("browser")}
    items.sort(key=lambda item: item.path not in heavy)
    choice = config.getoption("solo")
    if choice != "include":
        kept = [item for item in items if (item.get_closest_marker("solo") is not None) == (choice == "only")]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


WORKER_MEMORY = 2 * 2 ** 30  # bytes of memory per parallel worker (-n auto)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker more than the cores, as a test waits on the clock for much of its time (audio paced
    at real time, servers starting), and at most a worker per WORKER_MEMORY of the machine's memory (a worker peaked
    at about 1.2 GB): docs/testing.md."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(1, min((os.cpu_count() or 1) + 1, memory // WORKER_MEMORY))


def pytest_sessionfinish(session, exitstatus):
    """Name the threads the run left running (an engine's, a server's): a daemon thread still evaluating MLX when
    the interpreter tears MLX down ends the process in std::terminate (voicechat/engine/thread.py,
    ``_close_running``)."""
    import sys
    import threading

    left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
    if left:
        print(f"\nthreads still running at the end of the tests: {', '.join(sorted(left))}", file=sys.stderr)
