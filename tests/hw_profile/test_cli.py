"""hw-profile end to end through its entry point: outputs, and one clear line with exit code 2 for mistakes."""

import json

import pytest

from hw_profile.cli import main, parse_int_list
from hw_profile.errors import HwProfileError
from hw_profile.tables.step_table import StepTable


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
        raise SystemExit(0)
    captured = capsys.readouterr()
    return exc.value.code or 0, captured.out, captured.err


def test_int_lists():
    assert parse_int_list("1..16", "--requests") == [1, 2, 4, 8, 16]
    assert parse_int_list("3, 1,8..32", "--requests") == [1, 3, 8, 16, 32]
    assert parse_int_list("0,512", "--context", minimum=0) == [0, 512]
    with pytest.raises(HwProfileError, match="--requests: expected integers"):
        parse_int_list("1,two", "--requests")
    with pytest.raises(HwProfileError, match=">= 1, got 0"):
        parse_int_list("0", "--requests")


@pytest.mark.parametrize("argv, words", [
    (["analytic", "--gpu", "H300", "--model", "qwen3-8b", "--out", "x.csv"], ["--gpu", "H300", "H200"]),
    (["analytic", "--gpu", "H200", "--model", "llama", "--out", "x.csv"], ["--model", "llama"]),
    (["analytic", "--gpu", "H200", "--model", "deepseek-v3", "--gpus", "8", "--ep", "3", "--out", "x.csv"],
     ["--ep", "divisor"]),
    (["analytic", "--gpu", "H200", "--model", "qwen3-8b", "--mem-eff", "2", "--out", "x.csv"], ["--mem-eff"]),
    (["sps", "--model", "qwen3-8b", "--device", "gpu", "--out", "x.csv"], ["--device", "gpu"]),
    (["sps", "--model", "qwen3-8b", "--requests", "1,x", "--out", "x.csv"], ["--requests", "'x'"]),
    (["sps", "--model", "qwen3-8b", "--layers", "2", "--drafter-layers", "1", "--out", "x.csv"], ["--layers"]),
    (["fit", "missing.csv"], ["missing.csv", "not found"]),
    (["show", "missing.csv", "--out", "v.html"], ["missing.csv"]),
    (["analytic", "--gpu", "H200"], ["--model"]),
])
def test_mistakes_are_one_line_and_exit_2(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hw-profile: ")
    for w in words:
        assert w in lines[0]
    assert "Traceback" not in err


def test_analytic_fit_show(tmp_path, capsys):
    csv = tmp_path / "h20.csv"
    code, out, _ = run(["analytic", "--gpu", "H20", "--model", "qwen3-8b", "--gpus", "2", "--out", str(csv)], capsys)
    assert code == 0 and "T(B=1, K=0)" in out
    table = StepTable.read(csv)
    assert table.meta["device"] == "H20" and table.meta["gpus"] == 2 and table.energy_grid is not None
    code, out, _ = run(["fit", str(csv)], capsys)
    assert code == 0 and (tmp_path / "h20.smooth.csv").is_file() and (tmp_path / "h20.smooth.json").is_file()
    code, _, _ = run(["show", str(csv), str(tmp_path / "h20.smooth.csv"), "--out", str(tmp_path / "v.html")], capsys)
    assert code == 0 and (tmp_path / "v.html").stat().st_size > 1_000_000
    code, out, _ = run(["show", str(csv)], capsys)  # no --out: beside the table
    assert code == 0 and (tmp_path / "h20.html").stat().st_size > 1_000_000 and "h20.html" in out
    code, _, _ = run(["show", str(csv), str(tmp_path / "h20.smooth.csv")], capsys)
    assert code == 0 and (tmp_path / "h20.vs.h20.smooth.html").is_file()


def test_analytic_warns_when_weights_do_not_fit(tmp_path, capsys):
    code, _, err = run(["analytic", "--gpu", "H200", "--model", "deepseek-v3", "--out", str(tmp_path / "d.csv")],
                       capsys)
    assert code == 0 and "exceed" in err
    assert json.loads((tmp_path / "d.json").read_text())["fits_in_memory"] is False


def tables_by_expert_dtype(base: list[str], kinds: tuple[str, ...], tmp_path, capsys) -> dict[str, StepTable]:
    """The table ``base`` writes at each ``--expert-dtype`` of ``kinds``."""
    tables = {}
    for kind in kinds:
        code, _, err = run([*base, "--expert-dtype", kind, "--out", str(tmp_path / f"{kind}.csv")], capsys)
        assert code == 0, err
        tables[kind] = StepTable.read(tmp_path / f"{kind}.csv")
    return tables


def test_analytic_takes_the_experts_type_a_deployment_serves(tmp_path, capsys):
    """--expert-dtype, as on estimate: V4-Pro's fp4 experts served from an fp8 checkpoint read twice the bytes."""
    base = ["analytic", "--gpu", "H200", "--model", "deepseek-v4-pro", "--gpus", "8", "--dtype", "fp8"]
    tables = tables_by_expert_dtype(base, ("auto", "fp8"), tmp_path, capsys)
    assert [t.meta["model_shape"]["expert_dtype"] for t in tables.values()] == ["fp4", "fp8"]
    assert tables["fp8"].grid.step_ms(1, 0) > 1.1 * tables["auto"].grid.step_ms(1, 0)
    code, _, err = run(["analytic", "--gpu", "H200", "--model", "qwen3-8b", "--expert-dtype", "fp8",
                        "--out", str(tmp_path / "q.csv")], capsys)
    assert code == 2 and err.count("\n") == 1 and "qwen3-8b has no experts" in err


def test_an_fp4_checkpoint_of_another_moe_model_reads_half_the_expert_bytes(tmp_path, capsys):
    """--expert-dtype fp4 on GLM-5.2 (an fp8 checkpoint): the routed experts stored at half a byte, so a one-token
    step, which reads the experts it routes to, is cheaper; everything else as at auto."""
    base = ["analytic", "--gpu", "B200", "--model", "glm-5.2", "--gpus", "8", "--dtype", "fp8"]
    tables = tables_by_expert_dtype(base, ("auto", "fp4"), tmp_path, capsys)
    assert [t.meta["model_shape"].get("expert_dtype", "") for t in tables.values()] == ["", "fp4"]
    assert tables["fp4"].grid.step_ms(1, 0) < tables["auto"].grid.step_ms(1, 0)


@pytest.mark.slow
def test_sps_on_cpu(tiny_config, tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "t.csv"
    # no --dtype: fp32 on a CPU
    code, stdout, err = run(["sps", "--model", str(tiny_config), "--requests", "1,2",
                             "--tokens-per-request", "1,2", "--context", "16", "--repeats", "3", "--warmup", "1",
                             "--threads", "1", "--quiet", "--out", str(out)], capsys)
    assert code == 0 and "4 points measured, 0 skipped" in stdout
    # one line on the missing telemetry; the rest, if any, are warnings about this shared machine's load
    lines = err.strip().splitlines()
    assert [line for line in lines if not line.startswith("warning: machine load: ")] == [
        next(line for line in lines if line.startswith("no NVML telemetry"))]
    meta = StepTable.read(out).meta
    assert meta["dtype"] == "fp32"
    assert meta["command"].startswith("hw-profile sps --model ") and "--threads 1" in meta["command"]


@pytest.mark.slow
def test_sps_shows_its_progress_off_a_terminal(tiny_config, tmp_path, capsys):
    """Without --quiet, stderr (here not a terminal) gets the points done of all; a run this short ends inside the
    first 10 s, so the one line is the last: every point done, no time left."""
    import re

    pytest.importorskip("torch")
    code, stdout, err = run(["sps", "--model", str(tiny_config), "--requests", "1,2", "--tokens-per-request", "1",
                             "--context", "16", "--repeats", "2", "--warmup", "1", "--threads", "1",
                             "--out", str(tmp_path / "t.csv")], capsys)
    assert code == 0 and "2 points measured, 0 skipped" in stdout
    progress = [line for line in err.splitlines() if line.startswith("sps ")]
    assert len(progress) == 1 and re.fullmatch(r"sps tiny-qwen3: 2/2 points, \d+s elapsed", progress[0]), err


def test_help_leads_with_estimate_and_lists_every_command(capsys):
    """`hw-profile --help` and the module docstring start from the command a newcomer needs first: estimate."""
    import hw_profile.cli as cli_module

    code, stdout, _ = run(["--help"], capsys)
    assert code == 0
    description, commands = stdout.split("Commands:")
    assert "estimate" in description and description.index("estimate") < description.index("sps")
    listed = [line.split()[0] for line in commands.strip().splitlines()]
    assert listed[0] == "estimate" and sorted(listed) == sorted(cli_module.cli.commands)
    first_line = cli_module.__doc__.splitlines()[0]
    assert first_line.index("estimate") < first_line.index("measure")
    assert cli_module.__doc__.split("\n\n")[1].split()[:2] == ["hw-profile", "estimate"]
