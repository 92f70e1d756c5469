"""Shared fixtures: the smoke-size tiny world (built once per test session, in seconds) and small random models."""

from __future__ import annotations

import pytest

# the runtime needs torch; without it (a simulator-only install) its tests are skipped, not a collection error
torch = pytest.importorskip("torch")

from dspark_runtime.drafters import DSPARK_ARCH, EAGLE3_ARCH, DrafterConfig  # noqa: E402


@pytest.fixture(scope="session")
def smoke_world(tmp_path_factory):
    """A built smoke world: (WorldPaths, WorldSize, manifest)."""
    from dspark_runtime.build import build_tiny
    from dspark_runtime.progress import Progress
    from dspark_runtime.world import SIZES, world_paths

    root = tmp_path_factory.mktemp("dspark-data")
    paths = world_paths(root, "smoke")
    manifest = build_tiny(paths, SIZES["smoke"], seed=0, variants=True, progress=Progress(quiet=True))
    return paths, SIZES["smoke"], manifest


@pytest.fixture(scope="session")
def smoke_models(smoke_world):
    """The smoke world's target (loaded), runner and tokenizer."""
    from dspark_runtime.target import TargetRunner, load_target

    paths, size, _ = smoke_world
    target, tokenizer = load_target(paths.target)
    return target, TargetRunner(target, list(size.target_layer_ids)), tokenizer


def small_config(arch: str = DSPARK_ARCH, head: str | None = "vanilla", vocab: int = 40, gamma: int = 4,
                 layers: int = 2, conf: bool = True) -> DrafterConfig:
    cfg = DrafterConfig(
        architecture=arch, vocab_size=vocab, hidden_size=32, intermediate_size=48,
        num_hidden_layers=1 if arch == EAGLE3_ARCH else layers, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, num_target_layers=3, target_layer_ids=[0, 1], block_size=gamma, mask_token_id=2,
        markov_rank=6 if head else 0, markov_head_type=head,
        enable_confidence_head=bool(head) and conf, confidence_head_with_markov=bool(head) and conf)
    cfg.validate("test config")
    return cfg


def randomize(module: torch.nn.Module, seed: int = 0, std: float = 0.3) -> torch.nn.Module:
    """Weights far from their initial values (norm weights and zero biases would hide mistakes)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * std)
    return module.eval()
