"""What a run is made of: the scenario schema, workloads, hardware tables, systems, the built-in library."""
