"""Bytes per value of each number type, and of the KV cache a model keeps: facts every step model and the table
set's memory facts read."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hw_profile.hardware.shapes import ModelShape

DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "fp4": 0.5, "w4a16": 0.5}


def kv_cache_dtype(shape: ModelShape, dtype: str = "bf16") -> str:
    """The KV cache's number type, the one rule every table producer prices and records: the model's own where it
    fixes one (``kv_dtype``: DeepSeek-V4 and its drafters store fp8) or the deployment chose one (``hw-profile
    estimate --kv-dtype fp8`` sets the shape's ``kv_dtype``); else the activations' type, as the engines' default
    ``kv_cache_dtype=auto`` is: 16 bits for 16-bit and for quantized (fp8, fp4) weights alike, whose activations
    stay 16-bit, and fp32 where the forward runs in fp32 (a CPU measurement)."""
    if shape.kv_dtype:
        return shape.kv_dtype
    return dtype if dtype in ("bf16", "fp16", "fp32") else "bf16"


def kv_cache_bytes(shape: ModelShape, dtype: str = "bf16") -> float:
    """Bytes per cached KV value (``kv_cache_dtype``)."""
    return DTYPE_BYTES[kv_cache_dtype(shape, dtype)]
