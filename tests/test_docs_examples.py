"""The extension docs' examples: each page includes its example files verbatim, and the examples run and keep the
closed forms they promise."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from simulator.errors import PolicyError, UserError
from tests.conftest import BASE, ROOT
from tests.simulator.engine_helpers import simulate

PAGES = ["docs/adding-a-policy.md", "docs/adding-an-acceptance-source.md"]
BLOCK = re.compile(r"<!-- (example: (?P<path>\S+)|scenario) -->\n```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)


def blocks(page: str) -> list[re.Match]:
    return list(BLOCK.finditer((ROOT / page).read_text()))


@pytest.mark.parametrize("page", PAGES)
def test_pages_include_their_example_files_verbatim(page):
    examples = [m for m in blocks(page) if m["path"]]
    assert examples, f"{page} has no included example"
    for m in examples:
        assert m["code"] == (ROOT / m["path"]).read_text(), f"{page}: the block of {m['path']} differs from the file"


@pytest.mark.parametrize("page", PAGES)
def test_scenario_snippets_of_the_pages_run(page, scenario_file, examples_on_path):
    snippets = [m for m in blocks(page) if not m["path"]]
    assert snippets, f"{page} has no scenario snippet"
    for i, m in enumerate(snippets):
        fields = yaml.safe_load(m["code"])
        path = scenario_file(name=f"snippet{i}", **fields)
        for system in range(len(fields.get("systems", BASE["systems"]))):
            row, _ = simulate(path, system=system, quick=True)
            assert row["throughput_per_gpu"] > 0


def geometric(scenario_file, alpha: float, gamma: int, systems: list) -> object:
    return scenario_file(systems=[{"name": str(s), "drafter": "dspark", "gamma": gamma, "policy": s} for s in systems],
                         acceptance={"source": "geometric_source:GeometricSource", "options": {"alpha": alpha}},
                         workload={"prompt": 64, "output": 400}, frontier={"concurrency": [32]})


def test_geometric_source_reproduces_the_iid_block_length(scenario_file, examples_on_path):
    """Every block verified in full: tau = (1 - alpha^(gamma+1)) / (1 - alpha)."""
    alpha, gamma = 0.7, 4
    row, _ = simulate(geometric(scenario_file, alpha, gamma, [f"static-{gamma}"]))
    assert row["tau"] == pytest.approx((1 - alpha ** (gamma + 1)) / (1 - alpha), rel=0.03)


def test_geometric_source_rates_per_mix_entry(scenario_file, examples_on_path):
    path = scenario_file(systems=[{"name": "s", "drafter": "dspark", "gamma": 3, "policy": "static-3"}],
                         acceptance={"source": "geometric_source:GeometricSource",
                                     "options": {"alpha": {"math": 0.9, "code": 0.5, "chat": 0.0}}},
                         workload={"prompt": 64, "output": 400}, frontier={"concurrency": [48]})
    row, _ = simulate(path)
    expect = {a: (1 - a**4) / (1 - a) for a in (0.9, 0.5, 0.0)}
    assert row["tau_by_mix"]["chat"] == 1.0  # alpha 0: nothing is ever accepted
    assert row["tau_by_mix"]["math"] == pytest.approx(expect[0.9], rel=0.05)
    assert row["tau_by_mix"]["code"] == pytest.approx(expect[0.5], rel=0.05)
    with pytest.raises(UserError, match=r"alpha has no rate for mix entry 'code'"):
        simulate(scenario_file(name="bad", acceptance={"source": "geometric_source:GeometricSource",
                                                       "options": {"alpha": {"math": 0.9}}}))


def test_survival_cut_verifies_the_closed_form_prefix_and_pays_the_stall(scenario_file, examples_on_path):
    """Confidence alpha everywhere: prefix survival is alpha^j, so min_survival s keeps floor(log s / log alpha)
    tokens (0.8 and 0.5: 3), exactly what static-3 verifies; only SurvivalCut pays the scheduling stall."""
    alpha, gamma = 0.8, 6
    path = geometric(scenario_file, alpha, gamma, ["survival_cut:SurvivalCut", "static-3"])
    cut, sim = simulate(path, system=0)
    static, _ = simulate(path, system=1)
    assert cut["mean_verify_budget"] == pytest.approx(static["mean_verify_budget"], rel=0.01)
    assert cut["tau"] == pytest.approx((1 - alpha**4) / (1 - alpha), rel=0.03)
    steps = sim.steps.frame()
    decoding = steps["decoding"] > 0
    clock = np.array([sim.prices.clock.lookup(b, k) for b, k in zip(steps["batch_tokens"], steps["kv_tokens"], strict=True)])
    stall = steps["step_ms"] - steps["draft_ms"] - clock
    assert stall[decoding] == pytest.approx(0.3)  # engine.sched_stall_ms, on every step the policy decides


def test_half_block_verifies_half_and_rejects_a_bad_fraction(scenario_file, examples_on_path):
    path = geometric(scenario_file, 0.9, 6, ["half_block:HalfBlock"])
    row, _ = simulate(path)
    assert 3.8 < row["mean_verify_budget"] <= 4.0  # 1 + ceil(0.5 x 6), a little less at requests' ends
    bad = scenario_file(name="bad", systems=[{"name": "half", "policy": "half_block:HalfBlock",
                                              "params": {"fraction": 2}}])
    with pytest.raises(PolicyError, match=r"^system 'half' \(policy 'half_block:HalfBlock'\): fraction must be in "
                                          r"\[0, 1\], got 2$"):
        simulate(bad)
