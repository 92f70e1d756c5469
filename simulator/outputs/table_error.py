"""What a command's step times are and how far they are to be trusted, as its outputs say it: the line naming the
table and its kind that ``simulate``, ``simulate plan`` and ``simulate bench`` start with, and the rule a hardware
comparison reads spend by (pairs on two tables closer than the tables' typical step-time error are not told
apart).

A table's typical step-time error is its sidecar's ``expected_error.step_median`` (an estimate's documented median
error against public measurements: hw_profile/estimate/accuracy.py); measured, calibrated and roofline tables
state none, and are read as they are. Outputs stay ASCII ("+/-"), as the rest of the terminal text is."""

from __future__ import annotations

from hw_profile.tables.sidecar import TABLE_KINDS


def typical_error(expected_error: dict | None) -> float | None:
    """A table's typical step-time error, a fraction; None where its ``expected_error`` block states none."""
    median = (expected_error or {}).get("step_median")
    return float(median) if isinstance(median, (int, float)) and median > 0 else None


def kind_phrase(kind: str, expected_error: dict | None) -> str:
    """``estimate: an estimate (...); typical step-time error +/-21%``: the kind, in words, and the error where
    the table states one."""
    error = typical_error(expected_error)
    return f"{kind}: {TABLE_KINDS.get(kind, kind)}" + (f"; typical step-time error +/-{error:.0%}" if error else "")


def table_line(path: str, kind: str, expected_error: dict | None) -> str:
    """The first line of a command that prices steps with one table: which table, and what kind of numbers."""
    return f"step-time table: {path}, {kind_phrase(kind, expected_error)}"


def error_between(a: dict, b: dict) -> float | None:
    """The error two hardware options' spends are read within (each option as hardware.json's ``options`` has
    it): the larger of their tables' typical step-time errors. None between pairs on one table (one table at two
    prices, or two systems on one option): its error is largely shared by every pair on it, so it does not blur
    their difference; None too where neither table states an error."""
    if a.get("table") is not None and a.get("table") == b.get("table"):
        return None
    errors = [e for e in (typical_error(a.get("table_expected_error")), typical_error(b.get("table_expected_error")))
              if e is not None]
    return max(errors) if errors else None


def apart(cheaper_usd: float, dearer_usd: float) -> float:
    """How far apart two spends are: the share of the dearer one the cheaper saves (what a verdict's "10% less"
    says)."""
    return 1 - cheaper_usd / dearer_usd if dearer_usd > 0 else 0.0


def not_told_apart(gap: float, error: float | None) -> bool:
    """Whether a spend ``gap`` (``apart``) is inside the tables' ``error`` (``error_between``): a table that far
    off would close it."""
    return error is not None and gap < error


def inside_phrase(gap: float, error: float) -> str:
    return f"not told apart ({gap:.0%} apart, inside the tables' +/-{error:.0%} error)"
