"""Bytes per value of each number type, and of the KV cache a model keeps: facts every step model and the table
set's memory facts read."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hw_profile.hardware.shapes import ModelShape

DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "fp4": 0.5, "w4a16": 0.5}


def kv_cache_bytes(shape: ModelShape) -> float:
    """Bytes per cached KV value, as the kernel path prices them: bf16, the engines' default cache type
    (``kv_cache_dtype=auto`` is the activation type, for fp8 checkpoints too), whatever the weights' dtype, unless
    the model fixes its cache's type (``kv_dtype``: DeepSeek-V4 and its drafters store fp8) or the deployment
    chooses one (``hw-profile estimate --kv-dtype fp8`` sets the shape's ``kv_dtype``)."""
    return DTYPE_BYTES[shape.kv_dtype] if shape.kv_dtype else 2.0
