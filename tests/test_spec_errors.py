"""Bad documents: `suanli validate` exits 2 and prints one readable line per
problem (file:line, document, field path, the bad value and what was expected),
never a traceback; every example document loads."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from suanli.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"

# A small valid world the bad documents refer to: two sites joined by a link,
# tenants acme and other, and a virtual cluster that belongs to other.
BASE = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: tiny}
spec:
  sites:
    - name: cloud-a
      tier: cloud
      nodeGroups:
        - {name: gpu, count: 2, arch: x86_64, cpu: 32, memory: 256Gi,
           accelerators: [{kind: gpu, model: A100, count: 4}]}
    - name: edge-a
      tier: edge
      nodeGroups:
        - {name: cpu, count: 2, arch: x86_64, cpu: 8, memory: 16Gi}
  links:
    - {between: [cloud-a, edge-a], rttMs: 10, bandwidth: 1Gbps}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: other}
---
apiVersion: suanli/v1
kind: VirtualCluster
metadata: {name: other-vc, tenant: other}
spec:
  hostGroups:
    - {name: pool, count: 1, resources: {cpu: 1, memory: 1Gi}}
"""

# Valid documents, each edited by one case below into one bad document.
FLEET = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: extra}
spec:
  sites:
    - name: site-b
      tier: edge
      nodeGroups:
        - name: group
          count: 1
          arch: x86_64
          cpu: 4
          memory: 8Gi
          accelerators:
            - {kind: gpu, model: T4, count: 1}
  links:
    - between: [site-b, edge-a]
      rttMs: 3
      bandwidth: 10Gbps
"""

TENANT = """\
apiVersion: suanli/v1
kind: Tenant
metadata: {name: third}
spec:
  weight: 2
  quota: {cpu: 100, memory: 1Ti, gpu: 8}
"""

VC = """\
apiVersion: suanli/v1
kind: VirtualCluster
metadata: {name: acme-vc, tenant: acme}
spec:
  hostGroups:
    - name: workers
      count: 2
      resources: {cpu: 4, memory: 8Gi}
"""

APP = """\
apiVersion: suanli/v1
kind: Application
metadata: {name: job, tenant: acme}
spec:
  components:
    - name: work
      lifetime: job
      duration: 10m
      resources:
        cpu: 1
        memory: 1Gi
        accelerators:
          - kind: gpu
            count: 1
"""

SCENARIO = """\
apiVersion: suanli/v1
kind: Scenario
metadata: {name: run}
spec:
  until: 1h
  arrivals:
    - {at: 0, app: job}
  generators:
    - name: batch
      tenant: acme
      rate: 2/s
      template: {components: [{name: task, duration: 1m}]}
      jitter: {duration: lognormal(1m, 0.5)}
  events:
    - {at: 5m, kind: nodeDown, node: cloud-a/gpu-1}
