"""Real checkpoints in the loop: a live run's target, drafter and prompts from directories and a file instead of a
built tiny world.

``acceptance: {source: live, target: DIR, drafter_checkpoint: DIR, prompts: FILE}`` (``drafter`` is the system's
drafter name, which the simulator sets, hence the longer key):

- ``target``: a local transformers directory of a Qwen3 causal LM (config.json, *.safetensors, a tokenizer), as
  ``save_pretrained`` writes it; never a hub download;
- ``drafter_checkpoint``: a DeepSpec-format drafter directory (config.json, weights, and ``calibration.json`` with
  the confidence head's STS temperatures if it has them); it takes the target's embeddings and LM head when its
  file omits them. Without it only the drafter-less system can run;
- ``prompts``: JSONL, one request prompt a line: ``{"prompt": TEXT, "domain": NAME}`` plus an optional
  ``"benchmark"``; the workload's mix entries name domains or benchmarks of this file. Each prompt is framed as
  a chat turn (the target tokenizer's chat template when it has one), as the tiny world's prompts are.

Loaded once per process per (paths, device, dtype), like a built world.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.errors import UserError

from .world import LoadedWorld


@dataclass(frozen=True)
class PromptRecord:
    domain: str
    benchmark: str
    prompt: str


def read_prompts(path: Path, where: str) -> list[PromptRecord]:
    if not path.is_file():
        raise UserError(f"{where}.prompts: {path} not found; expected a JSONL file of {{\"prompt\": ..., \"domain\": ...}}")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: line {n}: not JSON ({exc.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str) or not rec["prompt"]:
            raise UserError(f"{path}: line {n}: expected an object with a non-empty string 'prompt'")
        if not isinstance(rec.get("domain"), str) or not rec["domain"]:
            raise UserError(f"{path}: line {n}: expected a string 'domain' (what a workload mix entry names)")
        out.append(PromptRecord(rec["domain"], str(rec.get("benchmark") or rec["domain"]), rec["prompt"]))
    if not out:
        raise UserError(f"{path}: no prompts in the file")
    return out


def checkpoint_digest(target: str, drafter: str | None, prompts: str) -> str:
    """What the run key's ``inputs`` hash for checkpoints: each file's name, size and modification time (the weights
    are not read), and the prompts' content."""
    h = hashlib.sha256()
    for root in (target, drafter):
        if root and Path(root).is_dir():
            for f in sorted(Path(root).iterdir()):
                if f.is_file():
                    st = f.stat()
                    h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    if Path(prompts).is_file():
        h.update(Path(prompts).read_bytes())
    return f"checkpoints:{Path(target).resolve()}:{h.hexdigest()[:16]}"


@lru_cache(maxsize=4)
def load_checkpoints(target: str, drafter: str | None, prompts: str, device: str, dtype: str,
                     where: str) -> LoadedWorld:
    from ..build import quiet_transformers
    from ..checkpoints import load_drafter
    from ..rollouts import encode_prompts
    from ..target import load_target

    quiet_transformers()
    records = read_prompts(Path(prompts), where)
    if not Path(target).is_dir():
        raise UserError(f"{where}.target: {target} is not a directory (a transformers save_pretrained directory)")
    model, tokenizer = load_target(target, device=device, dtype=dtype)
    drafter_model, temps, layer_ids = None, None, [0]
    if drafter:
        if not Path(drafter).is_dir():
            raise UserError(f"{where}.drafter_checkpoint: {drafter} is not a directory (a DeepSpec-format drafter)")
        drafter_model, cal = load_drafter(drafter, target=model, device=device, dtype=dtype)
        temps = np.asarray(cal["temperatures"], dtype=float) if cal else None
        layer_ids = list(drafter_model.config.target_layer_ids)
    ids = encode_prompts(tokenizer, records)
    table: dict[str, list[tuple[str, list[int]]]] = {}
    for rec, tok in zip(records, ids, strict=True):
        for key in dict.fromkeys((rec.domain, rec.benchmark)):
            table.setdefault(key, []).append((rec.benchmark, list(tok)))
    return LoadedWorld(Path(target), model, tokenizer, drafter_model, temps, layer_ids, table)
