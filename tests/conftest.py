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


BUSY = "import os, time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end and os.getppid() != 1:\n    pass\n"


@pytest.fixture(scope="module")
def busy():
    """Two processes that keep the machine's CPUs busy while a module's tests run
    (as many as a 2-core machine has): what must hold under load is tried under
    load, whatever else the machine does. They end with the module (and by
    themselves, should this process die)."""
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


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
