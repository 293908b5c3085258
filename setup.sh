#!/bin/sh
# Sets up this folder's virtual environment (.venv) and runs the app or the tests in it:
#   ./setup.sh app [app.py options]     e.g. ./setup.sh app --demo
#   ./setup.sh test [pytest options]    e.g. ./setup.sh test -m "not browser", ./setup.sh test tests/test_mel.py
# A venv of its own because macOS's Homebrew Python and Debian's refuse `pip install` into the system (PEP 668). It
# installs only when .venv is new or a requirements file or pyproject.toml changed since the last set-up; later runs
# start at once. This checkout is installed into it editable (`pip install -e .`): .venv/bin/voicechat runs this
# folder's code, and so does `import voicechat` in the venv (the tests import the same files through pytest's
# pythonpath).
set -eu
cd "$(dirname "$0")"
what=${1:-}
case $what in
  app) lists="requirements.txt" ;;
  test) lists="requirements.txt tests/requirements.txt" ;;
  *) echo "usage: ./setup.sh app [app.py options] | ./setup.sh test [pytest options]" >&2; exit 2 ;;
esac
shift
python=${PYTHON:-python3}
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "voicechat needs Python 3.10 or newer; $python is $("$python" -V 2>&1 || echo missing) (set PYTHON=...)" >&2
    exit 1
  fi
  rm -rf .venv
  if ! "$python" -m venv .venv; then
    rm -rf .venv
    echo "$python could not make a venv; on Debian or Ubuntu: sudo apt-get install python3-venv" >&2
    exit 1
  fi
fi
stamp=.venv/.set-up-for-$what
if [ ! -f "$stamp" ] || [ ! -x .venv/bin/voicechat ] || [ -n "$(find $lists pyproject.toml -newer "$stamp")" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # setuptools' editable build warns that a folder named voicechat here may shadow the package: it is the package
  # shellcheck disable=SC2046  # one "-r FILE" pair per list
  PYTHONWARNINGS=ignore::UserWarning \
    .venv/bin/python -m pip install -q $(for f in $lists; do printf -- '-r %s ' "$f"; done) -e .
  touch "$stamp"
fi
mkdir -p outputs  # where the app and the command line write by default (git-ignored)
if [ "$what" = app ]; then
  exec .venv/bin/python app.py "$@"
fi
# The tests in two runs (docs/testing.md): all but the solo ones in parallel, a file per worker, then the solo ones
# (they need the machine to themselves) by themselves. The exit code is the first failing run's; 5 (no test
# collected) only when neither run collected one, as a single file without solo tests leaves the second run empty.
shared=0 solo=0
.venv/bin/python -m pytest -q -rfEs -n auto --dist loadfile --solo exclude "$@" || shared=$?
case $shared in 0|1|5) ;; *) exit "$shared" ;; esac  # interrupted (2), an internal or a usage error: stop here
.venv/bin/python -m pytest -q -rfEs --solo only "$@" || solo=$?
for rc in "$shared" "$solo"; do
  case $rc in 0|5) ;; *) exit "$rc" ;; esac
done
[ "$shared" -eq 5 ] && [ "$solo" -eq 5 ] && exit 5
exit 0
