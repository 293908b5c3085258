"""Tests whose traffic cannot stay on 127.0.0.1 run again inside network namespaces of their own
(../shared/reference/SERVING.md §2): Ray binds the machine's interface, and ICE (WebRTC) offers no loopback
candidates. The outer test re-runs its module there; the module's other tests run only inside
(``inside_only``), where the one interface besides ``lo`` is a veth pair that leads nowhere else."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
INSIDE = os.environ.get("VOICECHAT_TEST_NAMESPACE") == "1"  # set for the run inside the namespaces
NAMESPACES = ["unshare", "--net", "--pid", "--fork", "--mount-proc"]
LOOPBACK = "ip link set lo up"
# a test host's address that exists inside the namespace only, on one end of a veth pair whose other end is there too:
# ICE's host candidate (aioice and chromium offer no loopback one)
TEST_HOST = ("ip link add vc0 type veth peer name vc1 && ip addr add 10.254.0.1/24 dev vc0 && ip link set vc0 up "
         "&& ip link set vc1 up")


def inside_only(outer: str):
    return pytest.mark.skipif(not INSIDE, reason=f"runs inside network namespaces of its own, started by {outer}")


def run_inside(test_file: str, outer: str, setup: str = LOOPBACK, env: dict = {},
               timeout: float = 1200) -> subprocess.CompletedProcess:
    """``test_file``'s tests but ``outer`` under pytest inside new network and PID namespaces, after ``setup``
    (shell commands, as root there); asserts that they ran and passed."""
    if INSIDE:
        pytest.skip("this is the run inside the namespace")
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("these tests need unshare (util-linux) and ip (iproute2) for a namespace of their own")
    probe = subprocess.run([*NAMESPACES, "sh", "-c", setup], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace (needs root): {probe.stderr.strip()}")
    script = (f'{setup} && exec "$0" -m pytest -x -q -p no:cacheprovider -rs {Path(test_file).relative_to(ROOT)} '
              f'-k "not {outer}" --durations=6')
    run = subprocess.run([*NAMESPACES, "sh", "-c", script, sys.executable], cwd=ROOT, capture_output=True,
                         text=True, timeout=timeout, env={**os.environ, "VOICECHAT_TEST_NAMESPACE": "1", **env})
    print(run.stdout[-6000:], run.stderr[-3000:])
    assert run.returncode == 0, f"the tests failed inside the namespace:\n{run.stdout}\n{run.stderr}"
    assert re.search(r"\b[1-9]\d* passed", run.stdout) and " skipped" not in run.stdout.splitlines()[-1]
    return run
