"""Step-time tables: the on-disk format (a CSV and its JSON sidecar), the one rule that reads a step time off a
table, and the monotone copy a policy may be given (fit)."""
