"""The commands' --help as click prints it (click does not %-format help strings: a doubled percent shows)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from simulator.cli import cli


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_help_has_no_doubled_percent(command):
    res = CliRunner().invoke(cli, [command, "--help"])
    assert res.exit_code == 0, res.output
    assert "%%" not in res.output


def test_plan_help_names_the_95_percent_interval():
    res = CliRunner().invoke(cli, ["plan", "--help"], terminal_width=200)
    assert "the 95% interval of its attainment" in res.output
