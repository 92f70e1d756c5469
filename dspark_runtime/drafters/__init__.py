"""Drafters: DSpark (Markov / Gated / RNN sequential heads, confidence head), DFlash (no heads) and an
autoregressive one-layer baseline (Eagle3-style). All share the target's frozen embeddings and LM head and expose
the same two paths: ``forward_train`` (teacher-forced) and ``new_context`` / ``add_context`` / ``propose``
(drafting)."""

from __future__ import annotations

from .config import DSPARK_ARCH, EAGLE3_ARCH, DrafterConfig
from .dspark import DSparkDrafter, Proposal
from .eagle import EagleDrafter


def build_drafter(cfg: DrafterConfig):
    return EagleDrafter(cfg) if cfg.is_eagle else DSparkDrafter(cfg)


__all__ = ["DSPARK_ARCH", "EAGLE3_ARCH", "DSparkDrafter", "DrafterConfig", "EagleDrafter", "Proposal",
           "build_drafter"]
