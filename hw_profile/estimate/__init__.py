"""A step-time table for a deployment nobody measured (``hw-profile estimate``): the deployment and its kernels'
source (estimate), what a serving engine adds around the kernels (engine_costs), and data-parallel attention with
wide expert parallelism: its memory, exchange and overlap (dp_ep)."""