"""

MARK = "# <-"  # ends the line a problem must be reported on


def edit(template: str, old: str, new: str, *, at: str | None = None) -> str:
    """``template`` with ``old`` replaced by ``new``, and MARK at the end of the
    line that holds ``at`` (by default the last line of ``new``)."""
    assert template.count(old) == 1, f"{old!r} must occur once in the template"
    text = template.replace(old, new)
    if at is None and not new.strip():
        return text
    at = new.strip().splitlines()[-1] if at is None else at
    lines = text.splitlines()
    where = [i for i, line in enumerate(lines) if at in line]
    assert len(where) == 1, f"{at!r} must occur on one line"
    lines[where[0]] += f"  {MARK}"
    return "\n".join(lines) + "\n"


def case(case_id, text, path, hint, value=None, *, with_app=False):
    """One malformed input: the field path, the bad value and the expected-form hint to see."""
    return pytest.param(text, path, value, hint, with_app, id=case_id)


NODE_GROUP_FIELD = "          arch: x86_64\n"  # a line of FLEET's node group, to add fields after
COMPONENT_FIELD = "      lifetime: job\n"  # a line of APP's component
HOST_GROUP_FIELD = "      count: 2\n"  # a line of VC's host group

CASES = [
    case(
        "yaml-syntax",
        edit(TENANT, "metadata: {name: third}", "metadata: {name: third]"),
        "malformed YAML",
        "expected ',' or '}'",
    ),
    case(
        "document-not-a-mapping",
        f"- apiVersion: suanli/v1  {MARK}\n- kind: Tenant\n",
        "document 0",
        "a document is a mapping with apiVersion, kind, metadata and spec",
        "got a list",
    ),
    case(
        "unknown-kind",
        edit(TENANT, "kind: Tenant", "kind: Tennant"),
        "kind",
        "did you mean 'Tenant'? expected one of Fleet, Tenant, VirtualCluster, Application",
        "'Tennant'",
    ),
    case(
        "missing-kind",
        edit(TENANT, "kind: Tenant\n", "", at="apiVersion"),
        "kind",
        "required field is missing; expected one of Fleet, Tenant",
    ),
    case(
        "wrong-api-version",
        edit(TENANT, "apiVersion: suanli/v1", "apiVersion: suanli/v2"),
        "apiVersion",
        "expected 'suanli/v1'",
        "'suanli/v2'",
    ),
    case(
        "unknown-top-level-field",
        edit(TENANT, "spec:", "spce:"),
        "spce",
        "unknown field 'spce'; did you mean 'spec'?",
    ),
    case(
        "unknown-nested-field",
        edit(FLEET, NODE_GROUP_FIELD, NODE_GROUP_FIELD + "          memroy: 8Gi\n"),
        "spec.sites[0].nodeGroups[0].memroy",
        "unknown field 'memroy'; did you mean 'memory'?",
    ),
    case(
        "unknown-field-no-close-name",
        edit(VC, HOST_GROUP_FIELD, "      zzz: 2\n" + HOST_GROUP_FIELD, at="zzz"),
        "spec.hostGroups[0].zzz",
        "unknown field 'zzz'; expected one of: name, count, min, max, resources",
    ),
    case(
        "missing-required-field",
        edit(FLEET, "          memory: 8Gi\n", "", at="- name: group"),
        "spec.sites[0].nodeGroups[0].memory",
        "required field is missing",
    ),
    case(
        "missing-spec",
        edit(APP, APP[APP.index("spec:"):], "", at="apiVersion"),
        "spec",
        "required field is missing",
    ),
    case(
        "bad-cpu",
        edit(FLEET, "cpu: 4\n", "cpu: 4x\n"),
        "spec.sites[0].nodeGroups[0].cpu",
        "is not a number of cores (4, 0.5) or millicores ('500m')",
        "'4x'",
    ),
    case(
        "bad-memory",
        edit(FLEET, "memory: 8Gi\n", "memory: 8 gigs\n"),
        "spec.sites[0].nodeGroups[0].memory",
        "is not a size with a unit: '512Mi', '8Gi', '1Ti', '2G'",
        "'8 gigs'",
    ),
    case(
        "memory-without-unit",
        edit(APP, "memory: 1Gi\n", "memory: 1024\n"),
        "spec.components[0].resources.memory",
        "is not a size with a unit",
        "1024",
    ),
    case(
        "bad-device-count",
        edit(APP, "count: 1\n", "count: two\n"),
        "spec.components[0].resources.accelerators[0].count",
        "is not a device count: a fraction of one device (0.25) or whole devices (1, 8)",
        "'two'",
    ),
    case(
        "fractional-device-count-above-one",
        edit(APP, "count: 1\n", "count: 1.5\n"),
        "spec.components[0].resources.accelerators[0].count",
        "a count of 1 or more must be a whole number",
        "1.5",
    ),
    case(
        "fractional-devices-per-node",
        edit(FLEET, "model: T4, count: 1}", "model: T4, count: 0.5}"),
        "spec.sites[0].nodeGroups[0].accelerators[0].count",
        "expected a whole number",
        "0.5",
    ),
    case(
        "bad-bandwidth",
        edit(FLEET, "bandwidth: 10Gbps", "bandwidth: 10"),
        "spec.links[0].bandwidth",
        "is not a bandwidth: '200Mbps', '10Gbps', '400Gbps'",
        "10",
    ),
    case(
        "bad-duration",
        edit(APP, "duration: 10m", "duration: 5 minutes"),
        "spec.components[0].duration",
        "is not a duration: '30s', '10m', '2h', '1d', '1h20m', or seconds as a number",
        "'5 minutes'",
    ),
    case(
        "bad-rate",
        edit(SCENARIO, "rate: 2/s", "rate: often"),
        "spec.generators[0].rate",
        "is not a rate: '2/s', '1/5m', '10/h'",
        "'often'",
        with_app=True,
    ),
    case(
        "bad-distribution",
        edit(SCENARIO, "lognormal(1m, 0.5)}", "normal(1m, 0.5)}"),
        "spec.generators[0].jitter.duration",
        "is not lognormal(MEDIAN, SIGMA), exponential(MEAN) or uniform(LOW, HIGH)",
        "'normal(1m, 0.5)'",
        with_app=True,
    ),
    case(
        "bad-tier",
        edit(FLEET, "tier: edge", "tier: fog"),
        "spec.sites[0].tier",
        "expected 'cloud', 'edge' or 'device'",
        "'fog'",
    ),
    case(
        "bad-coupling",
        edit(APP, COMPONENT_FIELD, "      gang: {size: 2}\n      coupling: infiniband\n"),
        "spec.components[0].coupling",
        "expected 'coherent', 'ib', 'roce', 'ethernet' or 'wan'",
        "'infiniband'",
    ),
    case(
        "bad-name",
        edit(TENANT, "metadata: {name: third}", "metadata: {name: 'third tenant'}"),
        "metadata.name",
        "expected a name of letters, digits",
        "'third tenant'",
    ),
    case(
        "bad-number",
        edit(TENANT, "weight: 2", "weight: heavy"),
        "spec.weight",
        "expected a number",
        "'heavy'",
    ),
    case(
        "number-out-of-range",
        edit(TENANT, "weight: 2", "weight: 0"),
        "spec.weight",
        "expected a number > 0",
        "got 0",
    ),
    case(
        "bad-quota",
        edit(TENANT, "{cpu: 100,", "{cpu: lots,"),
        "spec.quota.cpu",
        "is not a number of cores",
        "'lots'",
    ),
    case(
        "mapping-expected",
        edit(VC, "resources: {cpu: 4, memory: 8Gi}", "resources: 4"),
        "spec.hostGroups[0].resources",
        "expected a mapping of fields (key: value)",
        "got 4",
    ),
    case(
        "list-expected",
        edit(APP, APP[APP.index("accelerators:"):], "accelerators: gpu\n"),
        "spec.components[0].resources.accelerators",
        "expected a list",
        "'gpu'",
    ),
    case(
        "empty-list",
        edit(VC, VC[VC.index("  hostGroups:"):], "  hostGroups: []\n"),
        "spec.hostGroups",
        "expected at least 1 item, got 0",
    ),
    case(
        "duplicate-yaml-key",
        edit(TENANT, "  weight: 2\n", "  weight: 2\n  weight: 3\n"),
        "spec.weight",
        "appears twice in this mapping (first on line 5)",
        "'weight'",
    ),
    case(
        "duplicate-site-name",
        edit(FLEET.replace("[site-b, edge-a]", "[cloud-a, edge-a]"),
             "- name: site-b", "- name: cloud-a"),
        "spec.sites[0].name",
        "is already defined in",
        "'cloud-a'",
    ),
    case(
        "link-to-missing-site",
        edit(FLEET, "between: [site-b, edge-a]", "between: [site-b, mars]"),
        "spec.links[0].between[1]",
        "no site named 'mars'; known: cloud-a, edge-a, site-b",
        "'mars'",
    ),
    case(
        "application-missing-tenant",
        edit(APP, "tenant: acme}", "tenant: nobody}"),
        "metadata.tenant",
        "no tenant named 'nobody'; known: acme, other",
        "'nobody'",
    ),
    case(
        "missing-virtual-cluster",
        edit(APP, "spec:\n", "spec:\n  virtualCluster: nope\n"),
        "spec.virtualCluster",
        "no virtual cluster named 'nope'; known: other-vc",
        "'nope'",
    ),
    case(
        "virtual-cluster-of-another-tenant",
        edit(APP, "spec:\n", "spec:\n  virtualCluster: other-vc\n"),
        "spec.virtualCluster",
        "belongs to tenant 'other', not 'acme'",
        "'other-vc'",
    ),
    case(
        "virtual-cluster-without-tenant",
        edit(VC, "metadata: {name: acme-vc, tenant: acme}", "metadata: {name: acme-vc}"),
        "metadata.tenant",
        "required field is missing: a virtual cluster belongs to a tenant",
    ),
    case(
        "near-missing-site",
        edit(APP, COMPONENT_FIELD, COMPONENT_FIELD + "      near: {site: mars, maxRttMs: 5}\n"),
        "spec.components[0].near.site",
        "no site named 'mars'; known: cloud-a, edge-a",
        "'mars'",
    ),
    case(
        "host-group-near-missing-site",
        edit(VC, HOST_GROUP_FIELD, HOST_GROUP_FIELD + "      near: {site: venus}\n"),
        "spec.hostGroups[0].near.site",
        "no site named 'venus'",
        "'venus'",
    ),
    case(
        "data-source-missing-site",
        edit(APP, COMPONENT_FIELD, COMPONENT_FIELD + "      data: {source: venus}\n"),
        "spec.components[0].data.source",
        "no site named 'venus'; known: cloud-a, edge-a",
        "'venus'",
    ),
    case(
        "arrival-of-missing-application",
        edit(SCENARIO, "{at: 0, app: job}", "{at: 0, app: ghost}"),
        "spec.arrivals[0].app",
        "no application named 'ghost'; known: job",
        "'ghost'",
        with_app=True,
    ),
    case(
        "node-down-of-missing-node",
        edit(SCENARIO, "node: cloud-a/gpu-1}", "node: cloud-a/gpu-2}"),
        "spec.events[0].node",
        "nodes are named SITE/GROUP-INDEX, e.g. cloud-a/gpu-0, cloud-a/gpu-1",
        "'cloud-a/gpu-2'",
        with_app=True,
    ),
    case(
        "unknown-event-kind",
        edit(SCENARIO, "kind: nodeDown,", "kind: nodeBoom,"),
        "spec.events[0].kind",
        "expected one of 'delete', 'nodeDown', 'nodeUp', 'nodeDrain', 'nodeCordon', 'linkDown', 'linkUp', 'deviceBusy'",
        "'nodeBoom'",
        with_app=True,
    ),
    case(
        "include-of-missing-file",
        edit(SCENARIO, "  until: 1h\n", "  until: 1h\n  include: [missing.yaml]\n"),
        "spec.include[0]",
        "No such file or directory; include paths are relative to the scenario file",
        "'missing.yaml'",
        with_app=True,
    ),
    case(
        "gang-and-replicas",
        edit(APP, COMPONENT_FIELD, COMPONENT_FIELD + "      replicas: 2\n      gang: {size: 2}\n",
             at="- name: work"),
        "spec.components[0]",
        "a component has either replicas (independent tasks) or gang, not both",
    ),
    case(
        "gang-min-size-above-size",
        edit(APP, COMPONENT_FIELD, COMPONENT_FIELD + "      gang: {size: 2, minSize: 3}\n"),
        "spec.components[0].gang.minSize",
        "minSize 3 is above size 2",
    ),
    case(
        "job-without-duration-or-work",
        edit(APP, "      duration: 10m\n", "", at="- name: work"),
        "spec.components[0]",
        "a job needs duration (fixed length) or work (total task-time)",
    ),
    case(
        "host-group-count-and-min-max",
        edit(VC, HOST_GROUP_FIELD, HOST_GROUP_FIELD + "      min: 0\n      max: 4\n",
             at="- name: workers"),
        "spec.hostGroups[0]",
        "a host group has either count (fixed) or min/max (elastic), not both",
    ),
    case(
        "host-group-min-above-max",
        edit(VC, HOST_GROUP_FIELD, "      min: 5\n      max: 4\n", at="min: 5"),
        "spec.hostGroups[0].min",
        "min 5 is above max 4",
    ),
    case(
        "snake-case-field-name",
        edit(FLEET, "      nodeGroups:", "      node_groups:"),
        "spec.sites[0].node_groups",
        "unknown field 'node_groups'; did you mean 'nodeGroups'?",
    ),
    case(
        "accelerator-kind-named-like-a-resource",
        edit(FLEET, "{kind: gpu, model: T4, count: 1}", "{kind: memory, model: T4, count: 1}"),
        "spec.sites[0].nodeGroups[0].accelerators[0].kind",
        "names a resource, not an accelerator kind",
        "'memory'",
    ),
    case(
        "tenant-on-a-fleet",
        edit(FLEET, "metadata: {name: extra}", "metadata: {name: extra, tenant: acme}"),
        "metadata.tenant",
        "a Fleet belongs to no tenant",
    ),
    case(
        "affinity-group-with-two-scopes",
        APP.replace("      lifetime: job\n      duration: 10m\n",
                    "      lifetime: job\n      duration: 10m\n      affinity: {group: g, scope: site}\n")
        + "    - name: other\n      duration: 1m\n      affinity: {group: g, scope: node}  " + MARK + "\n",
        "spec.components[1].affinity.scope",
        "one group has one scope",
        "'node'",
    ),
]


def expected_line(text: str) -> int | None:
    lines = [i for i, line in enumerate(text.splitlines(), start=1) if MARK in line]
    return lines[0] if lines else None


runner = CliRunner()


def run_cli(*args: str | Path):
    """Run the CLI in this process; return (exit code, stdout, stderr)."""
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"the CLI raised {result.exception!r}") from result.exception
    return result.exit_code, result.stdout, result.stderr


class Program:
    """The real `suanli` program, started at once so that several runs overlap."""

    def __init__(self, *args: str | Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "suanli.cli", *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def result(self):
        """(exit code, stdout, stderr) once the program has ended."""
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


@contextmanager
def deadline(seconds: int):
    """Fail instead of hanging when the body takes longer than ``seconds``."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(signum, frame):
        raise AssertionError(f"took longer than {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "base.yaml"
    path.write_text(BASE)
    return path


@pytest.mark.parametrize(("text", "path", "value", "hint", "with_app"), CASES)
def test_bad_document_is_reported(tmp_path, base, text, path, value, hint, with_app):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    files = [base, bad]
    if with_app:  # the scenario's arrivals name this application
        files.insert(1, tmp_path / "app.yaml")
        files[1].write_text(APP)
    code, out, err = run_cli("validate", *files)
    assert code == 2, err
    assert "Traceback" not in out + err
    problems = [line for line in error_lines(err) if "bad.yaml" in line]
    assert problems, err
    line = expected_line(text)
    prefix = f"error: {bad}:{line}: " if line else f"error: {bad}"
    matching = [p for p in problems if p.startswith(prefix) and path in p and hint in p]
    assert matching, f"no problem at {prefix!r} with {path!r} and {hint!r} in:\n{err}"
    if value is not None:
        assert value in matching[0], matching[0]
    assert re.search(r"^\d+ problems? found", err, re.MULTILINE)


def test_bad_documents_cover_many_kinds_of_mistake():
    assert len(CASES) >= 20
    assert len({p.id for p in CASES}) == len(CASES)


def test_document_label_names_kind_and_name(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(APP, "duration: 10m", "duration: soon"))
    _, _, err = run_cli("validate", base, bad)
    line = f"error: {bad}:8: document 0 (Application job): spec.components[0].duration: 'soon' is"
    assert line in err


def test_later_document_is_counted_from_zero(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TENANT + "---\n" + edit(APP, "duration: 10m", "duration: soon"))
    _, _, err = run_cli("validate", base, bad)
    assert "document 1 (Application job): spec.components[0].duration" in err


def test_site_field_problem_is_reported_beside_a_nested_one(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(edit(FLEET, "tier: edge", "tier: fog"), "cpu: 4\n", "cpu: 4x\n"))
    code, _, err = run_cli("validate", base, bad)
    assert code == 2
    assert "spec.sites[0].tier: expected 'cloud', 'edge' or 'device'; got 'fog'" in err
    assert "spec.sites[0].nodeGroups[0].cpu: '4x'" in err


def test_non_mapping_field_is_reported_beside_a_nested_one(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        edit(edit(VC, HOST_GROUP_FIELD, HOST_GROUP_FIELD + "      near: edge-a\n"),
             "cpu: 4,", "cpu: 4x,")
    )
    _, _, err = run_cli("validate", base, bad)
    assert "spec.hostGroups[0].near: expected a mapping of fields (key: value); got 'edge-a'" in err
    assert "spec.hostGroups[0].resources.cpu: '4x'" in err


def test_duplicate_key_does_not_hide_other_problems(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(TENANT, "  weight: 2\n", "  weight: 2\n  weight: 3\n  wieght: 4\n"))
    _, _, err = run_cli("validate", base, bad)
    assert "spec.weight: key 'weight' appears twice" in err
    assert "spec.wieght: unknown field 'wieght'; did you mean 'weight'?" in err


def test_missing_file_is_reported(tmp_path):
    code, _, err = run_cli("validate", tmp_path / "absent.yaml")
    assert code == 2
    assert "absent.yaml: cannot read file: No such file or directory" in err


def test_deeply_nested_yaml_is_reported(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("x: " + "[" * 1000 + "]" * 1000 + "\n")
    code, _, err = run_cli("validate", bad)
    assert code == 2
    assert f"error: {bad}:1: document 0: malformed YAML" in err


def test_nested_value_is_shown_shortened(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(TENANT, "weight: 2", "weight: " + "[" * 200 + "]" * 200))
    code, _, err = run_cli("validate", base, bad)
    assert code == 2
    assert "spec.weight: expected a number; got [[[...]]]" in err


def test_long_value_is_shown_shortened(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(FLEET, "cpu: 4\n", "cpu: " + "x" * 5000 + "\n"))
    code, _, err = run_cli("validate", base, bad)
    assert code == 2
    (line,) = error_lines(err)
    assert "spec.sites[0].nodeGroups[0].cpu: 'xxx" in line
    assert "..." in line and len(line) < 400


def test_large_fleet_is_checked_without_listing_its_nodes(tmp_path):
    big = tmp_path / "big.yaml"
    fleet = FLEET[: FLEET.index("  links:")]
    big.write_text(edit(fleet, "count: 1\n", "count: 1000000\n"))  # the most one node group may have
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: suanli/v1\nkind: Scenario\nmetadata: {name: run}\nspec:\n  events:\n"
        "    - {at: 1m, kind: nodeDown, node: site-b/group-999999}\n"
        "    - {at: 2m, kind: nodeDown, node: site-b/group-1000000}\n"
    )
    with deadline(seconds=10):
        code, _, err = run_cli("validate", big, scenario)
    assert code == 2
    assert len(error_lines(err)) == 1
    assert "spec.events[1].node: no node 'site-b/group-1000000'" in err


# ----------------------------------------------------------- the real program


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("program")
    (folder / "base.yaml").write_text(BASE)
    (folder / "several.yaml").write_text(SEVERAL)
    (folder / "malformed.yaml").write_text(
        "apiVersion: suanli/v1\nkind: Tenant\nmetadata: {name: x\nspec: {}\n"
    )
    (folder / "tenants.yaml").write_text(TENANT)
    return folder


@pytest.fixture(scope="module")
def programs(program_dir: Path):
    """Runs of the real program, started together; each test reads its own."""
    started = {
        "several": Program("validate", program_dir / "base.yaml", program_dir / "several.yaml"),
        "malformed": Program("validate", program_dir / "malformed.yaml"),
        "no-fleet": Program("schedule", program_dir / "tenants.yaml", "-o", "json"),
    }
    yield started
    for program in started.values():
        if program.proc.poll() is None:
            program.proc.kill()
        program.proc.communicate()


# ----------------------------------------------------------- several problems


SEVERAL = (
    edit(edit(edit(FLEET, "tier: edge", "tier: fog"), "cpu: 4\n", "cpu: 4x\n"),
         NODE_GROUP_FIELD, NODE_GROUP_FIELD + "          lables: {a: b}\n")
    + "---\n"
    + edit(TENANT, "weight: 2", "weight: -1")
    + "---\n"
    + edit(APP, "duration: 10m", "duration: soon")
)


def test_every_problem_of_a_file_is_reported(programs):
    code, out, err = programs["several"].result()
    assert code == 2
    assert "Traceback" not in out + err
    lines = error_lines(err)
    assert len(lines) == 5, err
    assert "\n5 problems found" in err
    for fragment in (
        "document 0 (Fleet extra): spec.sites[0].tier",
        "document 0 (Fleet extra): spec.sites[0].nodeGroups[0].lables: unknown field 'lables'",
        "document 0 (Fleet extra): spec.sites[0].nodeGroups[0].cpu",
        "document 1 (Tenant third): spec.weight: expected a number > 0",
        "document 2 (Application job): spec.components[0].duration",
    ):
        assert sum(fragment in line for line in lines) == 1, fragment
    reported = [int(re.match(r"error: [^:]+:(\d+):", line).group(1)) for line in lines]
    assert reported == sorted(reported), "problems are listed in file order"


def test_problems_in_two_files_are_both_reported(tmp_path, base):
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(edit(FLEET, "cpu: 4\n", "cpu: 4x\n"))
    second.write_text(edit(TENANT, "memory: 1Ti", "memory: much"))
    code, _, err = run_cli("validate", base, first, second)
    assert code == 2
    lines = error_lines(err)
    assert len(lines) == 2, err
    assert lines[0].startswith(f"error: {first}:12: document 0 (Fleet extra): ")
    assert "spec.sites[0].nodeGroups[0].cpu: '4x' is not a number of cores" in lines[0]
    assert lines[1].startswith(f"error: {second}:6: document 0 (Tenant third): ")
    assert "spec.quota.memory: 'much' is not a size with a unit" in lines[1]


def test_reference_problems_in_several_documents_are_all_reported(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        edit(APP, "tenant: acme}", "tenant: nobody}")
        + "---\n"
        + edit(edit(SCENARIO, "app: job}", "app: ghost}"), "gpu-1}", "gpu-9}")
    )
    code, _, err = run_cli("validate", base, bad)
    assert code == 2
    lines = error_lines(err)
    assert len(lines) == 3, err
    assert "document 0 (Application job): metadata.tenant: no tenant named 'nobody'" in lines[0]
    assert "document 1 (Scenario run): spec.arrivals[0].app: no application named" in lines[1]
    assert "document 1 (Scenario run): spec.events[0].node: no node 'cloud-a/gpu-9'" in lines[2]


# ----------------------------------------------------------- exit status and no traceback


def test_malformed_yaml_exits_2_without_traceback(programs, program_dir):
    code, out, err = programs["malformed"].result()
    assert code == 2
    assert "Traceback" not in out + err
    assert f"error: {program_dir / 'malformed.yaml'}:4: document 0: malformed YAML" in err


def test_schedule_without_a_fleet_exits_2(programs, program_dir):
    code, out, err = programs["no-fleet"].result()
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert f"error: {program_dir / 'tenants.yaml'}: no Fleet document among the files" in err
    assert "\n1 problem found" in err


def test_value_with_square_brackets_is_printed_as_written(tmp_path, base):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(FLEET, "tier: edge", "tier: '[/x]'"))
    code, _, err = run_cli("validate", base, bad)
    assert code == 2
    assert "got '[/x]'" in err


