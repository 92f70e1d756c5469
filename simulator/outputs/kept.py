"""A command's earlier outputs survive its failure: every command that writes a results folder (``simulate``,
``plan``, ``bench``, ``break-even``) sets the folder's files aside before it writes, and puts them back when it
fails or is interrupted, removing what the failed command wrote beside them. Each file is written atomically
(atomic_files), but a command writes several that must agree (runs.csv, summary.json and report.html; bench.csv
and the scenario.yaml it came from); without this a failure between two of them left a folder whose files
describe different runs. The run store (``.runs/``) is left alone: a finished run is kept, so that the same
command resumes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STORE = ".runs"
ASIDE_PREFIX = ".previous-"


def _files(root: Path) -> set[Path]:
    """The output files under ``root``, relative to it: not the run store, not a set-aside copy."""
    if not root.is_dir():
        return set()
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != STORE and not d.startswith(ASIDE_PREFIX)]
        out.update((Path(dirpath) / f).relative_to(root) for f in filenames)
    return out


@contextmanager
def kept_on_failure(out: Path) -> Iterator[None]:
    """Copies of ``out``'s files aside for the block; on any exception (Ctrl-C and ``sys.exit`` included) they
    replace what the block wrote and the files it added are removed; on success the copies are dropped."""
    out = Path(out)
    before = _files(out)
    aside = Path(tempfile.mkdtemp(prefix=ASIDE_PREFIX, dir=out)) if before else None
    for rel in before:
        (aside / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(out / rel, aside / rel)
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        for rel in _files(out) - before:
            (out / rel).unlink()
            _prune(out, (out / rel).parent)
        for rel in before:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(aside / rel, out / rel)
        raise
    finally:
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)


def _prune(root: Path, folder: Path) -> None:
    """Remove ``folder`` and its parents below ``root`` while they are empty (made by the failed command)."""
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
