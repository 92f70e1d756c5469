"""Kernel pricing: the roofline model of a step (roofline), the measured kernel database's reader (database, grid),
the step priced from it (ops), and the ``KernelSource`` protocol the estimate asks for measured kernels through
(source)."""
