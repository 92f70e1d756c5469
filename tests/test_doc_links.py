"""Every relative link in README.md and docs/ resolves: the file exists, and an anchor names a heading of it (as
GitHub derives anchors from headings), so moving a section cannot leave the front door pointing nowhere."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped but hyphens, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(FENCE.sub("", page.read_text()))
            if not re.match(r"[a-z]+:", m.group(1))]


def test_the_anchor_rule_matches_githubs():
    assert anchor("A day, not an hour: `--per-segment`") == "a-day-not-an-hour---per-segment"
    assert anchor("Fleets of ~1,000 GPUs: `--probe-replicas`") == "fleets-of-1000-gpus---probe-replicas"


def test_every_relative_link_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in links(page):
            path, _, frag = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