# ----------------------------------------------------------- the examples


@pytest.mark.parametrize(
    "files",
    [
        ["city-fleet.yaml", "tenants.yaml", "static-heterogeneous.yaml"],
        ["autodrive.yaml"],
        ["ai-hpc-mix.yaml"],
    ],
    ids=["static", "autodrive", "ai-hpc-mix"],
)
def test_example_validates(files):
    code, out, err = run_cli("validate", *(EXAMPLES / f for f in files))
    assert code == 0, err
    assert out.startswith("ok: 3 file(s), 1 fleets, 4 tenants")


def test_example_validates_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("validate", EXAMPLES / "autodrive.yaml")
    assert code == 0, err
    assert out == "ok: 3 file(s), 1 fleets, 4 tenants, 2 applications, 1 scenarios\n"


def test_simulate_with_an_out_path_that_is_a_file_says_so(tmp_path):
    examples = Path(__file__).resolve().parents[2] / "shared" / "examples"
    taken = tmp_path / "taken"
    taken.write_text("not a directory\n")
    code, out, err = run_cli("simulate", examples / "autodrive.yaml", "--out", taken)
    assert code == 2 and "--out" in err and "cannot make directory" in err and "Traceback" not in err


# ---------------------------------------------------------------- warnings: valid, but nothing can match

