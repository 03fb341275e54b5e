# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The atomic writer every file of the package goes through: whole or absent, with the mode a plain write gives."""

import os
import stat

import pytest

from slimspec_hf.utils import atomic_path, atomic_write


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_file_gets_the_mode_a_plain_write_gives(tmp_path):
    mask = os.umask(0o027)
    try:
        atomic_write(tmp_path / "new.json", "{}")
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(mask)
    # what `open(path, "w")` makes under this mask (not mkstemp's 0600): the group can read it, as it can a plain file
    assert _mode(tmp_path / "new.json") == _mode(tmp_path / "plain.json") == 0o640


def test_a_replaced_file_keeps_its_mode(tmp_path):
    path = tmp_path / "kept.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    atomic_write(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("interrupted")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
