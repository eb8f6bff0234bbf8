"""Golden scenarios: the shared examples scheduled end to end, key outcomes asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from conftest import schedule_json


@pytest.fixture(scope="module")
def static_result(examples):
    return schedule_json(examples / "city-fleet.yaml", examples / "tenants.yaml",
                         examples / "static-heterogeneous.yaml")


def _placed(result, prefix):
    return [p for p in result["placements"] if p["task"].startswith(prefix)]


def _group_of(node: str) -> str:
    return node.rsplit("-", 1)[0]


def test_pretrain_gang_on_eight_h100_of_one_coherent_domain(static_result):
    members = _placed(static_result, "pretrain/trainer/")
    assert len(members) == 8
    nodes = {p["node"] for p in members}
    assert len(nodes) == 8
    # every h100 node of city-fleet is in the one coherent domain nvl-north-1
    assert {_group_of(n) for n in nodes} == {"cloud-north/h100"}
    for p in members:
        assert [d["model"] for d in p["devices"]] == ["H100"] * 8
        assert sorted(d["index"] for d in p["devices"]) == list(range(8))
    hosts = [h for h in static_result["hosts"] if h["vc"] == "acme-train" and h["group"] == "trainers"]
    assert len(hosts) == 8 and {h["node"] for h in hosts} == nodes


def test_npu_finetune_grew_the_elastic_group_to_four_in_one_roce_domain(static_result):
    members = _placed(static_result, "npu-finetune/worker/")
    assert len(members) == 4
    assert {_group_of(p["node"]) for p in members} == {"cloud-west/ascend"}  # roce-west-npu
    npu_hosts = [h for h in static_result["hosts"] if h["vc"] == "acme-train" and h["group"] == "npu"]
    assert len(npu_hosts) == 4
    assert {p["host"] for p in members} == {h["host"] for h in npu_hosts}
    for p in members:
        assert [d["milli"] for d in p["devices"]] == [1000] * 4


def test_detectors_on_t4_halves_within_15ms_of_car2(static_result):
    members = _placed(static_result, "edge-vision/detector/")
    assert len(members) == 12
    # car-2 reaches edge-1 in 9 ms and edge-2 in 12 ms; only edge-1 has T4s
    assert {p["site"] for p in members} == {"edge-1"}
    shares = Counter()
    for p in members:
        assert len(p["devices"]) == 1
        d = p["devices"][0]
        assert (d["kind"], d["model"], d["milli"]) == ("gpu", "T4", 500)
        shares[(p["node"], d["index"])] += d["milli"]
    assert max(shares.values()) <= 1000


def test_transcoders_on_the_dsa_nodes(static_result):
    members = _placed(static_result, "edge-vision/transcoder/")
    assert sorted(p["node"] for p in members) == ["edge-2/fpga-0", "edge-2/fpga-1"]


def test_arm_api_on_four_distinct_aarch64_nodes(static_result):
    members = _placed(static_result, "edge-vision/arm-only-api/")
    assert len({p["node"] for p in members}) == 4
    aarch64_groups = {"cloud-north/arm", "cloud-west/ascend", "edge-2/cpu", "car-1/soc", "car-2/soc"}
    assert all(_group_of(p["node"]) in aarch64_groups for p in members)


def test_impossible_tasks_are_unscheduled_with_reasons(static_result):
    why = {u["task"]: u["reasons"] for u in static_result["unscheduled"]}
    assert set(why) == {"impossible/riscv/0", "impossible/too-big/0"}
    assert "arch mismatch" in why["impossible/riscv/0"]
    assert "insufficient cpu" in why["impossible/too-big/0"]
    assert static_result["metrics"]["tasks"] == {"total": 32, "placed": 30, "unscheduled": 2}


def test_cli_json_is_byte_identical_across_runs(examples):
    files = [str(examples / f) for f in ("city-fleet.yaml", "tenants.yaml", "static-heterogeneous.yaml")]
    cmd = [sys.executable, "-m", "suanli.cli", "schedule", *files, "-o", "json", "--seed", "3"]
    a = subprocess.run(cmd, capture_output=True, check=True).stdout
    b = subprocess.run(cmd, capture_output=True, check=True).stdout
    assert a == b
    assert json.loads(a)["metrics"]["tasks"]["placed"] == 30


@pytest.mark.parametrize("scenario", ["autodrive.yaml", "ai-hpc-mix.yaml"])
def test_scenarios_schedule_statically(examples, scenario):
    result = schedule_json(examples / scenario)
    tasks = result["metrics"]["tasks"]
    assert tasks["placed"] + tasks["unscheduled"] == tasks["total"] > 0


def test_autodrive_keeps_the_driving_core_on_the_car(examples):
    result = schedule_json(examples / "autodrive.yaml")
    site = {p["task"]: p["site"] for p in result["placements"]}
    assert site["autopilot/perception/0"] == "car-1"
    assert site["autopilot/control/0"] == "car-1"


def test_table_output_is_readable(examples):
    files = [str(examples / f) for f in ("city-fleet.yaml", "tenants.yaml", "static-heterogeneous.yaml")]
    out = subprocess.run([sys.executable, "-m", "suanli.cli", "schedule", *files],
                         capture_output=True, text=True, check=True).stdout
    assert "pretrain/trainer/0" in out and "impossible/riscv/0" in out
    assert "30/32 tasks placed" in out
