"""The command line: ``suanli validate`` and ``suanli schedule``.

Bad input exits with status 2 and one line per problem (file:line, document,
field path, what was expected); never a traceback.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from suanli.spec.problems import SpecError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="suanli: schedule work onto heterogeneous compute across cloud, edge and devices.",
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False)


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def _fail(exc: SpecError, what: str = "nothing was scheduled") -> None:
    n = len(exc.problems)
    for p in exc.problems:
        err.print(f"[red]error[/red]: {escape(str(p))}", markup=True, soft_wrap=True)
    err.print(f"{n} problem{'s' if n != 1 else ''} found; {what}.", soft_wrap=True)
    raise typer.Exit(2)


FILES = typer.Argument(..., help="YAML files (several documents each); Scenario includes are followed.")


@app.command()
def validate(files: List[Path] = FILES) -> None:
    """Check documents only: schema, quantities and references."""
    from suanli.spec.loader import load_documents

    try:
        docs = load_documents(files)
    except SpecError as exc:
        _fail(exc, "the documents are not valid")
    counts = {
        "fleets": len(docs.fleets),
        "tenants": len(docs.tenants),
        "virtual clusters": len(docs.virtual_clusters),
        "applications": len(docs.applications),
        "scenarios": len(docs.scenarios),
    }
    summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    Console(highlight=False).print(f"ok: {len(docs.files)} file(s), {summary or 'no documents'}")


@app.command()
def schedule(
    files: List[Path] = FILES,
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help="table or json"),
    seed: Optional[int] = typer.Option(None, "--seed", help="Tie-break seed (default: the Scenario's, else 0)."),
) -> None:
    """Place every application once, through both layers, and print the outcome."""
    from suanli.output import outcome_json
    from suanli.scheduling.static import schedule as run_schedule
    from suanli.spec.build import load_world

    try:
        world = load_world(files)
    except SpecError as exc:
        _fail(exc)
    outcome = run_schedule(world, seed)
    result = outcome_json(outcome)
    if output is OutputFormat.json:
        # compact: json's C encoder is used only without indentation (pipe to `jq` to read)
        sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    else:
        from suanli.render import print_outcome

        console = Console(highlight=False)
        if not console.is_terminal:
            console = Console(highlight=False, width=160)  # piped: do not cut names at 80 columns
        print_outcome(result, console)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
