"""voicechat.random_checkpoint: where it may write (never over a folder of the user's) and its command line."""

import re
import subprocess
import sys

import mlx.core as mx
import pytest

from conftest import TESTS
from voicechat.checkpoint import read_weights
from voicechat.network import DERIVED_KEYS
from voicechat.random_checkpoint import MARKER, main, write_checkpoint


def test_writes_into_a_new_an_empty_or_its_own_folder(tmp_path):
    new = write_checkpoint(tmp_path / "a" / "new")
    assert (new / MARKER).is_file() and (new / "config.json").is_file()
    first = read_weights(new)["stt_model.lm_head.weight"]
    write_checkpoint(new, seed=1)  # its own folder: replaced
    assert not mx.array_equal(first, read_weights(new)["stt_model.lm_head.weight"]).item()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (write_checkpoint(empty) / MARKER).is_file()


def test_carries_every_derived_buffer(tmp_path):
    # the published layouts it imitates (NVIDIA's release) carry the buffers that others may leave out
    names = set(read_weights(write_checkpoint(tmp_path / "c")))
    for pattern in DERIVED_KEYS:
        assert any(re.search(pattern, n) for n in names), pattern


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_never_replaces_what_the_user_has(tmp_path, kind):
    target = tmp_path / "mine"
    if kind == "folder":
        target.mkdir()
        (target / "notes.txt").write_text("keep me")
    else:
        target.write_text("keep me")
    with pytest.raises(FileExistsError, match="mine"):
        write_checkpoint(target)
    kept = target / "notes.txt" if kind == "folder" else target
    assert kept.read_text() == "keep me"


def test_command_line_refuses_a_users_folder_in_one_line(tmp_path, capsys):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff\xd8")
    assert main([str(tmp_path / "photos")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not empty and holds no random checkpoint" in err
    assert (tmp_path / "photos" / "cat.jpg").read_bytes() == b"\xff\xd8"


def test_module_command_writes_a_checkpoint(tmp_path):
    p = subprocess.run([sys.executable, "-m", "voicechat.random_checkpoint", str(tmp_path / "ckpt"), "--layout",
                        "runtime"], capture_output=True, text=True, cwd=TESTS.parent, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(tmp_path / "ckpt") and (tmp_path / "ckpt" / MARKER).is_file()
