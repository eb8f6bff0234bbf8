"""Shared fixtures: where the shared examples and data live, and a runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
EXAMPLES = SHARED / "examples"


@pytest.fixture(scope="session")
def examples() -> Path:
    if not EXAMPLES.is_dir():
        pytest.fail(f"the shared examples are expected at {EXAMPLES}")
    return EXAMPLES


def schedule_json(*paths: Path | str, seed: int | None = None) -> dict:
    """Run the static scheduler in-process and return its JSON object."""
    from suanli.output import outcome_json
    from suanli.scheduling.static import schedule
    from suanli.spec.build import load_world

    world = load_world([str(p) for p in paths])
    return json.loads(json.dumps(outcome_json(schedule(world, seed))))
