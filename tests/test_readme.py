"""The README's code runs as written: every ```python block (and docs/tools.md's, the README's tool example), and
every `voicechat ...` line of its bash blocks with the installed command (a new venv with the package pip-installed
from this checkout, as `./setup.sh` leaves `.venv`, on the PATH, as `. .venv/bin/activate` puts it), from a folder
that has the repository's assets and the `outputs/` folder `./setup.sh` makes, with the demo model in place of the
9 GB checkpoint (the README says so above its Python blocks). What cannot run here is left out by name, with the
reason."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import TESTS
from test_install import new_venv
from test_realtime import Server
from voicechat.checkpoint import DEFAULT_MODEL
from voicechat.random_checkpoint import write_tiny_checkpoint

pytestmark = pytest.mark.slow  # each block is its own process; the Realtime one talks in real time

REPO = TESTS.parent
README = (REPO / "README.md").read_text()
PYTHON_BLOCKS = [block for page in (README, (REPO / "docs" / "tools.md").read_text())
                 for block in re.findall(r"```python\n(.*?)```", page, re.S)]
COMMANDS = [line.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", README, re.S)
            for line in block.splitlines() if line.startswith("voicechat ")]
LOADS_A_MODEL = ("generate", "batch", "live", "serve", "bench")
# what needs a device, runs until stopped or needs the released checkpoint (the tests of live and serve run the first
# two: tests/test_terminal.py, tests/test_realtime.py)
NOT_HERE = {"needs a microphone and speakers": lambda c: " live " in c and "--input-file" not in c,
            "serves until stopped": lambda c: " serve " in c,
            "needs the released checkpoint": lambda c: c.split()[1] in LOADS_A_MODEL and "--demo" not in c}
SERVER = "http://127.0.0.1:8000/v1"  # the Realtime block's URL: the server the test starts takes its place


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The bin folder of a venv with voicechat installed from this checkout."""
    python, _, _ = new_venv(tmp_path_factory.mktemp("venv"))
    return python.parent


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A reader's folder after ./setup.sh: the repository's assets and the outputs folder, nothing else."""
    root = tmp_path_factory.mktemp("reader")
    (root / "assets").symlink_to(REPO / "assets")
    (root / "outputs").mkdir()
    return root


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The demo model (``--demo`` builds the same: voicechat.engine.demo_model)."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("demo"), seed=0)


def run(args: list, cwd: Path, venv: Path) -> subprocess.CompletedProcess:
    """``args`` with ``venv`` first on the PATH and no checkout on the Python path: what an activated venv runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env = {**env, "PATH": f"{venv}{os.pathsep}{env['PATH']}", "HF_HUB_OFFLINE": "1", "VIRTUAL_ENV": str(venv.parent)}
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, f"{args}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


def test_the_readme_has_its_blocks():
    assert len(PYTHON_BLOCKS) >= 5 and sum(DEFAULT_MODEL in block for block in PYTHON_BLOCKS) >= 4
    assert sum(SERVER in block for block in PYTHON_BLOCKS) == 1 and len(COMMANDS) >= 6
    lines = [line for block in re.findall(r"```bash\n(.*?)```", README, re.S) for line in block.splitlines()]
    assert not [line for line in lines if line.startswith("python -m voicechat")]  # the installed command instead


@pytest.mark.parametrize("block", [b for b in PYTHON_BLOCKS if SERVER not in b], ids=lambda b: b.split("\n")[0][:40])
def test_python_block_runs_on_the_demo_model(block, folder, demo, venv, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(block.replace(f'"{DEFAULT_MODEL}"', repr(str(demo))))
    (folder / "answer.wav").unlink(missing_ok=True)
    run(["python", script], folder, venv)
    if "answer.wav" in block:
        assert (folder / "answer.wav").stat().st_size > 44


def test_the_realtime_block_talks_to_serve(folder, venv, tmp_path):
    [block] = [b for b in PYTHON_BLOCKS if SERVER in b]
    with Server(tmp_path) as server:
        script = tmp_path / "client.py"
        script.write_text(block.replace(SERVER, server.base_url))
        (folder / "answer.wav").unlink(missing_ok=True)
        run(["python", script], folder, venv)
        assert (folder / "answer.wav").is_file()
        assert ": open" in server.log_text()  # the client's conversation reached the model


@pytest.mark.parametrize("command", COMMANDS)
def test_command_runs_as_written(command, folder, venv):
    skipped = [why for why, applies in NOT_HERE.items() if applies(command)]
    if skipped:
        pytest.skip(f"{command}: {skipped[0]}")
    assert shutil.which("voicechat", path=str(venv)) == str(venv / "voicechat")
    run(["bash", "-c", command], folder, venv)
