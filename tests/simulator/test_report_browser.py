"""The report renders in a real browser: headless Chromium opens report.html offline, runs its scripts, and every
figure reports that plotly drew it, with no JavaScript error. CI installs Chromium (.ci/run) and sets
DSPARK_REQUIRE_BROWSER=1 so that a missing browser fails rather than skips."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.browser


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        if os.environ.get("DSPARK_REQUIRE_BROWSER"):
            pytest.fail("Chromium is required here (DSPARK_REQUIRE_BROWSER) but not installed")
        pytest.skip("Chromium not installed (apt-get install chromium)")
    return exe


def render(html_path, tmp_path) -> str:
    """The DOM after the page's scripts ran, from headless Chromium with no network."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=30000", "--dump-dom",
           html_path.resolve().as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_report_draws_every_plot_without_js_errors(scenario_file, tmp_path):
    import sys

    path = scenario_file(systems=["mtp-1", "dspark", "static-5"], frontier={"concurrency": [2, 16, 48]},
                         traffic={"kind": "poisson", "segments": [{"duration_s": 1, "rate": 5}, {"duration_s": 1, "rate": 20}]})
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "simulator.cli", str(path), "--quick", "--out", str(out), "--jobs", "2"],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    page = (out / "report.html").read_text()
    # self-contained: no external script or stylesheet (plotly.js itself is inlined)
    assert not re.search(r"<script[^>]+src=", page) and not re.search(r"<link[^>]+href=", page)
    n_figures = len(re.findall(r'class="plotly-graph-div"', page))
    assert n_figures >= 6

    dom = render(out / "report.html", tmp_path)
    assert 'data-js-errors' not in dom.split("<head>")[0], "a script raised an error while the page loaded"
    drawn = re.findall(r'class="plotly-graph-div[^"]*"[^>]*data-drawn="(\d+)"|data-drawn="(\d+)"[^>]*class="plotly-graph-div', dom)
    counts = [int(a or b) for a, b in drawn]
    assert len(counts) == n_figures, f"{len(counts)} of {n_figures} figures finished drawing"
    assert all(c > 0 for c in counts), f"a figure drew no trace: {counts}"


def test_plan_report_draws_its_capacity_figures(scenario_file, tmp_path):
    import sys

    path = scenario_file(systems=["mtp-1", "dspark"], frontier=None, traffic={"kind": "poisson", "rate": 30.0},
                         sla={"tps_targets": [100.0]})
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "simulator.cli", "plan", str(path), "--quick", "--out", str(out),
                          "--jobs", "2", "--attainment", "0.9", "--max-gpus", "4", "--rate-tolerance", "0.3"],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    page = (out / "report.html").read_text()
    n_figures = len(re.findall(r'class="plotly-graph-div"', page))
    # the plan ran the scenario's own open-loop point (its only sweep run) too, so the sweep's sections join in
    assert "GPUs needed at the SLA" in page and "<h2>Headline</h2>" in page and n_figures >= 4
    dom = render(out / "report.html", tmp_path)
    assert 'data-js-errors="' not in dom
    counts = [int(a or b) for a, b in re.findall(
        r'class="plotly-graph-div[^"]*"[^>]*data-drawn="(\d+)"|data-drawn="(\d+)"[^>]*class="plotly-graph-div', dom)]
    assert len(counts) == n_figures and all(c > 0 for c in counts), counts
