"""atomic_files: shared by hw_profile, simulator and dspark_runtime, so it imports none of them; a write either
lands whole or leaves the old file as it was, with nothing left behind."""

import ast
import os
from pathlib import Path

import pytest

import atomic_files
from atomic_files import atomic_write, atomic_write_text

PROJECT = ("hw_profile", "simulator", "dspark_runtime")


def test_imports_nothing_of_the_project():
    tree = ast.parse(Path(atomic_files.__file__).read_text())
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        assert not [n for n in names if n.split(".")[0] in PROJECT], names


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = atomic_write_text(tmp_path / "deep" / "runs.csv", "old\n")

    def half_then_fail(tmp: Path) -> None:
        tmp.write_text("half a ta")
        raise KeyboardInterrupt  # an interrupted run, not only an error

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["runs.csv"]


def test_a_write_replaces_whole_with_the_mode_a_plain_open_gives(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    target = atomic_write_text(tmp_path / "table.csv", "new\n")
    assert target.read_text() == "new\n"
    assert os.stat(target).st_mode & 0o777 == os.stat(plain).st_mode & 0o777
