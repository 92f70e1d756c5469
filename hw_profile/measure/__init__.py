"""Measuring on the machine at hand (``hw-profile sps``, ``peaks``): the profiler and the model it times
(profiler, model_builder), DSpark's heads (head_timing), NVML telemetry and CPU load per point (telemetry, load),
and the achieved matmul and bandwidth rates (peaks). Of hw_profile's wings only this one imports torch, and only
inside functions, so the rest runs without the ``profile`` extra."""
