"""Shared fixtures: where the shared examples and data live, and a runner."""

from __future__ import annotations

import json
import os
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


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium for the session (tests/browser.py); skipped without one, failed under CI."""
    from browser import Browser, Unavailable

    try:
        chromium = Browser()
    except Unavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"a browser is needed under CI: {exc}")
        pytest.skip(f"no browser here: {exc}")
    yield chromium
    chromium.close()


@pytest.fixture
def page(browser):
    """A page of the session's browser in a context of its own, 1400 x 900. A JavaScript
    error left on it fails the test at teardown: a test that provokes one on purpose
    reads ``page.errors`` and clears it (``assert_no_errors()`` also clears)."""
    page = browser.new_page()
    yield page
    errors = list(page.errors)
    page.close()
    assert not errors, f"{len(errors)} JavaScript error(s) left on the page:\n" + "\n".join(errors)
