"""Shared fixtures: where the shared examples and data live, and a runner."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"

# Property tests draw new cases at each run (which is how they find what no one thought of). Under
# ``.ci/run`` they draw the same ones each run: a change is judged on what it changed, not on a draw.
if os.environ.get("SUANLI_TEST_DERANDOMIZE"):
    from hypothesis import settings as _settings

    _settings.register_profile("derandomized", derandomize=True)
    _settings.load_profile("derandomized")

EXAMPLES = SHARED / "examples"
PES_WORLD = SHARED / "worlds" / "pureedgesim_default.py"


def pes_world_text(devices: int, minutes: int, edge_cpu: int = 10, cloud_cpu: int = 200) -> str:
    """PureEdgeSim's default world at ``devices`` (``PES_WORLD``): short
    tasks bound within 100 ms of their device, offloaded to one edge data
    centre of ``edge_cpu`` cores or a cloud of ``cloud_cpu``; generating for
    ``minutes``. Its text, for a test to change further and write."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pes.yaml"
        subprocess.run([sys.executable, str(PES_WORLD), str(devices), str(path)], check=True, capture_output=True)
        text = path.read_text()
    assert "until: 10m" in text
    text = text.replace("until: 10m", f"until: {minutes}m")
    for site, tier, cpu, was in (("edge-dc1", "edge", edge_cpu, 10), ("cloud", "cloud", cloud_cpu, 200)):
        old = f"{{name: {site}, tier: {tier}, nodeGroups: [{{name: dc, count: 1, arch: x86_64, cpu: {was},"
        assert old in text, old
        text = text.replace(old, old.rsplit("cpu:", 1)[0] + f"cpu: {cpu},")
    return text


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


@pytest.fixture
def base():
    """A folder every user may cross (pytest's own are root's alone): tasks that run
    as their tenants' users reach their folders in it."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="suanli-base-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


BUSY = "import os, time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end and os.getppid() != 1:\n    pass\n"
# the machine is loaded when one more process than it has cores wants to run: the workers of this
# run (``pytest -n``) are some of them, the busy processes the rest (at least one)
BUSY_PROCESSES = max(1, (os.cpu_count() or 2) + 1 - int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


@pytest.fixture(scope="module")
def busy():
    """Keep ``BUSY_PROCESSES`` processes busy on the machine while a module's
    tests run: what must hold under load is tried under load (one process
    more than the machine's cores, with this run's workers), whatever else
    the machine does. The load is the machine's, not the module's: each busy
    process holds a lock of its own in the temporary folder, so that modules
    run side by side (``pytest -n``) share the busy processes rather than
    start their own each, and a module whose neighbour ends starts those it no
    longer has. They end with the module (and by themselves, should this
    process die)."""
    import fcntl
    import subprocess
    import sys
    import tempfile
    import threading

    held: dict[int, tuple[int, subprocess.Popen]] = {}
    done = threading.Event()

    def take() -> None:
        for slot in range(BUSY_PROCESSES):
            if slot in held:
                continue
            fd = os.open(os.path.join(tempfile.gettempdir(), f"suanli-tests-busy-{slot}.lock"), os.O_CREAT | os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another module's busy process has it
                os.close(fd)
                continue
            held[slot] = (fd, subprocess.Popen([sys.executable, "-c", BUSY]))

    def keep() -> None:
        while not done.wait(0.2):
            take()

    take()
    keeper = threading.Thread(target=keep, name="busy", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        done.set()
        keeper.join()
        for fd, proc in held.values():
            proc.kill()
            proc.wait()
            os.close(fd)


def pytest_collection_modifyitems(config, items):
    """Modules marked ``long(seconds)`` first, the longest first, and of those
    the ones that load the machine (``busy``) last: spread over the machine's
    cores in whole files (``make test``), the long ones start at once and the
    short ones fill in after, instead of a long one ending the run alone, and
    the tests that time real clusters (Ray's) start before the machine is
    loaded on purpose. (The seconds are what the module takes on a 2-core
    machine.)"""
    def order(item) -> tuple:
        mark = item.get_closest_marker("long")
        if mark is None:
            return (2, 0.0)
        return (1 if "busy" in item.fixturenames else 0, -mark.args[0])

    items.sort(key=order)


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
