"""The figures peak.yaml's comments quote are the README's table of the same run (README: `simulate peak`), and
the scenarios that copy its anchor table copy it whole."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def readme_table() -> dict[str, list[str]]:
    """The README's headline table of `simulate peak`, row per system."""
    text = (ROOT / "README.md").read_text()
    block = text.split("       system tok/s/GPU", 1)[1].split("```", 1)[0]
    rows = {}
    for line in block.splitlines()[1:]:
        cells = line.split()
        if len(cells) == 10:
            rows[cells[0]] = cells[1:]
    return rows


def anchor_table(path) -> dict[str, dict[str, str]]:
    """The `@200:` / `@300:` comment rows under the systems' header line: anchor -> system -> tok/s/GPU."""
    lines = path.read_text().splitlines()
    head = next(i for i, ln in enumerate(lines) if re.match(r"\s*#\s+mtp-1\s+static-3", ln))
    systems = lines[head].lstrip(" #").split()
    out = {}
    for ln in lines[head + 1:head + 3]:
        anchor, *values = ln.lstrip(" #").split()
        out[anchor.rstrip(":")] = dict(zip(systems, values, strict=True))
    return out


def test_peak_comments_quote_the_readme_run():
    table = readme_table()
    assert len(table) == 8
    anchors = anchor_table(ROOT / "scenarios" / "peak.yaml")
    readme_name = {"threshold": "threshold-0.7"}  # the comment's header is narrower
    for anchor, col in (("@200", 5), ("@300", 7)):
        assert {s: table[readme_name.get(s, s)][col] for s in anchors[anchor]} == anchors[anchor], anchor
    text = " ".join(ln.lstrip(" #") for ln in (ROOT / "scenarios" / "peak.yaml").read_text().splitlines())
    assert f"crosses 200 tok/s/user at {table['mtp-1'][5]} tok/s/GPU" in text
    assert f"only {table['mtp-1'][4]} of users at 200 or more; threshold-0.7 {table['threshold-0.7'][4]}" in text
    for name in ("tide-24h", "midday", "offpeak"):
        assert anchor_table(ROOT / "scenarios" / f"{name}.yaml") == anchors, name
