"""Running one simulation in a test, always followed by the invariant checker."""

from __future__ import annotations

from simulator.core.invariants import check_invariants
from simulator.inputs.config import load_scenario
from simulator.inputs.systems import resolve_systems
from simulator.runs.run import LoadPoint, RunSpec, run_one


def simulate(path, system: int | str = 0, concurrency: int | None = -1, seed: int = 0, quick: bool = False,
             sets: tuple[str, ...] = ()):
    """Run one system of the scenario at one load point (default: the first closed-loop point) and check the
    engine's invariants. Returns (runs.csv row, simulation)."""
    scn = load_scenario(path, sets)
    systems = resolve_systems(scn)
    spec_system = systems[system] if isinstance(system, int) else next(s for s in systems if s.name == system)
    if concurrency == -1:
        concurrency = scn.model.frontier.concurrency[0] if scn.model.frontier else None
    row, sim = run_one(scn, RunSpec(spec_system, LoadPoint(concurrency), seed, quick))
    check_invariants(sim)
    return row, sim