WARNED = [
    (edit(APP, "          - kind: gpu\n", "          - kind: gpu\n            model: H-100\n"),
     "spec.components[0].resources.accelerators[0].model", "no node has a gpu of model 'H-100'", "A100"),
    (edit(APP, "          - kind: gpu\n", "          - kind: npu\n"),
     "spec.components[0].resources.accelerators[0].kind", "no node has a device of kind 'npu'", "gpu"),
    (edit(APP, "      duration: 10m\n", "      duration: 10m\n      platform: {arch: [riscv64, loongarch64]}\n"),
     "spec.components[0].platform.arch", "no node has arch 'riscv64' or 'loongarch64'", "x86_64"),
    (edit(VC, "      resources: {cpu: 4, memory: 8Gi}\n",
          "      resources: {cpu: 4, memory: 8Gi, accelerators: [{kind: gpu, model: [H100, H200]}]}\n"),
     "spec.hostGroups[0].resources.accelerators[0].model", "no node has a gpu of model 'H100' or 'H200'", "A100"),
    (edit(VC, "      resources: {cpu: 4, memory: 8Gi}\n",
          "      resources: {cpu: 4, memory: 8Gi}\n      sites: {tier: [device], labels: {zone: z1}}\n"),
     "spec.hostGroups[0].sites", "no site or node group has tier 'device' and labels {'zone': 'z1'}", None),
    (edit(SCENARIO, "      template: {components: [{name: task, duration: 1m}]}\n",
          "      template: {components: [{name: task, duration: 1m, platform: {arch: [arm64]}}]}\n"),
     "spec.generators[0].template.components[0].platform.arch", "no node has arch 'arm64'", "x86_64"),
]


