"""The report renders in a real browser: headless Chromium opens report.html offline, runs its scripts, and every
figure reports that plotly drew it, with no JavaScript error; at a 1400-pixel window every section (headline,
capacity, hardware, day plan) fits: no table wider than its box, no page wider than the window. CI installs
Chromium (.ci/run) and sets DSPARK_REQUIRE_BROWSER=1 so that a missing browser fails rather than skips."""

from __future__ import annotations

import html
import json
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


def render(html_path, tmp_path, width: int | None = None) -> str:
    """The DOM after the page's scripts ran, from headless Chromium with no network (in a window ``width``
    pixels wide when given)."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=30000", "--dump-dom",
           *([f"--window-size={width},1000"] if width else []), html_path.resolve().as_uri()]
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


# Appended to a copy of a report: once the page has drawn, every table box whose content is wider than the box,
# any table outside a box, and a page wider than the window, into data-overflow on <html> ("none": all fit).
LAYOUT_PROBE = """<script>window.addEventListener('load', function () { setTimeout(function () {
  var bad = [], d = document.documentElement;
  document.querySelectorAll('.table-box').forEach(function (b, i) {
    if (b.scrollWidth > b.clientWidth + 1) bad.push('table box ' + i + ': ' + b.scrollWidth + ' > ' + b.clientWidth);
  });
  document.querySelectorAll('table').forEach(function (t, i) { if (!t.closest('.table-box')) bad.push('table ' + i + ' outside a box'); });
  if (d.scrollWidth > d.clientWidth + 1) bad.push('page: ' + d.scrollWidth + ' > ' + d.clientWidth);
  d.setAttribute('data-overflow', bad.length ? bad.join('; ') : 'none');
}, 300); });</script>"""


def layout_at(page, tmp_path, width: int = 1400) -> tuple[str, str]:
    """What the layout probe found in ``page`` at ``width`` pixels, and the rendered DOM."""
    probe = page.with_name(page.stem + "-probe.html")
    probe.write_text(page.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    dom = render(probe, tmp_path, width)
    found = re.search(r'data-overflow="([^"]*)"', dom)
    assert found, "the layout probe did not run"
    return html.unescape(found.group(1)), dom


def cli(*args: str) -> None:
    from click.testing import CliRunner

    from simulator.cli import cli as main

    res = CliRunner().invoke(main, [*args, "--quick", "--jobs", "2"])
    assert res.exit_code == 0, res.output


@pytest.mark.heavy
def test_every_section_fits_1400_px_and_draws_without_script_errors(scenario_file, tmp_path):
    from tests.conftest import H200_TABLE

    # the widest tables the report makes: three systems, a disaggregated prefill pool (P and D columns), two
    # hardware options (one with a long name), a two-segment day
    systems = ["mtp-1", "threshold-0.7", "dspark-async"]
    common = {"systems": systems, "workload": {"prompt": 128, "output": 48}, "sla": {"tps_targets": [100.0]}}
    path = scenario_file(**common, engine={"max_running": 32, "max_batch_tokens": 4096, "prefill": "disaggregated"},
                         frontier={"concurrency": [2, 16]}, traffic={"kind": "poisson", "rate": 40.0})
    tide = scenario_file("tide", **common, engine={"max_running": 32, "max_batch_tokens": 4096}, frontier=None,
                         traffic={"kind": "poisson", "time_scale": 1200, "segments": [
                             {"duration_s": 3600, "rate": 20.0}, {"duration_s": 3600, "rate": 120.0}]})
    plan = ["--attainment", "0.9", "--max-gpus", "6", "--rate-tolerance", "0.3", "--replicates", "1"]
    cli(str(path), "--out", str(tmp_path / "o"))
    cli("plan", str(path), "--out", str(tmp_path / "o"), *plan)  # headline and capacity in one report
    cli("plan", str(path), "--out", str(tmp_path / "h"), *plan, "--hardware", f"h200={H200_TABLE}:3.5",
        "--hardware", f"h200-at-a-higher-price={H200_TABLE}:7")
    cli("plan", str(tide), "--per-segment", "--out", str(tmp_path / "d"), *plan)
    sections = {"o": ["<h2>Headline</h2>", "<h2>Capacity</h2>", "<h2>Frontiers</h2>"], "h": ["<h2>Which hardware</h2>"],
                "d": ["<h2>Day plan</h2>"]}
    for folder, headings in sections.items():
        page = tmp_path / folder / "report.html"
        text = page.read_text()
        assert all(h in text for h in headings), folder
        overflow, dom = layout_at(page, tmp_path)
        assert overflow == "none", f"{folder}: {overflow}"
        assert 'data-js-errors="' not in dom, f"{folder}: a script raised an error while the page loaded"
        counts = [int(a or b) for a, b in re.findall(
            r'class="plotly-graph-div[^"]*"[^>]*data-drawn="(\d+)"|data-drawn="(\d+)"[^>]*class="plotly-graph-div', dom)]
        assert len(counts) == len(re.findall(r'class="plotly-graph-div"', text)) and all(c > 0 for c in counts)
        if folder == "o":
            # every marker of the frontier chart has its legend entry; the matched gain is one number with its
            # range in a tooltip
            assert "load point off the frontier" in dom
            doc = json.loads((tmp_path / "o" / "summary.json").read_text())
            g = doc["systems"]["mtp-1"]["tps_gain_at_matched_throughput"]
            assert f"title='from {g['min']:+.0%} to {g['max']:+.0%}" in text.replace('"', "'")
