"""Where the built-in library lives: scenarios, acceptance profiles, hardware tables and traces.

In a source checkout it is the repository's ``scenarios/`` folder. A wheel (``pip install .``) carries the same
folder as package data, installed as ``simulator/scenarios/`` (pyproject.toml maps it there), so every built-in
is found without the source tree.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml


@cache
def library_dir() -> Path:
    package = Path(__file__).resolve().parents[1]  # simulator/
    installed = package / "scenarios"
    return installed if installed.is_dir() else package.parent / "scenarios"


def builtin_scenarios() -> list[Path]:
    return sorted(library_dir().glob("*.yaml"))


def find_builtin_scenario(name: str) -> Path | None:
    """A built-in scenario named as on the command line: ``peak``, ``peak.yaml`` or ``scenarios/peak.yaml``."""
    stem = Path(name).name.removesuffix(".yaml")
    path = library_dir() / f"{stem}.yaml"
    return path if path.is_file() else None


def scenario_description(path: Path) -> str:
    """The first sentence of a scenario's ``description`` ('' when it has none or does not parse)."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return ""
    text = " ".join(str(doc.get("description", "")).split()) if isinstance(doc, dict) else ""
    first = text.split(". ")[0].rstrip(".")
    return first[:100] + ("..." if len(first) > 100 else "")