@pytest.mark.parametrize(("text", "path", "message", "known"), WARNED)
def test_a_demand_nothing_can_meet_is_a_warning_and_an_error_when_strict(tmp_path, base, text, path, message, known):
    odd = tmp_path / "odd.yaml"
    odd.write_text(text)
    files = [base, odd]
    if "kind: Scenario" in text:
        files.insert(1, tmp_path / "app.yaml")
        files[1].write_text(APP)
    code, out, err = run_cli("validate", *files)
    assert code == 0, err
    warned = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1, err
    line = expected_line(text)
    assert warned[0].startswith(f"warning: {odd}:{line}: document 0 (") and f": {path}: {message}" in warned[0], warned
    assert known is None or known in warned[0]  # what the fleet has, to correct it by
    assert "(1 warning)" in " ".join(out.split())
    code, out, err = run_cli("validate", "--strict", *files)
    assert code == 2 and len(error_lines(err)) == 1 and f": {path}: {message}" in error_lines(err)[0], err
    assert "Traceback" not in out + err


def test_a_valid_world_has_no_warnings(tmp_path, base):
    ok = tmp_path / "ok.yaml"
    ok.write_text("---\n".join([APP, VC, edit(VC, "acme-vc", "acme-vc2").replace(
        "      resources: {cpu: 4, memory: 8Gi}\n",
        "      resources: {cpu: 4, memory: 8Gi}\n      sites: {tier: [edge]}\n")]))
    code, out, err = run_cli("validate", "--strict", base, ok)
    assert code == 0 and "warning" not in err, err


