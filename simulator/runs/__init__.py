"""Running things: one run, sweeps over systems x load points x seeds (local or Ray), capacity plans,
replicates, steady-state detection, progress."""
