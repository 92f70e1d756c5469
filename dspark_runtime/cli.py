"""The `dspark` command: build, train, evaluate and audit real DSpark drafters (torch).

Each subcommand lives in the module that does its work and is registered here."""

from __future__ import annotations

import click

from dspark_runtime.audit import audit_lossless
from dspark_runtime.build import build_tiny_command
from dspark_runtime.evaluate import eval_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Real DSpark drafting and verification: the tiny world, training, calibration, evaluation, audits."""


cli.add_command(build_tiny_command)
cli.add_command(eval_command)
cli.add_command(audit_lossless)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
