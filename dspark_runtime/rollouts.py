"""Full-block speculative decoding over a set of records (prompts), in batches, collecting one row per
request-step: the measurements that calibration and evaluation are computed from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .corpus import Record
from .progress import Progress
from .speculative import SpeculativeDecoder
from .target import TargetRunner
from .tokenizer import format_prompt


@dataclass
class Blocks:
    """Per request-step arrays: domain, benchmark (str), request (N,) int (which prompt), accepted (N,) int, raw
    confidences (N, gamma) or None."""

    domain: np.ndarray
    benchmark: np.ndarray
    accepted: np.ndarray
    confidence: np.ndarray | None
    gamma: int
    emitted_tokens: int
    seconds: float
    request: np.ndarray | None = None


def encode_prompts(tokenizer, records: list[Record]) -> list[list[int]]:
    """Token ids of each record's prompt, framed as a chat turn (the target's chat template when it has one)."""
    if getattr(tokenizer, "chat_template", None):
        return [tokenizer.apply_chat_template([{"role": "user", "content": r.prompt}], add_generation_prompt=True,
                                              tokenize=True) for r in records]
    return [tokenizer(format_prompt(r.prompt))["input_ids"] for r in records]


def run_blocks(runner: TargetRunner, drafter, tokenizer, records: list[Record], *, max_new: int,
               temperature: float, batch: int, seed: int, progress: Progress | None = None,
               label: str = "") -> Blocks:
    import time

    gen = torch.Generator(device=runner.device).manual_seed(seed)
    decoder = SpeculativeDecoder(runner, drafter, temperature=temperature, eos_id=tokenizer.eos_token_id,
                                 generator=gen)
    prompts = encode_prompts(tokenizer, records)
    dom, bench, acc, conf, req = [], [], [], [], []
    emitted = 0
    t0 = time.monotonic()
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        outs, recs = decoder.generate(prompts[start:start + batch], max_new)
        emitted += sum(len(o) for o in outs)
        for rec in recs:
            dom.append(chunk[rec.request].domain)
            bench.append(chunk[rec.request].benchmark)
            acc.append(rec.accepted)
            req.append(start + rec.request)
            if rec.confidence is not None:
                conf.append(rec.confidence)
        if progress is not None:
            progress(f"{label}: {min(start + batch, len(records))}/{len(records)} prompts, {len(acc)} blocks")
    return Blocks(np.array(dom), np.array(bench), np.array(acc, dtype=np.int64),
                  np.array(conf, dtype=float) if conf else None, drafter.gamma, emitted, time.monotonic() - t0,
                  np.array(req, dtype=np.int64))


def eval_records(records: list[Record], split: str, per_domain: int) -> list[Record]:
    """The first ``per_domain`` records of each domain in the split, benchmarks interleaved (deterministic)."""
    from .corpus import DOMAINS

    out = []
    for domain in DOMAINS:
        by_bench: dict[str, list[Record]] = {}
        for r in records:
            if r.split == split and r.domain == domain:
                by_bench.setdefault(r.benchmark, []).append(r)
        lists = [by_bench[b] for b in sorted(by_bench)]
        picked: list[Record] = []
        i = 0
        while len(picked) < per_domain and any(i < len(lst) for lst in lists):
            picked.extend(lst[i] for lst in lists if i < len(lst))
            i += 1
        out.extend(picked[:per_domain])
    return out
