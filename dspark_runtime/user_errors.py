"""User mistakes in a `dspark` subcommand print as one line and exit with code 2 (docs/runtime.md, "Commands");
anything else is a bug and keeps its traceback."""

from __future__ import annotations

import functools

import click

from simulator.errors import UserError


class UserFailure(click.ClickException):
    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"dspark: error: {self.format_message()}", err=True)


def reports_user_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise UserFailure(str(exc)) from None

    return wrapper
