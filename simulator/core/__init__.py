"""The engine core: the SimPy engine and its step, the batch columns and kernels, drafters, prefill, the
replaceable rules, invariants, and the two plug-in families (verification policies, acceptance sources)."""
