"""dspark-sim's simulator: a SimPy model of continuous batching with speculative verification policies.

It never imports torch; real models reach it only through the acceptance-source interface."""

__version__ = "0.1.0"
