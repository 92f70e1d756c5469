"""Step-time tables T(B, K) for the simulator: estimated, measured, calibrated, computed and viewed by
``hw-profile`` (cli.py). The sub-packages, each importing only those listed before it: tables, hardware, kernels,
estimate, measure, calibrate, view (docs/hw-profile.md, "Touch points")."""
