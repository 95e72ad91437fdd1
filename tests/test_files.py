"""Atomic file writes (robot_rl.core.files)."""

from __future__ import annotations

import pytest

from robot_rl.core.files import atomic_path, atomic_write_bytes, atomic_write_text


def test_atomic_writes_replace_the_file_and_leave_nothing_else(tmp_path):
    path = tmp_path / "status.json"
    assert atomic_write_text(path, "old") == path
    assert atomic_write_text(path, "néw\n") == path
    assert path.read_text() == "néw\n"
    assert atomic_write_bytes(path, b"\x00\x01", fsync=True) == path
    assert path.read_bytes() == b"\x00\x01"
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary_one(tmp_path):
    path = tmp_path / "labels.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".labels.json.")
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["labels.json"]
    with pytest.raises(TypeError):
        atomic_write_text(path, b"not text")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["labels.json"]


def test_durable_steps_make_rename_and_remove_folders(tmp_path):
    from robot_rl.core.files import fsync_file, fsync_tree, make_dirs_durably, remove_tree_durably, rename_durably

    assert make_dirs_durably(tmp_path / "a" / "b") == tmp_path / "a" / "b" and (tmp_path / "a" / "b").is_dir()
    (tmp_path / "a" / "b" / "f").write_bytes(b"x")
    fsync_file(tmp_path / "a" / "b" / "f")
    fsync_tree(tmp_path / "a")
    assert rename_durably(tmp_path / "a", tmp_path / "c") == tmp_path / "c"
    assert (tmp_path / "c" / "b" / "f").read_bytes() == b"x"
    remove_tree_durably(tmp_path / "c")
    remove_tree_durably(tmp_path / "missing")  # nothing to remove: nothing done
    assert list(tmp_path.iterdir()) == []