def test_a_selector_met_by_a_node_groups_labels_is_no_warning(tmp_path):
    """Labels a site does not have but one of its node groups has select
    that group's nodes (its labels over its site's): no warning, and the
    work is placed there; labels nobody has are still a warning."""
    labelled = BASE.replace("        - {name: cpu, count: 2, arch: x86_64, cpu: 8, memory: 16Gi}\n",
                            "        - {name: cpu, count: 2, arch: x86_64, cpu: 8, memory: 16Gi, labels: {role: HN}}\n")
    assert labelled != BASE
    world = tmp_path / "labelled.yaml"
    world.write_text(labelled)
    app_ = tmp_path / "app.yaml"
    app_.write_text(APP.replace("        accelerators:\n          - kind: gpu\n            count: 1\n", "")
                    + "      sites: {labels: {role: HN}}\n")
    code, out, err = run_cli("validate", "--strict", world, app_)
    assert code == 0 and "warning" not in err, err
    code, out, err = run_cli("schedule", world, app_, "-o", "json")
    assert code == 0, err
    assert [p["node"].split("/")[0] for p in json.loads(out)["placements"]] == ["edge-a"]
    app_.write_text(app_.read_text().replace("role: HN", "role: XX"))
    code, out, err = run_cli("validate", world, app_)
    assert code == 0 and "no site or node group has labels {'role': 'XX'}" in err, err


