"""docs/extending.md: its example file is included verbatim, its scenario snippet runs, and its in-code engine
example runs as printed."""

from __future__ import annotations

import re

import numpy as np
import yaml

from tests.conftest import ROOT
from tests.simulator.engine_helpers import simulate
from tests.test_docs_examples import blocks

PAGE = "docs/extending.md"


def test_the_page_includes_its_example_verbatim():
    examples = [m for m in blocks(PAGE) if m["path"]]
    assert [m["path"] for m in examples] == ["docs/examples/shortest_prompt_first.py"]
    assert examples[0]["code"] == (ROOT / examples[0]["path"]).read_text()


def test_the_scenario_snippet_admits_shortest_prompts_first(scenario_file, examples_on_path):
    (snippet,) = [m for m in blocks(PAGE) if not m["path"]]
    fields = yaml.safe_load(snippet["code"])
    fields["workload"] = {"prompt": {"dist": "uniform", "low": 16, "high": 2048}, "output": 64}
    fields["engine"] = {**fields["engine"], "max_running": 4}
    fields["frontier"] = {"concurrency": [32]}
    shortest, sim = simulate(scenario_file(name="spf", **fields), quick=True)
    _, base = simulate(scenario_file(name="fcfs", **{**fields, "engine": {"max_running": 4}}), quick=True)
    assert shortest["throughput_per_gpu"] > 0
    # 32 users behind 4 slots: the queue is long, so picking the shortest prompts admits shorter ones than first
    # come first served does, and leaves the long ones waiting
    rq, rb = sim.requests.frame(), base.requests.frame()
    admitted, waiting = ~np.isnan(rq["admitted"]), np.isnan(rq["admitted"])
    assert rq["prompt"][admitted].mean() < 0.9 * rb["prompt"][~np.isnan(rb["admitted"])].mean()
    assert rq["prompt"][waiting].mean() > 1.5 * rq["prompt"][admitted].mean()


def test_the_in_code_example_runs():
    code = re.search(r"## The engine in code.*?```python\n(.*?)```", (ROOT / PAGE).read_text(), re.S)[1]
    scope: dict = {}
    exec(compile(code.replace('"scenarios/', f'"{ROOT}/scenarios/'), PAGE, "exec"), scope)
    steps, requests = scope["steps"], scope["requests"]
    assert len(steps["end"]) > 100 and (requests["finish"] == requests["finish"]).sum() > 32
