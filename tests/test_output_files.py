"""Issue 40 #7: output files are written by rename beside a regular file only.

``attnplan labels -o PATH`` writes a dotfile beside PATH and renames it over PATH; a rename replaces
whatever PATH names, so a symbolic link, a character device (as root, ``-o /dev/null`` replaced
/dev/null), a FIFO, a socket or a directory there is refused (exit 2) and left as it was."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from attnplan.cli.main import main
from attnplan.policy import InvalidInputError
from attnplan.safeio import check_replaceable


def _labels(capsys, target) -> tuple[int, str]:
    rc = main(["labels", "--device", "B200", "-o", str(target)])
    return rc, capsys.readouterr().err


def _refused(capsys, target, words: str) -> None:
    before = os.lstat(target)
    rc, err = _labels(capsys, target)
    assert rc == 2 and words in err and len(err.strip().splitlines()) == 1, err
    after = os.lstat(target)
    assert (before.st_mode, before.st_ino) == (after.st_mode, after.st_ino)  # not replaced
    assert not [p for p in os.listdir(os.path.dirname(target)) if p.startswith(".")]  # no dotfile left


def test_a_symlink_is_neither_replaced_nor_written_through(tmp_path, capsys):
    real = tmp_path / "real"
    real.write_text("keep\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    _refused(capsys, link, "symbolic link")
    assert real.read_text() == "keep\n" and link.is_symlink()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    _refused(capsys, dangling, "symbolic link")
    assert not (tmp_path / "nowhere").exists()
    to_dir = tmp_path / "to-dir"
    to_dir.symlink_to(tmp_path)
    _refused(capsys, to_dir, "symbolic link")


def test_a_fifo_is_not_replaced(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _refused(capsys, fifo, "not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_socket_and_a_device_are_not_replaced(tmp_path, capsys):
    sock_path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(sock_path))
        _refused(capsys, sock_path, "not a regular file")
    finally:
        s.close()
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers, in tmp (needs root)
    except (PermissionError, OSError):
        pytest.skip("cannot make a character device here (not root)")
    _refused(capsys, dev, "not a regular file")
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_a_regular_file_is_replaced_and_a_new_one_written(tmp_path, capsys):
    old = tmp_path / "attnplan"
    old.write_text("old\n")
    rc, err = _labels(capsys, old)
    assert rc == 0 and "attnplan.io/" in old.read_text() and not old.is_symlink(), err
    new = tmp_path / "new"
    rc, err = _labels(capsys, new)
    assert rc == 0 and new.is_file()
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o644


def test_check_replaceable_names_the_kind(tmp_path):
    assert check_replaceable(tmp_path / "absent") == tmp_path / "absent"
    with pytest.raises(InvalidInputError, match="is a directory"):
        check_replaceable(tmp_path)
    link = tmp_path / "l"
    link.symlink_to(tmp_path / "x")
    with pytest.raises(InvalidInputError, match="symbolic link") as info:
        check_replaceable(link, what="out")
    assert info.value.field == "out"
