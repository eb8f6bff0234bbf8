"""The local executor: real processes, confined, logged, restarted by policy,
and stateful ones carrying their state across moves (checkpoint protocol)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from live import (ELASTIC, GAME, LIVE, as_tenant, check_elastic_run, events, executor_server, hello_ran, log_text,
                  one_site, placements, ran_as_a_tenant, runs_of, simulated, suanli, task_log, ticks)

from suanli.executors.confine import Confinement

pytestmark = pytest.mark.long(80)


def test_the_game_counts_on_across_car_edge_car_with_real_processes(tmp_path):
    work = tmp_path / "w"
    r = suanli("run", LIVE, "--executor", "local", "--work-dir", work, "--speed", "2")
    assert r.returncode == 0, r.stderr
    live = events(work / "out")
    # the decisions are the twin's: the same placements, in the same order
    assert placements(live) == placements(simulated(LIVE, tmp_path))
    game = [e["site"] for e in live if e["kind"] == "placed" and e["task"] == GAME]
    assert game == ["car-1", "edge-1", "car-1"]
    moved = [e for e in live if e["kind"] == "stateMoved" and e["task"] == GAME]
    assert [(e["from"], e["to"]) for e in moved] == [("car-1/soc-0", "edge-1/cpu-0"), ("edge-1/cpu-0", "car-1/soc-0")]
    log = log_text(work, GAME)
    counted = ticks(log)
    assert len(counted) > 100
    assert counted == list(range(1, len(counted) + 1))  # nothing lost, nothing twice
    starts = [r for r, _ in runs_of(log)]
    assert len(starts) == 3 and starts[0] == 0
    assert starts[1] > 0 and starts[2] > starts[1]  # each run went on from where the last one stopped
    assert any(e["kind"] == "checkpointed" and e["task"] == GAME for e in live)
    assert "autopilot/control/0 on car-1/soc-0: beat 1" in log_text(work, "autopilot/control/0")


def test_an_elastic_gang_is_resized_with_real_processes_and_keeps_its_progress(tmp_path):
    work = tmp_path / "w"
    r = suanli("run", ELASTIC, "--executor", "local", "--work-dir", work)
    assert r.returncode == 0, r.stderr
    check_elastic_run(events(work / "out"), lambda task: task_log(work, task))


def scenario(tmp_path: Path, components: str, until: str = "4s", extra: str = "") -> Path:
    return one_site(tmp_path, components, until, extra)


def run(tmp_path: Path, path: Path, *args: str) -> tuple[list[dict], Path]:
    work = tmp_path / "w"
    r = suanli("run", path, "--work-dir", work, *args)
    assert r.returncode == 0, r.stderr
    return events(work / "out"), work


def ended(evs: list[dict]) -> dict[str, tuple[str, str | None]]:
    return {e["task"]: (e["kind"], e.get("reason")) for e in evs if e["kind"] in ("finished", "failed")}


def test_exit_status_makes_finished_or_failed_and_services_restart_by_policy(tmp_path):
    path = scenario(tmp_path, """\
        - {name: ok, lifetime: job, duration: 1s, resources: {cpu: 100m}, run: {command: ["true"]}}
        - {name: bad, lifetime: job, duration: 1s, resources: {cpu: 100m}, run: {command: [sh, -c, "exit 3"]}}
        - name: flaky
          lifetime: service
          resources: {cpu: 100m}
          run: {command: [sh, -c, "echo up; exit 1"], restart: onFailure, maxRestarts: 2}
        - name: done
          lifetime: service
          resources: {cpu: 100m}
          run: {command: [sh, -c, "echo served"], restart: onFailure}
        - name: missing
          lifetime: job
          duration: 1s
          resources: {cpu: 100m}
          run: {command: [no-such-program-here]}
        """, until="6s")
    evs, work = run(tmp_path, path)
    out = ended(evs)
    assert out["a/ok/0"] == ("finished", None)
    assert out["a/bad/0"] == ("failed", "exit status 3")
    assert out["a/flaky/0"] == ("failed", "exit status 1 after 2 restarts")
    assert out["a/done/0"] == ("finished", "exit status 0")  # onFailure: a clean exit is the end
    assert out["a/missing/0"] == ("failed", "exit status 127")
    restarts = [e["attempt"] for e in evs if e["kind"] == "restarting" and e["task"] == "a/flaky/0"]
    assert restarts == [1, 2]
    assert log_text(work, "a/flaky/0").count("up\n") == 3  # the first run and two restarts
    missing = log_text(work, "a/missing/0")
    assert "no-such-program-here" in missing and ("not found" in missing or "cannot start" in missing)


CGROUP_PROBE = """\
import os, pathlib
for line in open("/proc/self/cgroup"):
    _, names, path = line.strip().split(":", 2)
    if names == "":
        print("v2", pathlib.Path("/sys/fs/cgroup" + path, "cpu.max").read_text().strip())
    elif "cpu" in names.split(",") and "cpuacct" not in names.split(",") or names == "cpu,cpuacct":
        print("v1", pathlib.Path("/sys/fs/cgroup/cpu" + path, "cpu.cfs_quota_us").read_text().strip())
