"""The podman executor: tasks as real containers (podman with runc), held to
their slice, logged, probed, told why they ended, carrying their state
across moves; and images in the specification (one, or one per arch)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from containers import COUNTER, image
from live import (GANG_COUNTER, GANG_GROWS, GANG_POLICY, ONE_SITE, as_tenant, check_gang_grew, events,
                  executor_server, hello_ran, log_text, one_site, ran_as_a_tenant, runs_of, suanli)

from suanli.executors.confine import Confinement
from suanli.executors.tasks import safe

pytestmark = pytest.mark.long(45)

def scenario(tmp_path: Path, components: str, until: str = "4s", extra: str = "", arch: str = "x86_64") -> Path:
    return one_site(tmp_path, components, until, extra, arch)


def run(tmp_path: Path, path: Path) -> tuple[list[dict], Path]:
    work = tmp_path / "w"
    r = suanli("run", path, "--work-dir", work, "--executor", "podman")
    assert r.returncode == 0, r.stderr
    return events(work / "out"), work


def log_of(work: Path, task: str) -> str:
    """A task's log as the executor wrote it (``suanli logs`` reads the same file: one test reads it so)."""
    return (work / "logs" / f"{safe(task)}.log").read_text()


def ended(evs: list[dict]) -> dict[str, tuple[str, str | None]]:
    return {e["task"]: (e["kind"], e.get("reason")) for e in evs if e["kind"] in ("finished", "failed")}


def left_behind(work: Path) -> list[str]:
    """Containers of the executor of ``work`` still there once it stopped (podman removes
    a container as its run ends: a little after, on a loaded machine)."""
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run(["podman", "--runtime", "runc", "ps", "-a", "--filter", f"label=suanli.work={work.resolve()}",
                              "--format", "{{.Names}}"], capture_output=True, text=True).stdout.split()
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


# podman's own variables in every container (its image's PATH among them)
PODMAN_SETS = {"HOSTNAME", "container", "TERM", "PATH", "PWD", "SHLVL", "HOME"}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="its fleet is of x86_64 nodes")
def test_a_containers_exit_status_and_log_end_its_task_and_it_sees_only_its_own(tmp_path):
    img = image()
    path = scenario(tmp_path, f"""\
        - {{name: ok, lifetime: job, duration: 1s, resources: {{cpu: 100m}},
           run: {{image: "{img}", command: [sh, -c, "echo hello from $SUANLI_TASK on $SUANLI_NODE; env; ls /"],
                  env: {{GREETING: hi}}}}}}
        - {{name: bad, lifetime: job, duration: 1s, resources: {{cpu: 100m}},
           run: {{image: "{img}", command: [sh, -c, "echo going; exit 3"]}}}}
        - {{name: absent, lifetime: job, duration: 1s, resources: {{cpu: 100m}},
           run: {{image: "localhost/suanli-no-such-image:1", command: ["true"]}}}}
        - name: flaky
          lifetime: service
          resources: {{cpu: 100m}}
          run: {{image: "{img}", command: [sh, -c, "echo up; exit 1"], restart: onFailure, maxRestarts: 1}}
        - {{name: variant, lifetime: job, duration: 1s, resources: {{cpu: 100m}},
           run: {{images: {{x86_64: "{img}", aarch64: "localhost/suanli-no-such-image:1"}},
                  command: [sh, -c, "echo ran the variant for $(uname -m)"]}}}}
        """, until="6s")
    evs, work = run(tmp_path, path)
    out = ended(evs)
    assert out["a/ok/0"] == ("finished", None)
    assert out["a/bad/0"] == ("failed", "exit status 3")
    assert out["a/flaky/0"] == ("failed", "exit status 1 after 1 restarts")
    assert out["a/absent/0"][0] == "failed" and out["a/absent/0"][1].startswith("exit status 12")
    assert "suanli-no-such-image" in log_of(work, "a/absent/0")
    assert log_of(work, "a/flaky/0").count("up\n") == 2
    assert "going" in log_of(work, "a/bad/0")
    assert out["a/variant/0"] == ("finished", None)  # its node's arch's image: the other is not there
    assert "ran the variant for x86_64" in log_of(work, "a/variant/0")
    log = log_text(work, "a/ok/0")
    assert "hello from a/ok/0 on here/cpu-" in log
    names = {line.split("=", 1)[0] for line in log.splitlines() if "=" in line and not line.startswith("---")}
    assert {"SUANLI_TASK", "SUANLI_STATE_DIR", "GREETING"} <= names
    assert names - PODMAN_SETS - {"GREETING"} == {n for n in names if n.startswith("SUANLI_")}, names
    listing = set(log.split())
    assert {"bin", "suanli"} <= listing and not {"work", "root", "usr"} & listing  # the image's files, none of ours
    assert left_behind(work) == []


CPU_QUOTA = ("while IFS=: read -r _ names path; do case ,$names, in *,cpu,*) "
             "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu$path/cpu.cfs_quota_us 2>/dev/null;; "
             "esac; done < /proc/self/cgroup")


