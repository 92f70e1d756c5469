"""`python -m tools.embedded`: help prints and writes nothing; only `regenerate` writes the bundled tables,
and what it writes is what is bundled."""

from __future__ import annotations

import pytest

from hw_profile.tables.step_table import StepTable
from tests.conftest import ROOT
from tools import embedded


@pytest.fixture
def hardware_dir(tmp_path, monkeypatch):
    out = tmp_path / "hardware"
    monkeypatch.setattr(embedded, "HARDWARE_DIR", out)
    return out


def test_help_prints_and_writes_nothing(hardware_dir, capsys):
    with pytest.raises(SystemExit) as exc:
        embedded.main(["--help"])
    assert exc.value.code == 0
    assert "regenerate" in capsys.readouterr().out
    assert embedded.main([]) == 2  # no command: the usage, not a regeneration
    assert "regenerate" in capsys.readouterr().err
    assert not hardware_dir.exists()


def test_regenerate_writes_the_bundled_tables(hardware_dir, capsys):
    assert embedded.main(["regenerate"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.endswith(".csv")]
    written = sorted(p.name for p in hardware_dir.glob("*.csv"))
    assert len(written) == 11 and sorted(line.rsplit("/", 1)[-1] for line in printed) == written
    bundled_dir = ROOT / "scenarios" / "hardware"
    for name in written:
        fresh, bundled = StepTable.read(hardware_dir / name), StepTable.read(bundled_dir / name)
        assert fresh.points["step_ms"].tolist() == pytest.approx(bundled.points["step_ms"].tolist(), rel=1e-6)
    # the V4 drafters pay their layers' share of the target's launch overhead
    for name, layers in (("drafter-dspark-3moe", 3), ("drafter-mtp-1moe", 1)):
        meta = StepTable.read(bundled_dir / f"h800-deepseek-v4-flash-ep64-fp8.{name}.csv").meta
        assert meta["roofline"]["launch_ms"] == pytest.approx(0.15 * layers / 43)


def test_regenerate_one_gpu_writes_only_its_qwen3_set(hardware_dir, capsys):
    """`--gpu B200` writes the B200 set alone, the bundled one, on the H200 set's basis (same roofline, same grid)."""
    assert embedded.main(["regenerate", "--gpu", "B200"]) == 0
    written = sorted(p.name for p in hardware_dir.glob("*.csv"))
    assert written == sorted(f"b200-qwen3-8b-bf16{s}.csv" for s in ("", ".drafter-5l", ".drafter-1l", ".drafter-1l-v32k"))
    bundled_dir = ROOT / "scenarios" / "hardware"
    b200, h200 = StepTable.read(bundled_dir / written[0]), StepTable.read(bundled_dir / "h200-qwen3-8b-bf16.csv")
    assert StepTable.read(hardware_dir / written[0]).points["step_ms"].tolist() == b200.points["step_ms"].tolist()
    assert b200.meta["roofline"] == h200.meta["roofline"] and b200.meta["gpu"]["name"] == "B200"
    assert b200.points[["batch_tokens", "kv_tokens"]].equals(h200.points[["batch_tokens", "kv_tokens"]])
    # twice the bandwidth and more than twice the FLOPs: every step is faster, none more than 2.3x
    ratio = h200.points["step_ms"] / b200.points["step_ms"]
    assert ratio.min() > 1.0 and ratio.max() < 2.3