"""

HOG = "b = bytearray(400 * 2**20); print('allocated', len(b))"


@pytest.mark.skipif(Confinement().kind == "none", reason="no writable control groups on this machine")
def test_a_task_is_held_to_its_slice(tmp_path):
    (tmp_path / "probe.py").write_text(CGROUP_PROBE)
    (tmp_path / "hog.py").write_text(HOG)
    path = scenario(tmp_path, """\
        - {name: probe, lifetime: job, duration: 1s, resources: {cpu: 500m, memory: 64Mi},
           run: {command: [python3, probe.py]}}
        - {name: hog, lifetime: job, duration: 1s, resources: {cpu: 1, memory: 128Mi},
           run: {command: [python3, hog.py]}}
        - {name: roomy, lifetime: job, duration: 1s, resources: {cpu: 1, memory: 1Gi},
           run: {command: [python3, hog.py]}}
        """)
    evs, work = run(tmp_path, path)
    kind = Confinement().kind
    probe = log_text(work, "a/probe/0")
    assert (f"{kind} 50000 100000" if kind == "v2" else f"{kind} 50000") in probe
    out = ended(evs)
    assert out["a/hog/0"][0] == "failed" and "allocated" not in log_text(work, "a/hog/0")
    assert out["a/roomy/0"] == ("finished", None)
    assert "allocated 419430400" in log_text(work, "a/roomy/0")


def test_a_lost_node_restarts_its_stateful_task_from_the_last_checkpoint(tmp_path):
    game = Path(LIVE).parent / "game.py"
    path = scenario(tmp_path, f"""\
        - name: game
          lifetime: service
          resources: {{cpu: 1}}
          state: {{kind: stateful, size: 1Mi, checkpointEvery: 1s}}
          run: {{command: [python3, {game}]}}
        """, until="5s", extra="  events: [{at: 2.5s, kind: nodeDown, node: here/cpu-1}]")
    evs, work = run(tmp_path, path)
    nodes = [e["node"] for e in evs if e["kind"] == "placed"]
    assert nodes == ["here/cpu-1", "here/cpu-0"]
    assert [e["task"] for e in evs if e["kind"] == "lost"] == ["a/game/0"]
    restored = [e for e in evs if e["kind"] == "stateRestored"]
    assert len(restored) == 1 and restored[0]["node"] == "here/cpu-0"
    log = log_text(work, "a/game/0")
    runs = runs_of(log)
    starts = [r for r, _ in runs]
    first, second = [t for _, t in runs]
    # killed with no last word: the second run starts from a checkpoint, at or before where the first stopped
    assert first == list(range(1, len(first) + 1)) and len(starts) == 2
    assert 0 < starts[1] <= first[-1]
    assert second[0] == starts[1] + 1


def test_logs_of_an_unknown_task_and_bad_options_exit_2(tmp_path):
    r = suanli("logs", "a/none/0", "--work-dir", tmp_path)
    assert r.returncode == 2 and "no log for 'a/none/0'" in r.stderr
    r = suanli("run", LIVE, "--work-dir", tmp_path / "w", "--executor", "sim")
    assert r.returncode == 2 and "--executor" in r.stderr and "Traceback" not in r.stderr
    r = suanli("run", LIVE, "--work-dir", tmp_path / "w", "--speed", "0")
    assert r.returncode == 2 and "--speed" in r.stderr


def test_a_bad_run_field_is_one_clear_problem(tmp_path):
    path = scenario(tmp_path, """\
        - {name: x, lifetime: job, duration: 1s, run: {command: [], env: {SUANLI_NODE: x}}}
        """)
    r = suanli("validate", path)
    assert r.returncode == 2
    assert "components[0].run.command" in r.stderr and "SUANLI_NODE" in r.stderr


def test_serve_runs_tasks_on_the_local_executor_and_serves_their_logs(tmp_path):
    with executor_server(tmp_path, "local") as (server, admin, _):
        as_me, theirs = as_tenant(admin, "acme-ai"), as_tenant(admin, "hpc-lab")
        r = hello_ran(tmp_path, as_me, timeout=30)
        assert r.returncode == 0 and "hello from " in r.stdout and "--- suanli: " in r.stdout
        assert ran_as_a_tenant(r.stdout), r.stdout
        r = suanli("logs", "hello/say/0", env=theirs)
        assert r.returncode == 2 and "hello from" not in r.stdout + r.stderr


def test_groups_left_by_executors_that_are_gone_are_swept(tmp_path):
    for hierarchy in ("cpu", "memory"):
        (tmp_path / hierarchy).mkdir()
        (tmp_path / hierarchy / "cgroup.procs").write_text("")
        (tmp_path / hierarchy / "suanli.999999999" / "a%2Fb%2F0.1").mkdir(parents=True)  # no such process
        (tmp_path / hierarchy / f"suanli.{os.getppid()}" / "c%2Fd%2F0.1").mkdir(parents=True)  # alive
    c = Confinement(root=tmp_path)
    assert c.kind == "v1"
    for hierarchy in ("cpu", "memory"):
        assert not (tmp_path / hierarchy / "suanli.999999999").exists()
        assert (tmp_path / hierarchy / f"suanli.{os.getppid()}" / "c%2Fd%2F0.1").is_dir()
    c.close()
    assert not (tmp_path / "cpu" / f"suanli.{os.getpid()}").exists()


def test_stopping_run_stops_its_tasks_and_they_save_their_state(tmp_path):
    import signal
    import subprocess
    import sys

    work = tmp_path / "w"
    proc = subprocess.Popen([sys.executable, "-c", "from suanli.cli import main; main()", "run", str(LIVE),
                             "--work-dir", str(work)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    log = work / "logs" / "infotainment%2Fgame%2F0.log"
    while not (log.exists() and "tick 20\n" in log.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "interrupted at t=" in err and "ran autodrive-live" in out
    text = log_text(work, GAME)
    assert text.rstrip().endswith(f"game: saved {ticks(text)[-1]}, leaving")  # asked to save, not killed
    left = subprocess.run(["pgrep", "-f", str(LIVE.parent / "game.py")], capture_output=True, text=True).stdout
    assert left == "" and "game.py" not in subprocess.run(["ps", "ax"], capture_output=True, text=True).stdout