def test_work_no_node_could_ever_hold_is_a_warning_with_the_bound_in_figures(tmp_path, base):
    """An 8-GPU task on a fleet whose nodes have 4 at most, and one asking
    more memory than any node has: warnings that say it can never be placed,
    with what it asks against the most a node has; errors under --strict. A
    task that fits the largest node is no warning."""
    odd = tmp_path / "odd.yaml"
    job = APP.replace("            count: 1\n", "            count: 8\n")
    both = APP.replace("metadata: {name: job,", "metadata: {name: both,").replace(
        "        cpu: 1\n        memory: 1Gi\n", "        cpu: 32\n        memory: 300Gi\n").replace(
        "        accelerators:\n          - kind: gpu\n            count: 1\n", "")
    fits = APP.replace("metadata: {name: job,", "metadata: {name: fits,").replace("            count: 1\n",
                                                                               "            count: 4\n")
    odd.write_text("---\n".join([job, both, fits]))
    code, out, err = run_cli("validate", base, odd)
    warned = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert code == 0 and len(warned) == 2, err
    assert "(Application job): spec.components[0].resources: no node of the fleet can hold one of its tasks, even " \
           "empty: it asks 8 gpu on one node, and the most a node has is 4; it can never be placed" in warned[0]
    assert "(Application both)" in warned[1] and "it asks 300Gi memory on one node, and the most a node has is " \
                                                  "256Gi" in warned[1], warned
    code, out, err = run_cli("validate", "--strict", base, odd)
    assert code == 2 and len(error_lines(err)) == 2, err