@pytest.mark.skipif(Confinement().kind != "v1", reason="the figures read here are cgroup v1's")
def test_a_container_is_held_to_its_slice_and_a_task_over_its_memory_is_told_so(tmp_path):
    img = image()
    path = scenario(tmp_path, f"""\
        - {{name: probe, lifetime: job, duration: 1s, resources: {{cpu: 500m, memory: 64Mi}},
           run: {{image: "{img}", command: [sh, -c, "{CPU_QUOTA}"]}}}}
        - {{name: hog, lifetime: job, duration: 1s, resources: {{cpu: 1, memory: 32Mi}},
           run: {{image: "{img}", command: [dd, if=/dev/zero, of=/dev/null, bs=96M, count=1]}}}}
        - {{name: roomy, lifetime: job, duration: 1s, resources: {{cpu: 1, memory: 512Mi}},
           run: {{image: "{img}", command: [dd, if=/dev/zero, of=/dev/null, bs=96M, count=1]}}}}
        """)
    evs, work = run(tmp_path, path)
    assert "50000" in log_of(work, "a/probe/0").split()
    out = ended(evs)
    assert out["a/hog/0"] == ("failed", "killed over its memory limit (32 MiB): exit status 137")
    assert out["a/roomy/0"] == ("finished", None)
    exited = [e for e in evs if e["kind"] == "exited" and e["task"] == "a/hog/0"]
    assert exited and exited[0]["reason"] == "killed over its memory limit (32 MiB)"


def test_a_stateful_container_moves_with_its_state(tmp_path):
    img = image()
    path = scenario(tmp_path, f"""\
        - name: counter
          lifetime: service
          resources: {{cpu: 1}}
          state: {{kind: stateful, size: 1Mi, checkpointEvery: 1s}}
          run: {{image: "{img}", command: [sh, -c, {json.dumps(COUNTER)}]}}
        """, until="5500ms", extra="  events: [{at: 2500ms, kind: nodeDrain, node: here/cpu-1}]")
    evs, work = run(tmp_path, path)
    assert [e["node"] for e in evs if e["kind"] == "placed"] == ["here/cpu-1", "here/cpu-0"]
    assert [e["to"] for e in evs if e["kind"] == "stateMoved"] == ["here/cpu-0"]
    assert any(e["kind"] == "checkpointed" for e in evs)  # asked with SIGUSR1 through the container's init
    log = log_text(work, "a/counter/0")
    (resumed_first, first), (resumed_second, second) = runs_of(log)
    assert resumed_first == 0 and first == list(range(1, len(first) + 1)) and len(first) > 5
    assert f"counter: saved {first[-1]}, leaving" in log  # asked to leave (SIGTERM), not killed
    assert resumed_second == first[-1] and second[0] == first[-1] + 1  # no gap, no repeat
    assert second == list(range(second[0], second[0] + len(second)))
    assert left_behind(work) == []


def test_an_elastic_gang_of_containers_grows_and_its_new_member_starts_with_the_gangs_state(tmp_path):
    img = image()
    path = scenario(tmp_path, GANG_GROWS % f'{{image: "{img}", command: [sh, -c, {json.dumps(GANG_COUNTER)}]}}',
                    until="4s", extra=GANG_POLICY)
    evs, work = run(tmp_path, path)
    check_gang_grew(evs, lambda task: log_of(work, task))
    assert left_behind(work) == []


def test_an_image_no_node_can_run_is_a_warning_named_in_why_and_strict_refuses_it(tmp_path):
    path = scenario(tmp_path, """\
        - {name: armed, lifetime: service, resources: {cpu: 100m},
           run: {images: {aarch64: "localhost/app:1"}}}
        - {name: both, lifetime: service, resources: {cpu: 100m}, platform: {arch: [aarch64]},
           run: {images: {x86_64: "localhost/app:1"}}}
        """)
    r = suanli("schedule", path, "-o", "json")
    assert r.returncode == 0, r.stderr
    assert "spec.components[0].run.images: no node has arch 'aarch64'" in r.stderr
    assert "spec.components[1].run.images: no variant for an arch its platform allows" in r.stderr
    why = {u["task"]: u["why"][0] for u in json.loads(r.stdout)["unscheduled"]}
    assert why["a/armed/0"]["reason"] == "no variant of its image for the arch (it has aarch64)", why
    assert why["a/armed/0"]["binding"] and why["a/armed/0"]["nodes"] == 2
    strict = suanli("schedule", path, "--strict")
    assert strict.returncode == 2 and "run.images" in strict.stderr and "Traceback" not in strict.stderr


@pytest.mark.parametrize("run_field, message", [
    ('{image: "Not/An Image"}', "is not an image reference"),
    ('{image: "localhost/a:1", images: {x86_64: "localhost/a:1"}}', "either image"),
    ("{env: {A: b}}", "run needs a command, or an image"),
])
def test_a_bad_image_field_is_one_clear_problem(tmp_path, run_field, message):
    path = scenario(tmp_path, f"- {{name: c, lifetime: service, resources: {{cpu: 100m}}, run: {run_field}}}\n")
    r = suanli("schedule", path)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "spec.components[0].run" in r.stderr


