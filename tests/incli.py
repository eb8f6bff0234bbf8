"""The ``suanli`` command run in the test's own process: what a subprocess
would answer (its exit status and output), without a new interpreter's
start-up for each call."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from typer.testing import CliRunner

from suanli.cli import app


def cli(*args: str | Path, cwd: Path | None = None) -> SimpleNamespace:
    """``suanli ARGS`` (in ``cwd``): ``returncode``, ``stdout``, ``stderr``.
    An exception the command did not turn into an exit status fails the test."""
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        result = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        os.chdir(here)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"the CLI raised {result.exception!r}") from result.exception
    return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr)