def test_work_whose_resources_no_one_node_has_together_is_a_warning(tmp_path):
    """cpu 100 fits the 128-core nodes and 200Gi the 256Gi ones, but no node
    has both: a warning saying so."""
    world = tmp_path / "w.yaml"
    world.write_text(BASE.replace("        - {name: gpu, count: 2, arch: x86_64, cpu: 32, memory: 256Gi,\n",
                                  "        - {name: wide, count: 1, arch: x86_64, cpu: 128, memory: 64Gi}\n"
                                  "        - {name: gpu, count: 2, arch: x86_64, cpu: 32, memory: 256Gi,\n")
                     + "---\n" + APP.replace("        cpu: 1\n        memory: 1Gi\n", "        cpu: 100\n        memory: 200Gi\n")
                     .replace("        accelerators:\n          - kind: gpu\n            count: 1\n", ""))
    code, out, err = run_cli("validate", world)
    assert code == 0 and "no node has them all together; it can never be placed" in err, err
    vc = tmp_path / "vc.yaml"  # a host group's hosts: the same, said of its hosts
    vc.write_text(BASE + "---\n" + VC.replace("resources: {cpu: 4, memory: 8Gi}", "resources: {cpu: 200, memory: 8Gi}"))
    code, out, err = run_cli("validate", vc)
    assert code == 0 and "spec.hostGroups[0].resources: no node of the fleet can hold one of its hosts, even empty: " \
                         "it asks 200 cpu on one node, and the most a node has is" in err, err


def test_the_same_warning_of_many_documents_is_one_line(tmp_path, base):
    """Thirty applications with one component each asking for labels no node
    has: one warning line, saying how many more documents have it; under
    --strict one error line, and the count of all thirty problems."""
    one = APP.replace("        accelerators:\n          - kind: gpu\n            count: 1\n", "") + \
        "      sites: {labels: {role: XX}}\n"
    many = tmp_path / "many.yaml"
    many.write_text("---\n".join(one.replace("name: job,", f"name: job-{i},") for i in range(30)))
    code, out, err = run_cli("validate", base, many)
    warned = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert code == 0 and len(warned) == 1, err
    assert "spec.components[0].sites: no site or node group has labels {'role': 'XX'}" in warned[0]
    assert warned[0].endswith("(and the same in 29 more documents)"), warned
    assert "(30 warnings)" in " ".join(out.split())
    code, out, err = run_cli("validate", "--strict", base, many)
    assert code == 2 and len(error_lines(err)) == 1 and "30 problems found" in err, err


def test_one_pass_reports_the_documents_problems_and_the_references_of_the_valid_ones(tmp_path, base):
    """A document that is not valid does not hold back the reference checks of
    the others; a reference to what a broken document would define is not
    reported (it may be only an echo)."""
    twice = edit(APP, "    - name: work\n", "    - name: work\n      replicas: 1\n    - name: work  # again\n",
                 at="name: work  # again")
    dangling = edit(VC, "metadata: {name: acme-vc, tenant: acme}", "metadata: {name: acme-vc, tenant: nobody}")
    echo = edit(APP, "metadata: {name: job, tenant: acme}", "metadata: {name: job2, tenant: third}")
    bad_tenant = edit(TENANT, "  weight: 2\n", "  weight: heavy\n")
    odd = tmp_path / "odd.yaml"
    odd.write_text("---\n".join([twice, dangling, echo, bad_tenant]))
    code, out, err = run_cli("validate", base, odd)
    assert code == 2 and "Traceback" not in out + err
    lines = error_lines(err)
    assert any("(Application job)" in line and "spec.components" in line for line in lines), err
    assert any("(VirtualCluster acme-vc): metadata.tenant: no tenant named 'nobody'" in line for line in lines), err
    assert any("(Tenant third): spec.weight" in line for line in lines), err
    assert not any("(Application job2)" in line for line in lines), err  # its tenant's document is the broken one


def test_an_unreadable_include_does_not_hold_back_other_problems_nor_make_echoes(tmp_path, base):
    scenario = edit(SCENARIO, "  until: 1h\n", "  include: [missing.yaml]\n  until: 1h\n")
    twice = edit(APP, "metadata: {name: job, tenant: acme}", "metadata: {name: job, tenant: whoever}")
    odd = tmp_path / "odd.yaml"
    odd.write_text("---\n".join([scenario, edit(TENANT, "  weight: 2\n", "  weight: -1\n")]))
    apps = tmp_path / "apps.yaml"
    apps.write_text(twice)
    code, out, err = run_cli("validate", base, apps, odd)
    lines = error_lines(err)
    assert code == 2 and any("cannot read included file 'missing.yaml'" in line for line in lines), err
    assert any("(Tenant third): spec.weight" in line for line in lines), err
    assert not any("no tenant named 'whoever'" in line for line in lines), err  # the missing file may define it