def test_each_executor_refuses_what_it_cannot_run_before_it_starts(tmp_path):
    path = scenario(tmp_path, """\
        - {name: c, lifetime: service, resources: {cpu: 100m}, run: {image: "localhost/app:1"}}
        """)
    r = suanli("run", path, "--work-dir", tmp_path / "w")
    assert r.returncode == 2 and "a/c runs an image" in r.stderr and "--executor podman" in r.stderr
    path = scenario(tmp_path, '- {name: c, lifetime: service, resources: {cpu: 100m}, run: {command: ["true"]}}\n')
    r = suanli("run", path, "--work-dir", tmp_path / "w", "--executor", "podman")
    assert r.returncode == 2 and "runs a command, not an image" in r.stderr


def test_serve_runs_a_tenants_container_as_its_tenant_and_serves_its_log(tmp_path):
    img = image()
    with executor_server(tmp_path, "podman") as (server, admin, base):
        r = hello_ran(tmp_path, as_tenant(admin, "acme-ai"), timeout=60, image=img, then="; ls /suanli")
        assert r.returncode == 0 and "hello from " in r.stdout and "--- suanli: " in r.stdout, r.stdout
        assert ran_as_a_tenant(r.stdout), r.stdout  # its tenant's own user, and no admin token
        assert "state" in r.stdout.split() and "home" in r.stdout.split()
    assert left_behind(base / "w") == []


def test_probes_run_in_the_container(tmp_path):
    img = image()
    evs, _ = run(tmp_path, one_site(tmp_path, f"""\
        - name: box
          lifetime: service
          resources: {{cpu: 100m}}
          run:
            image: "{img}"
            command: [sh, -c, "sleep 1; touch /tmp/up; sleep 3; rm /tmp/up; sleep 100"]
            readiness: {{exec: [test, -e, /tmp/up], period: 0.5s, timeout: 10s, failureThreshold: 2}}
            liveness: {{exec: [test, -e, /tmp/up], initialDelay: 3s, period: 0.5s, timeout: 10s, failureThreshold: 2}}
            maxRestarts: 0
        """, "12s"))
    kinds = [e["kind"] for e in evs if e.get("task") == "a/box/0"
             and e["kind"] in ("ready", "notReady", "livenessFailed", "failed")]
    # ready once the file is made; once it is gone, not ready and (each probe in its own time) killed
    assert kinds[0] == "ready" and kinds[-1] == "failed" and {"notReady", "livenessFailed"} <= set(kinds), kinds
    assert ended(evs)["a/box/0"][1].startswith("liveness probe failed 2 times in a row (exit status 1)")


def test_a_container_is_given_the_devices_it_holds_by_their_cdi_names(tmp_path):
    """A node group's devices with a CDI kind: each container is given the
    devices its task holds (VENDOR/CLASS=INDEX) and no other; here CDI devices
    whose edits set an environment variable, from a spec of the test's own."""
    img = image()
    kind = f"example.com/gpu{os.getpid()}"
    spec = Path("/etc/cdi") / f"suanli-test-{os.getpid()}.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(f'cdiVersion: "0.5.0"\nkind: "{kind}"\ndevices:\n' + "".join(
        f'  - name: "{i}"\n    containerEdits:\n      env: ["FAKE_GPU_{i}=here"]\n' for i in range(2)))
    path = tmp_path / "s.yaml"
    path.write_text(ONE_SITE.replace("cpu: 8, memory: 16Gi}]", "cpu: 8, memory: 16Gi, accelerators: "
                                     f"[{{kind: gpu, model: T4, count: 2, cdi: {kind}}}]}}]")
                    % (1, "x86_64", textwrap.indent(textwrap.dedent(f"""\
                        - name: see
                          lifetime: job
                          duration: 1s
                          replicas: 2
                          resources: {{cpu: 100m, accelerators: [{{kind: gpu, count: 1}}]}}
                          run: {{image: "{img}", command: [sh, -c, 'echo holds $SUANLI_DEVICES sees $(env | grep -o "^FAKE_GPU_[0-9]" | sort | tr "\\n" " ")']}}
                        """), "    "), "4s", ""))
    try:
        evs, work = run(tmp_path, path)
    finally:
        spec.unlink(missing_ok=True)
    seen = sorted(log_of(work, f"a/see/{i}").splitlines()[-1] for i in range(2))
    assert seen == ["holds gpu:0 sees FAKE_GPU_0", "holds gpu:1 sees FAKE_GPU_1"], seen
    assert ended(evs) == {"a/see/0": ("finished", None), "a/see/1": ("finished", None)}
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace(f"cdi: {kind}", "cdi: not a kind"))
    r = suanli("schedule", bad)
    assert r.returncode == 2 and "accelerators[0].cdi" in r.stderr and "Traceback" not in r.stderr, r.stderr
