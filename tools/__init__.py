"""Scripts that write or derive the library's bundled data with hw_profile; not part of the installed
distribution. Run from the repository root:

    python -m tools.embedded regenerate   # the roofline and expert-parallel tables in scenarios/hardware/
    python -m tools.paper_v4              # the paper's DeepSeek-V4 tables calibrated on its MTP-1 telemetry
    python -m tools.kernel_floors         # where the estimate's per-kernel latencies (KERNEL_FLOOR_US) come from
"""
