"""The compute policy that acts at import: the optimized BLAS preload on Linux, and what happens when it comes too
late. Each case is a fresh Python process (the preload acts once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"

pytestmark = pytest.mark.skipif(not (sys.platform.startswith("linux") and os.path.exists(OPENBLAS)),
                                reason="the preload is for Linux with Debian's libopenblas0-pthread")


def python(code: str, **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter; ``env`` entries set to None are removed from its environment."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    environment = {k: v for k, v in environment.items() if v is not None}
    return subprocess.run([sys.executable, "-W", "always", "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env=environment, timeout=120)


def loaded_blas(code: str, **env) -> tuple[str, str]:
    """(the warnings printed, whether the process has OpenBLAS mapped) after ``code``."""
    out = python(code + "\nimport pathlib\nprint('libopenblas' in pathlib.Path('/proc/self/maps').read_text())", **env)
    assert out.returncode == 0, out.stderr
    return out.stderr, out.stdout.strip()


def test_importing_voicechat_first_loads_openblas_quietly():
    warnings, mapped = loaded_blas("import voicechat, mlx.core")
    assert (warnings, mapped) == ("", "True")


@pytest.mark.parametrize("module", ["voicechat.stt.mel", "voicechat.tts.mog", "voicechat.cache",
                                    "voicechat.benchmarks.frame"])
def test_importing_any_module_of_the_package_first_loads_openblas_before_mlx(module):
    """Python runs the package's __init__ (whose first import is compute) before any of its modules, so no module
    needs its own preload import."""
    warnings, mapped = loaded_blas(f"import {module}, sys\nassert 'mlx.core' in sys.modules")
    assert (warnings, mapped) == ("", "True")


def test_importing_mlx_first_says_that_the_preload_came_too_late():
    warnings, mapped = loaded_blas("import mlx.core\nimport voicechat")
    assert mapped == "False"
    assert "RuntimeWarning: mlx was imported before voicechat" in warnings and "import voicechat first" in warnings


def test_no_warning_when_openblas_is_in_the_process_anyway():
    warnings, mapped = loaded_blas("import mlx.core\nimport voicechat", LD_PRELOAD=OPENBLAS)
    assert (warnings, mapped) == ("", "True")


def test_cuda_kernel_batching_is_set_on_cuda_only_and_a_users_value_wins():
    show = ("import os, voicechat, mlx.core as mx\n"
            "print(mx.cuda.is_available(), os.environ.get('MLX_MAX_OPS_PER_BUFFER'))")
    cuda, value = python(show, MLX_MAX_OPS_PER_BUFFER=None).stdout.split()
    assert value == ("100" if cuda == "True" else "None")
    assert python(show, MLX_MAX_OPS_PER_BUFFER="7").stdout.split()[1] == "7"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS runs one thread on one core: no worker to wait")
@pytest.mark.solo  # the spin shows on an idle core only: the worker yields to any other thread that wants one
def test_idle_blas_workers_sleep_at_once_unless_the_user_chose_how_long_they_spin():
    """After a threaded float32 product, OpenBLAS's worker spins before it sleeps: 2**28 cycles by default (0.1 s of a
    core on this machine, measured as the process's CPU time while its main thread sleeps), taken from the MLX stream
    thread, the web server and a browser during a live frame. The preload makes it sleep at once; a user's
    OPENBLAS_THREAD_TIMEOUT still wins (28: OpenBLAS's own default)."""
    spin = ("import resource, time, voicechat, mlx.core as mx\n"
            "def cpu():\n"
            "    usage = resource.getrusage(resource.RUSAGE_SELF)\n"
            "    return usage.ru_utime + usage.ru_stime\n"
            "a = mx.random.normal((1024, 1024))\n"
            "mx.eval(a)\n"
            "mx.eval(a @ a)\n"
            "before = cpu()\n"
            "time.sleep(0.5)\n"
            "print(cpu() - before)")

    def idle_cpu_seconds(**env) -> float:
        out = python(spin, OPENBLAS_NUM_THREADS=None, **env)
        assert out.returncode == 0, out.stderr
        return float(out.stdout)

    assert idle_cpu_seconds(OPENBLAS_THREAD_TIMEOUT=None) < 0.02
    assert idle_cpu_seconds(OPENBLAS_THREAD_TIMEOUT="28") > 0.05
