"""The tiny world's sizes and where its files live.

Two sizes: ``full`` (the documented results; about 15-20 minutes on 2 CPU cores) and ``smoke`` (seconds, for tests).
Everything a build makes goes under one data directory (default ``.dspark-data/``, or ``$DSPARK_DATA``, or a flag),
one sub-directory per size, so a smoke build never overwrites the full one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from simulator.errors import UserError

DEFAULT_DATA_DIR = ".dspark-data"
DATA_DIR_ENV = "DSPARK_DATA"

# The drafters every build trains. `dspark` is the Markov-head (vanilla) variant, as in the paper's Table 1.
DRAFTER_KINDS = ("dspark", "dflash", "eagle3")
# Extra DSpark sequential heads a build may add (--variants).
VARIANT_KINDS = ("dspark-gated", "dspark-rnn")


@dataclass(frozen=True)
class WorldSize:
    name: str
    # corpus: records per benchmark (before the train/calib/eval split)
    n_code: int
    n_docstrings: int
    n_topic_chunks: int
    n_arith: int
    n_word: int
    max_answer_chars: int
    max_prompt_chars: int
    # tokenizer and target
    vocab_size: int
    hidden_size: int
    target_layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    seq_len: int
    target_steps: int
    target_batch: int
    target_lr: float
    # self-distillation and drafters
    regen_prompts_per_domain: int
    regen_max_new: int
    target_layer_ids: tuple[int, ...]
    drafter_layers: int
    markov_rank: int
    gamma: int
    num_anchors: int
    drafter_steps: int
    drafter_batch: int
    drafter_lr: float
    # calibration and evaluation
    calib_prompts_per_domain: int
    eval_prompts_per_domain: int
    eval_max_new: int
    eval_batch: int
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


SIZES: dict[str, WorldSize] = {
    "full": WorldSize(
        name="full", n_code=2400, n_docstrings=1800, n_topic_chunks=900, n_arith=1800, n_word=1800,
        max_answer_chars=600, max_prompt_chars=400, vocab_size=2048, hidden_size=256, target_layers=4, heads=4, kv_heads=2,
        head_dim=64, intermediate_size=768, seq_len=192, target_steps=300, target_batch=16, target_lr=2e-3,
        regen_prompts_per_domain=600, regen_max_new=128, target_layer_ids=(0, 1, 2), drafter_layers=2,
        markov_rank=64, gamma=7, num_anchors=16, drafter_steps=480, drafter_batch=12, drafter_lr=1.5e-3,
        calib_prompts_per_domain=48, eval_prompts_per_domain=96, eval_max_new=96, eval_batch=48,
    ),
    "smoke": WorldSize(
        name="smoke", n_code=60, n_docstrings=60, n_topic_chunks=40, n_arith=60, n_word=60,
        max_answer_chars=200, max_prompt_chars=160, vocab_size=320, hidden_size=32, target_layers=3, heads=2, kv_heads=1,
        head_dim=16, intermediate_size=64, seq_len=96, target_steps=25, target_batch=8, target_lr=3e-3,
        regen_prompts_per_domain=8, regen_max_new=24, target_layer_ids=(0, 1), drafter_layers=1,
        markov_rank=8, gamma=7, num_anchors=6, drafter_steps=12, drafter_batch=4, drafter_lr=3e-3,
        calib_prompts_per_domain=6, eval_prompts_per_domain=4, eval_max_new=16, eval_batch=12,
    ),
}


def world_size(name: str) -> WorldSize:
    if name not in SIZES:
        raise UserError(f"--size: unknown world size {name!r}; expected one of {sorted(SIZES)}")
    return SIZES[name]


def data_root(flag: str | os.PathLike | None = None) -> Path:
    """The data directory: the flag, else $DSPARK_DATA, else .dspark-data in the working directory."""
    return Path(flag or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


@dataclass(frozen=True)
class WorldPaths:
    """Where one built world's pieces live."""

    root: Path

    @property
    def corpus(self) -> Path:
        return self.root / "corpus.jsonl"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer.json"

    @property
    def target(self) -> Path:
        return self.root / "target"

    @property
    def selfdistill(self) -> Path:
        return self.root / "selfdistill.pt"

    def drafter(self, kind: str) -> Path:
        return self.root / "drafters" / kind

    @property
    def manifest(self) -> Path:
        return self.root / "build.json"

    @property
    def eval_dir(self) -> Path:
        return self.root / "eval"


def world_paths(data_dir: str | os.PathLike | None, size: str) -> WorldPaths:
    return WorldPaths(data_root(data_dir) / size)


def built_sizes(data_dir: str | os.PathLike | None) -> list[str]:
    """Sizes whose build finished under the data directory (their manifest records a total time)."""
    out = []
    for name in SIZES:
        manifest = world_paths(data_dir, name).manifest
        try:
            if "total_seconds" in json.loads(manifest.read_text()):
                out.append(name)
        except (OSError, ValueError):
            continue
    return out


def size_to_use(flag: str | None, data_dir: str | os.PathLike | None) -> str:
    """The world size a command works on: the flag, else the one size that was built (``full`` when both were)."""
    if flag is not None:
        world_size(flag)
        return flag
    built = built_sizes(data_dir)
    if not built:
        raise UserError(f"--size: no tiny world is built under {data_root(data_dir)}; run `dspark build-tiny` "
                        "(or `dspark build-tiny --size smoke` for a quick one) first, or give --data-dir")
    return "full" if "full" in built else built[0]
