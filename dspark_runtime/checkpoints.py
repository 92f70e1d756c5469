"""Drafter checkpoints in the public DeepSpec format: an HF-style directory with ``config.json`` (the target's Qwen3
config, the drafter's layer count and the DeepSpec keys: block_size, mask_token_id, target_layer_ids, markov_rank,
markov_head_type, enable_confidence_head, confidence_head_with_markov, ...) and safetensors weights under
DeepSpec's parameter names (``layers.N.self_attn.q_proj.weight``, ``fc.weight``, ``hidden_norm.weight``,
``markov_head.markov_w1.weight``, ``confidence_head.proj.weight``, ...), single file or sharded with an index.

Our own addition, ignored by DeepSpec: ``calibration.json`` beside them, the STS temperatures.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from atomic_files import atomic_write_text
from simulator.errors import UserError

from .drafters import DrafterConfig, build_drafter
from .target import resolve_device, resolve_dtype

CALIBRATION_FILE = "calibration.json"
# Weights a checkpoint may leave out because they are the target's (they are always re-shared from the target).
SHARED_WITH_TARGET = ("embed_tokens.weight", "lm_head.weight")


def save_drafter(drafter, out_dir: str | Path, calibration: dict | None = None) -> Path:
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(json.dumps(drafter.config.to_hf_dict(), indent=2, sort_keys=True))
    state = {k: v.detach().contiguous().cpu() for k, v in drafter.state_dict().items()}
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    if calibration is not None:
        (tmp / CALIBRATION_FILE).write_text(json.dumps(calibration, indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def save_calibration(drafter_dir: str | Path, calibration: dict) -> None:
    atomic_write_text(Path(drafter_dir) / CALIBRATION_FILE, json.dumps(calibration, indent=2))


def read_drafter_config(path: str | Path) -> DrafterConfig:
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: drafter checkpoint directory not found")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise UserError(f"{cfg_file}: not found; a DeepSpec drafter checkpoint needs config.json")
    try:
        raw = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{cfg_file}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise UserError(f"{cfg_file}: expected a JSON object")
    return DrafterConfig.from_hf_dict(raw, str(cfg_file))


def _weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError):
            raise UserError(f"{index}: expected a JSON object with a weight_map") from None
        files = [path / n for n in names]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise UserError(f"{index}: weight_map names shards that do not exist: {missing}")
        return files
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    raise UserError(f"{path}: no model.safetensors (or model.safetensors.index.json) in the drafter directory")


def check_compatible(cfg: DrafterConfig, target_config, source: str) -> None:
    """The drafter must be built for this target: same width and vocabulary, layer ids inside it."""
    checks = [("hidden_size", cfg.hidden_size, target_config.hidden_size),
              ("vocab_size", cfg.vocab_size, target_config.vocab_size),
              ("num_target_layers", cfg.num_target_layers, target_config.num_hidden_layers)]
    for name, mine, theirs in checks:
        if mine != theirs:
            raise UserError(f"{source}: field {name} is {mine}; the target has {theirs}")


def load_drafter(path: str | Path, target=None, device: str | torch.device = "cpu",
                 dtype: str | torch.dtype = "float32"):
    """A drafter from a DeepSpec-format directory. With ``target`` (a loaded transformers model) the drafter is
    checked against it and takes its embeddings and LM head (which the file may then omit). Returns
    (drafter, calibration dict or None)."""
    from safetensors import safe_open

    path = Path(path)
    cfg = read_drafter_config(path)
    source = str(path / "config.json")
    if target is not None:
        check_compatible(cfg, target.config, source)
    drafter = build_drafter(cfg)
    expected = drafter.state_dict()
    loaded: dict[str, torch.Tensor] = {}
    for file in _weight_files(path):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                loaded[key] = f.get_tensor(key)
    unexpected = sorted(set(loaded) - set(expected))
    missing = sorted(set(expected) - set(loaded) - (set(SHARED_WITH_TARGET) if target is not None else set()))
    if unexpected or missing:
        raise UserError(f"{path}: weights do not match config.json ({cfg.architecture}, "
                        f"markov_rank={cfg.markov_rank}, head={cfg.markov_head_type}): "
                        f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}, "
                        f"unexpected {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}")
    for key, tensor in loaded.items():
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise UserError(f"{path}: weight {key} has shape {tuple(tensor.shape)}; config.json implies "
                            f"{tuple(expected[key].shape)}")
    drafter.load_state_dict(loaded, strict=False)
    if target is not None:
        drafter.share_target_embeddings(target)
    dev = resolve_device(str(device)) if not isinstance(device, torch.device) else device
    drafter.to(device=dev, dtype=resolve_dtype(dtype)).eval()
    drafter.requires_grad_(False)
    calibration = None
    cal_file = path / CALIBRATION_FILE
    if cal_file.is_file():
        calibration = json.loads(cal_file.read_text())
        temps = calibration.get("temperatures")
        if not isinstance(temps, list) or len(temps) != cfg.block_size:
            raise UserError(f"{cal_file}: field temperatures must be a list of {cfg.block_size} numbers")
    return drafter, calibration
