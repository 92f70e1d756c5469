"""Which built world a live run uses, building the smoke world when nothing else is there, and loading it once
per process (a sweep's runs in one worker share the loaded models; every run has its own caches).

``runtime``: ``tiny`` = the full tiny world when it is built, else the smoke world (built on first use, in
seconds, saying so); ``smoke`` = the smoke world; anything else = a world directory made by ``dspark build-tiny``
(``DATA_DIR/SIZE``). Data directory: $DSPARK_DATA, else ``.dspark-data`` in the working directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.errors import UserError

from ..world import SIZES, WorldPaths, world_paths


def _complete(paths: WorldPaths, drafter: str) -> bool:
    return paths.manifest.is_file() and "total_seconds" in paths.manifest.read_text() and \
        (paths.drafter(drafter) / "config.json").is_file()


def named_world(runtime: str, drafter: str = "dspark") -> WorldPaths:
    """The world ``runtime`` names now, built or not: ``tiny`` is the full world once it is complete for
    ``drafter``, else the smoke world; ``smoke``; or a directory."""
    if runtime in ("tiny", "smoke"):
        full = world_paths(None, "full")
        return full if runtime == "tiny" and _complete(full, drafter) else world_paths(None, "smoke")
    return WorldPaths(Path(runtime))


def world_digest(runtime: str) -> str:
    """Which world ``runtime`` names now and a digest of its build manifest (sizes, seeds, losses, timings: a
    rebuild changes it), without building anything: the run key's ``inputs`` (``LiveSource.input_digest``), so
    runs stored from the smoke world are not reused once the full world is built, nor across rebuilds."""
    paths = named_world(runtime)
    root = paths.root.resolve()
    if not paths.manifest.is_file():
        return f"{root}:unbuilt"
    return f"{root}:{hashlib.sha256(paths.manifest.read_bytes()).hexdigest()[:16]}"


def resolve_world(runtime: str, drafter: str, where: str) -> WorldPaths:
    paths = named_world(runtime, drafter)
    if runtime in ("tiny", "smoke"):
        if not _complete(paths, drafter):  # only the smoke world is ever built here
            _build_smoke(paths, runtime)
        return paths
    if not paths.root.is_dir():
        raise UserError(f"{where}.runtime: world directory {paths.root} not found; build one with "
                        "`./run dspark build-tiny` (or name `tiny` or `smoke`)")
    if not _complete(paths, drafter):
        raise UserError(f"{where}.runtime: {paths.root} holds no finished world with drafter {drafter!r}; "
                        f"run `./run dspark build-tiny --data-dir {paths.root.parent} --size {paths.root.name}`")
    return paths


def _build_smoke(paths: WorldPaths, runtime: str) -> None:
    """Build the smoke world once, even when several worker processes ask at the same time."""
    from ..build import build_tiny
    from ..progress import Progress

    paths.root.parent.mkdir(parents=True, exist_ok=True)
    with open(paths.root.parent / ".smoke-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(paths, "dspark"):
            return
        why = "the full tiny world is not built" if runtime == "tiny" else "it is not built yet"
        print(f"live runtime: building the smoke world in {paths.root} ({why}; "
              f"`./run dspark build-tiny` builds the full one)", file=sys.stderr, flush=True)
        build_tiny(paths, SIZES["smoke"], seed=0, progress=Progress(quiet=True))


@dataclass
class LoadedWorld:
    paths: WorldPaths
    target: object
    tokenizer: object
    drafter: object | None
    temperatures: np.ndarray | None  # STS temperatures of the drafter's confidence head
    layer_ids: list[int]
    prompts: dict[str, list[tuple[str, list[int]]]]  # mix key -> [(benchmark, token ids)] of the held-out split


@lru_cache(maxsize=4)
def load_world(root: str, drafter: str, device: str, dtype: str) -> LoadedWorld:
    from ..build import quiet_transformers
    from ..checkpoints import load_drafter
    from ..corpus import load_corpus
    from ..rollouts import encode_prompts
    from ..target import load_target

    quiet_transformers()
    paths = WorldPaths(Path(root))
    target, tokenizer = load_target(paths.target, device=device, dtype=dtype)
    model, temps, layer_ids = None, None, [0]
    if drafter != "none":
        model, cal = load_drafter(paths.drafter(drafter), target=target, device=device, dtype=dtype)
        temps = np.asarray(cal["temperatures"], dtype=float) if cal else None
        layer_ids = list(model.config.target_layer_ids)
    records = [r for r in load_corpus(paths.corpus) if r.split == "eval"]
    ids = encode_prompts(tokenizer, records)
    prompts: dict[str, list[tuple[str, list[int]]]] = {}
    for rec, tok in zip(records, ids, strict=True):
        for key in (rec.domain, rec.benchmark):
            prompts.setdefault(key, []).append((rec.benchmark, list(tok)))
    return LoadedWorld(paths, target, tokenizer, model, temps, layer_ids, prompts)


