"""A newcomer's first steps: `pip install .` / `pip install -e .` in a new venv give the package and the `voicechat`
command, which work from another folder (the README's Python example included); the README's set-up is what CI does.

The new venv sees this environment's packages (mlx, numpy, pip, setuptools, ...) through a .pth file, so nothing is
downloaded; voicechat itself is built from a copy of the repository's files and installed into it. A voicechat that
the reader installed into this environment (the README's `pip install .`) is left out of that view: otherwise it
would come first on the new venv's path and hide the editable install's finder.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HARNESS_WAV, TESTS
from voicechat.random_checkpoint import write_checkpoint

pytestmark = pytest.mark.slow  # each test builds and installs the package into a new venv

REPO = TESTS.parent
README = (REPO / "README.md").read_text()
DEFAULT_MODEL = "mlx-community/NemotronLabs-VoiceChat-11B-4bit"


def run(args, cwd, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}  # no checkout on the path
    p = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300,
                       env={**env, "HF_HUB_OFFLINE": "1"}, **kwargs)
    assert p.returncode == 0, f"{args}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def readme_block(heading: str, language: str) -> str:
    """The first ```language block after ``heading`` in the README."""
    section = README[README.index(heading):]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


def outer_packages(root: Path) -> list[Path]:
    """This environment's site-packages (those on its path) as folders of links to their entries, less any installed
    voicechat."""
    views = []
    found = [Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    for i, packages in enumerate(dict.fromkeys(found)):
        view = root / f"outer-{i}"
        view.mkdir()
        for entry in packages.iterdir():
            if not entry.name.lower().replace("___", "__.").startswith(("voicechat", "__editable__.voicechat")):
                (view / entry.name).symlink_to(entry)
        views.append(view)
    return views


def new_venv(root: Path, *install_args: str) -> tuple[Path, Path, Path]:
    """A new venv in ``root`` with voicechat pip-installed from a copy of the repository (``install_args`` before
    the source folder: e.g. "-e"); returns its python, the source copy and an empty folder elsewhere."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = root / "venv" / "bin" / "python"
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout.strip()
    (Path(purelib) / "outer_environment.pth").write_text("".join(f"{p}\n" for p in outer_packages(root)))
    source = root / "source"  # what a fresh clone holds of the package
    shutil.copytree(REPO / "voicechat", source / "voicechat", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet", *install_args,
         source], elsewhere)
    return python, source, elsewhere


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return new_venv(tmp_path_factory.mktemp("install"))


def test_pip_install_gives_the_package_and_the_command(installed, tmp_path):
    python, source, elsewhere = installed
    where = run([python, "-c", "import voicechat; print(voicechat.__file__)"], elsewhere).stdout.strip()
    assert Path(where).is_relative_to(python.parent.parent)  # installed into the venv, not found in a checkout
    command = python.parent / "voicechat"
    usage = run([command, "--help"], elsewhere).stdout
    assert usage.startswith("usage: voicechat ") and "generate" in usage and "download" in usage
    version = run([python, "-c", "import importlib.metadata as m; print(m.version('voicechat'))"], elsewhere).stdout
    assert run([command, "--version"], elsewhere).stdout == f"voicechat {version}"  # the package's own metadata
    # the README's Python example, as written, on a tiny random checkpoint in place of the 9 GB download
    example = readme_block("## Python API", "python")
    assert DEFAULT_MODEL in example and "assets/capital_16k_mono.wav" in example
    model = write_checkpoint(tmp_path / "tiny model")
    (elsewhere / "assets").mkdir()
    shutil.copy(REPO / "assets" / "capital_16k_mono.wav", elsewhere / "assets")
    shutil.copy(HARNESS_WAV, elsewhere / "question.wav")
    (elsewhere / "example.py").write_text(example.replace(DEFAULT_MODEL, str(model)))
    out = run([python, "example.py"], elsewhere).stdout
    assert (elsewhere / "answer.wav").stat().st_size > 44 and out.strip()
    # the installed command answers a recording, from another folder, and says where the answer went
    err = run([command, "generate", "--model", model, "--audio", "question.wav", "--quiet", "--extra-seconds", "0"],
              elsewhere).stderr
    assert f"wrote {elsewhere / 'outputs' / 'question-answer.wav'} (" in err


def test_requirements_txt_lists_what_the_package_declares(installed):
    python, source, elsewhere = installed
    declared = run([python, "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('voicechat')))"],
                   elsewhere).stdout.splitlines()
    from packaging.requirements import Requirement

    def normal(line: str) -> str:
        r = Requirement(line.replace('; extra == "app"', ""))  # the app's extra is a plain line in the file
        return f"{r.name.lower()}{sorted(r.extras)}{r.specifier}{r.marker or ''}"

    listed = [line for line in (REPO / "requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    # the ray extra (Ray Serve, docs/deploy.md; "serve" is its old name) is not the app's: the tests' list brings it
    ray = [line for line in declared if 'extra == "ray"' in line or 'extra == "serve"' in line]
    assert sorted(map(normal, set(declared) - set(ray))) == sorted(map(normal, listed))
    assert "ray[serve]>=2.60" in [r.split(";")[0] for r in ray if 'extra == "ray"' in r]
    assert [r.split(";")[0] for r in ray if 'extra == "serve"' in r] == ["voicechat[ray]"]
    assert "ray[serve]>=2.60" in (REPO / "tests" / "requirements.txt").read_text().splitlines()


def test_editable_install_runs_the_checkout(tmp_path):
    python, source, elsewhere = new_venv(tmp_path, "-e")
    where = run([python, "-c", "import voicechat; print(voicechat.__file__)"], elsewhere).stdout.strip()
    assert Path(where) == source / "voicechat" / "__init__.py"
    assert run([python.parent / "voicechat", "--help"], elsewhere).stdout.startswith("usage: voicechat ")


def test_readme_setup_is_what_ci_installs():
    """CI installs the system packages the README's manual steps list, then runs the README's test command; that
    command (setup.sh) installs the same requirement files as the manual steps, into the same .venv."""
    ci = (REPO / ".ci" / "run").read_text()
    apt = re.search(r"apt-get install (.*?)(>|$)", ci, re.M).group(1).split()
    steps = readme_block("**By hand**", "bash").splitlines()
    readme_apt = next(shlex.split(s) for s in steps if "apt-get install" in s)
    readme_pip = next(shlex.split(s) for s in steps if s.startswith("pip install"))
    packages = [w for w in apt if not w.startswith("-")]
    assert packages and [w for w in readme_apt[readme_apt.index("install") + 1:] if not w.startswith("-")] == packages
    files = [readme_pip[i + 1] for i, w in enumerate(readme_pip) if w == "-r"]
    assert files == ["requirements.txt", "tests/requirements.txt"] and readme_pip[-2:] == ["-e", "."]
    assert "python3 -m venv .venv" in steps and ". .venv/bin/activate" in steps
    script = (REPO / "setup.sh").read_text()
    assert f'test) lists="{" ".join(files)}" ;;' in script and f'app) lists="{files[0]}" ;;' in script
    assert "-r %s ' \"$f\"; done) -e ." in script  # this checkout, editable, as the manual steps install it
    assert re.search(r"<!-- test-command -->\n```bash\n\./setup\.sh test\n```", README)
    pytest_steps = [s for s in steps if "pytest" in s]  # the parallel run, then the solo tests (docs/testing.md)
    assert len(pytest_steps) == 2 and steps[-2:] == pytest_steps
    for step in pytest_steps:  # the manual steps end with what the script runs
        assert f"\n.venv/bin/{step} \"$@\" ||" in script


def test_setup_script_says_what_is_wrong_in_one_line(tmp_path):
    """Without an argument it gives its usage (exit 2); with no Python 3.10 it says which Python it found."""
    shutil.copy(REPO / "setup.sh", tmp_path / "setup.sh")
    usage = subprocess.run(["sh", tmp_path / "setup.sh"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: ./setup.sh app")
    old = subprocess.run(["sh", tmp_path / "setup.sh", "app"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHON": "/bin/false"})
    assert old.returncode == 1 and old.stderr.count("\n") == 1
    assert old.stderr.startswith("voicechat needs Python 3.10 or newer; /bin/false is ")
    assert not (tmp_path / ".venv").exists()


@pytest.mark.skipif(Path(sys.prefix) != REPO / ".venv", reason="the suite is not running in this checkout's .venv "
                    "(./setup.sh test makes it; CI runs that)")
def test_setup_installs_this_checkout_with_its_command(tmp_path):
    """After ./setup.sh, .venv/bin/voicechat is the command, and the venv's voicechat is this checkout's, from any
    folder (an editable install): the suite and the command run the same files."""
    command = REPO / ".venv" / "bin" / "voicechat"
    assert run([command, "--version"], tmp_path).stdout.startswith("voicechat ")
    where = run([sys.executable, "-c", "import voicechat; print(voicechat.__file__)"], tmp_path).stdout.strip()
    assert Path(where) == REPO / "voicechat" / "__init__.py"
    assert (REPO / "outputs").is_dir()
