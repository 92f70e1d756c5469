"""The names of the parts a step's time is split into, one vocabulary for every step model that splits it: the
measured kernels (``hw_profile.kernels.ops``, a ``KernelTimes``'s ``parts``), the kernel-level roofline and what the
engine adds (``hw_profile.estimate.estimate``, an ``Estimate``'s ``parts``). A family has the same name whichever
source priced it, so the estimate compares, transfers and overlaps them family by family without a map between two
vocabularies.

The step-level roofline (``hw_profile.kernels.roofline``) and the data-parallel bound (``hw_profile.estimate.dp_ep``)
price a step whole (its bytes, its FLOPs, one communication term) and split it into no families.

These are names in memory: tables and sidecars record none of them. The kernel database's folders (``gemm``,
``attention``, ``mla``, ``moe``, ``comm``, ...) are its own vocabulary, which ``hw_profile.kernels.ops`` reads.
"""

from __future__ import annotations

# kernel families
GEMM = "gemm"  # dense GEMMs: attention projections, dense MLPs, shared experts, router
ATTENTION = "attention"  # attention itself (DeepSeek-V4: its measured modules, their projections inside)
MOE = "moe"  # the routed experts
MHC = "mhc"  # DeepSeek-V4's hyper-connection mixing (the roofline books its floor with GEMM)
LM_HEAD = "lm_head"  # the vocabulary GEMM
COMM = "comm"  # tensor-parallel all-reduces
A2A = "a2a"  # the expert-parallel dispatch and combine, as the deployment overlaps them
KERNEL_FAMILIES = (GEMM, ATTENTION, MOE, MHC, LM_HEAD, COMM, A2A)

# the exchange's two halves, as measured (``ops.exchange_times``); the estimate adds them up as A2A
DISPATCH = "dispatch"
COMBINE = "combine"

# what the engine adds around the kernels
FIXED = "fixed"  # its host cost per step
EAGER = "eager"  # what a step past the captured CUDA graphs adds up to the eager floor (launches + host cost)
SAMPLING = "sampling"
ENGINE_PARTS = (FIXED, EAGER, SAMPLING)

# parts of a step outside its layers: the LM head, the tensor-parallel all-reduces, the exchange itself
LAYERLESS = (LM_HEAD, COMM, A2A)
