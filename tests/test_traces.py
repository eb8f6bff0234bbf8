"""Trace importers: openb node and pod lists (real data) and streamed SWF files."""

from __future__ import annotations

import csv
import gzip
import itertools
import pickle
import re
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from suanli.sim.traces import (
    NodeShape,
    SwfJob,
    TraceError,
    iter_swf,
    load_openb_nodes,
    load_openb_pods,
    read_swf_header,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-gpu-2023"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"openb trace not found at {DATA}")


def _csv_rows(name: str) -> list[dict[str, str]]:
    with open(DATA / name, newline="") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------ openb: real data


@needs_data
@pytest.mark.parametrize(
    "name, nodes, gpus, shapes",
    [
        ("openb_node_list_gpu_node.csv", 1213, 6212, 15),
        ("openb_node_list_all_node.csv", 1523, 6212, 27),
    ],
)
def test_openb_node_lists_load_with_their_totals(name, nodes, gpus, shapes):
    got = load_openb_nodes(DATA / name)
    assert len(got) == nodes and int(got.gpus.sum()) == gpus
    assert got.cpu_milli.dtype == np.int64 and got.mem_mib.dtype == np.int64
    groups = got.groups()
    assert len(groups) == shapes
    assert sum(g.count for g in groups) == nodes
    assert sum(g.count * g.gpus for g in groups) == gpus
    names = [g.name for g in groups]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9-]+", n) for n in names)


@needs_data
def test_openb_shape_names_are_readable_and_cpu_only_nodes_say_so():
    gpu = load_openb_nodes(DATA / "openb_node_list_gpu_node.csv").groups()
    assert gpu[0] == NodeShape("p100-g2-c64", 22, 64000, 262144, 2, "P100")
    assert "v100m32-g8-c96" in {g.name for g in gpu}
    every = load_openb_nodes(DATA / "openb_node_list_all_node.csv").groups()
    # CPU-only shapes share "cpu-c32" etc., so memory tells them apart; GPU
    # shapes keep the names they have in the GPU-only list.
    assert every[0] == NodeShape("cpu-c32-m256g", 129, 32000, 262144, 0, "")
    assert {g.name for g in gpu} <= {g.name for g in every}
    cpu_only = [g for g in every if g.gpus == 0]
    assert all(g.name.startswith("cpu-c") and g.model == "" for g in cpu_only)
    assert sum(g.count for g in cpu_only) == 1523 - 1213


@needs_data
def test_openb_node_order_maps_every_row_to_its_group_and_a_free_slot():
    nodes = load_openb_nodes(DATA / "openb_node_list_all_node.csv")
    groups = nodes.groups()
    group, index = nodes.node_order()
    for column, attr in [(nodes.cpu_milli, "cpu_milli"), (nodes.mem_mib, "mem_mib"),
                         (nodes.gpus, "gpus"), (nodes.model, "model")]:  # fmt: skip
        assert (column == np.array([getattr(groups[g], attr) for g in group])).all()
    counts = np.array([g.count for g in groups])
    assert (index >= 0).all() and (index < counts[group]).all()
    assert len(set(zip(group.tolist(), index.tolist()))) == len(nodes)
    assert group[0] == 0 and index[0] == 0  # first node opens the first group


@needs_data
def test_openb_default_pods_and_their_arrivals():
    pods = load_openb_pods(DATA / "openb_pod_list_default.csv")
    assert len(pods) == 8152
    arrivals = list(pods.arrivals())
    assert len(arrivals) == 8152
    times = [a.at_s for a in arrivals]
    assert all(a <= b for a, b in zip(times, times[1:]))
    # 897 pods never got scheduled (Pending); one has deletion == creation: it leaves as it comes.
    assert int(np.isnan(pods.scheduled_time).sum()) == 897
    assert [a.name for a in arrivals if a.leave_at_s is None] == []
    assert [a.name for a in arrivals if a.leave_at_s == a.at_s] == ["openb-pod-7285"]
    assert all(a.leave_at_s >= a.at_s for a in arrivals)
    assert arrivals[1].gpu_milli == 460 and arrivals[1].gpu_request_milli == 460
    assert {a.qos for a in arrivals} == {"LS", "BE", "Burstable", "Guaranteed"}


@needs_data
@pytest.mark.parametrize(
    "name", ["openb_pod_list_default.csv", "openb_pod_list_multigpu50.csv"]
)
def test_openb_request_totals_match_a_direct_csv_sum(name):
    rows = _csv_rows(name)
    pods = load_openb_pods(DATA / name)
    cpu = sum(int(r["cpu_milli"]) for r in rows)
    mem = sum(int(r["memory_mib"]) for r in rows)
    gpu = sum(int(r["num_gpu"]) * int(r["gpu_milli"]) for r in rows)
    assert int(pods.cpu_milli.sum()) == cpu and int(pods.memory_mib.sum()) == mem
    assert int(pods.gpu_request_milli.sum()) == gpu
    arrivals = list(pods.arrivals())
    assert sum(a.cpu_milli for a in arrivals) == cpu
    assert sum(a.gpu_request_milli for a in arrivals) == gpu
    if name.endswith("default.csv"):
        assert (cpu, gpu) == (85_436_012, 6_086_800)


@needs_data
def test_openb_multi_gpu_pods_take_whole_gpus_in_the_published_data():
    # The docstring's reading of num_gpu >= 2 with gpu_milli < 1000 is for other
    # traces; in these files every multi-GPU pod takes whole GPUs.
    for name in ["openb_pod_list_default.csv", "openb_pod_list_multigpu50.csv"]:
        pods = load_openb_pods(DATA / name)
        multi = pods.num_gpu >= 2
        assert multi.any() and (pods.gpu_milli[multi] == 1000).all()


@needs_data
def test_openb_multigpu_file_loads_without_times():
    pods = load_openb_pods(DATA / "openb_pod_list_multigpu50.csv")
    assert len(pods) == 9061
    for col in (pods.creation_time, pods.deletion_time, pods.scheduled_time):
        assert col.dtype == np.float64 and np.isnan(col).all()
    assert (pods.gpu_spec == "").all() and (pods.qos == "").all()
    arrivals = list(pods.arrivals())
    # No times: everything arrives at 0, in file order, and never leaves.
    assert [a.name for a in arrivals] == pods.name.tolist()
    assert all(a.at_s == 0.0 and a.leave_at_s is None and a.models == () for a in arrivals)


@needs_data
def test_openb_gpu_spec_splits_into_known_models():
    pods = load_openb_pods(DATA / "openb_pod_list_gpuspec33.csv")
    known = set(load_openb_nodes(DATA / "openb_node_list_gpu_node.csv").model.tolist())
    arrivals = list(pods.arrivals())
    constrained = [a for a in arrivals if a.models]
    assert len(constrained) == 8152 - 5764
    assert all(set(a.models) <= known for a in constrained)
    # "V100M16|V100M32|V100M32" in the file: each model once.
    assert all(len(set(a.models)) == len(a.models) for a in constrained)


# -------------------------------------------------------- openb: synthetic files

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
POD_HEADER += "creation_time,deletion_time,scheduled_time\n"
GOOD_POD = "p0,1000,1024,1,500,,LS,Running,5,10,5\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


def test_openb_pods_semantics_on_a_small_file(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text(
        POD_HEADER
        + "late,1000,1024,0,0,,BE,Running,30,20,30\n"  # leaves before it comes: no end
        + "whole,8000,4096,4,1000,A10|T4|A10,LS,Running,10,,\n"  # empty end: no end
        + "part,2000,2048,2,250,,LS,Pending,,40,\n"  # no creation: arrives at 0
        + "tie,1000,1024,1,300,,LS,Running,10,15,10\n"
        + "flash,1000,1024,0,0,,LS,Pending,12,12,\n"  # deleted when made: leaves at once
    )
    pods = load_openb_pods(path)
    assert pods.gpu_request_milli.tolist() == [0, 4000, 500, 300, 0]
    got = [(a.name, a.at_s, a.leave_at_s, a.models) for a in pods.arrivals()]
    assert got == [
        ("part", 0.0, 40.0, ()),
        ("whole", 10.0, None, ("A10", "T4")),
        ("tie", 10.0, 15.0, ()),
        ("flash", 12.0, 12.0, ()),
        ("late", 30.0, None, ()),
    ]


def test_an_openb_pod_deleted_when_it_was_made_never_runs(tmp_path):
    """A pod whose deletion time equals its creation time (the trace's pending
    pods) comes and goes in one instant: it is never placed, and it does not
    run to the end of the simulation."""
    import json
    import subprocess
    import sys

    (tmp_path / "pods.csv").write_text(POD_HEADER + "flash,1000,1024,0,0,,LS,Pending,12,12,\n"
                                       + "stays,1000,1024,0,0,,LS,Running,12,,12\n")
    (tmp_path / "nodes.csv").write_text(NODE_HEADER + "n0,96000,393216,0,\n")
    (tmp_path / "s.yaml").write_text(
        "apiVersion: suanli/v1\nkind: Tenant\nmetadata: {name: t}\n---\n"
        "apiVersion: suanli/v1\nkind: Scenario\nmetadata: {name: s}\nspec:\n  until: 1h\n  traces:\n"
        "    - {format: openb, tenant: t, nodes: nodes.csv, pods: pods.csv}\n")
    subprocess.run([sys.executable, "-m", "suanli.cli", "simulate", str(tmp_path / "s.yaml"), "--out",
                    str(tmp_path / "out")], check=True, capture_output=True)
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    flash = [(e["t"], e["kind"]) for e in events if e.get("task") == "flash/pod/0" or e.get("app") == "flash"]
    assert flash and all(t == 12.0 for t, _ in flash) and "placed" not in {k for _, k in flash}, flash
    running = {p["task"] for p in json.loads((tmp_path / "out" / "result.json").read_text())["placements"]}
    assert running == {"stays/pod/0"}


def test_openb_pods_without_optional_columns_get_defaults(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text("cpu_milli,memory_mib,num_gpu,gpu_milli\n1000,1024,1,1000\n2000,0,0,0\n")
    pods = load_openb_pods(path)
    assert pods.name.tolist() == ["pod-0", "pod-1"]
    assert pods.gpu_spec.tolist() == ["", ""] and np.isnan(pods.creation_time).all()


def test_openb_tables_are_read_only(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + GOOD_POD)
    pods = load_openb_pods(path)
    with pytest.raises(ValueError):
        pods.cpu_milli[0] = 7


def test_openb_nodes_empty_list_and_unusual_shapes(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text(NODE_HEADER)
    assert load_openb_nodes(path).groups() == []
    path.write_text(
        NODE_HEADER
        + "a,82500,1000,2,Tesla V100/32G\n"  # fractional cores, odd model text
        + "b,8000,1000,1,\n"  # a GPU of unknown model
        + "c,8000,2048,0,\n"
        + "d,8000,3000,0,\n"  # same cores as c: memory tells them apart
        + "e,82500,1000,2,tesla-v100-32g\n"  # same slug as a: numbered
    )
    names = [g.name for g in load_openb_nodes(path).groups()]
    assert names == [
        "tesla-v100-32g-g2-c82500m-m1000mi",
        "gpu-g1-c8",
        "cpu-c8-m2g",
        "cpu-c8-m3000mi",
        "tesla-v100-32g-g2-c82500m-m1000mi-2",
    ]


@pytest.mark.parametrize(
    "text, line, column, message",
    [
        ("name,cpu_milli,num_gpu\n", 1, None, "missing required column(s): memory_mib, gpu_milli"),
        ("", 1, None, "empty file"),
        (POD_HEADER + GOOD_POD + "p1,lots,1024,1,500,,LS,Running,5,10,5\n", 3, "cpu_milli",
         "not an integer: 'lots'"),
        (POD_HEADER + GOOD_POD + "p1,,1024,1,500,,LS,Running,5,10,5\n", 3, "cpu_milli",
         "empty value"),
        (POD_HEADER + "p1,1000,1024,1,500,,LS,Running,soon,10,5\n", 2, "creation_time",
         "not a finite number: 'soon'"),
        (POD_HEADER + "p1,1000,1024,1,500,,LS,Running,inf,10,5\n", 2, "creation_time",
         "not a finite number"),
        (POD_HEADER + GOOD_POD + "\n" + "p1,1000,1024\n", 4, None, "expected 11 fields, found 3"),
        (POD_HEADER + "p1,1000,1024,1,1500,,LS,Running,5,10,5\n", 2, "gpu_milli", "outside 0-1000"),
        (POD_HEADER + "p1,1000,1024,0,500,,LS,Running,5,10,5\n", 2, "gpu_milli", "num_gpu is 0"),
        (POD_HEADER + "p1,1000,1024,2,0,,LS,Running,5,10,5\n", 2, "gpu_milli", "gpu_milli is 0"),
        (POD_HEADER + GOOD_POD + "p1,-1,1024,1,500,,LS,Running,5,10,5\n", 3, "cpu_milli",
         "negative"),
    ],
)  # fmt: skip
def test_openb_pod_errors_name_file_line_and_column(tmp_path, text, line, column, message):
    path = tmp_path / "pods.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert (err.value.line, err.value.column) == (line, column)
    assert message in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize(
    "text, line, column, message",
    [
        ("sn,cpu_milli,memory_mib,gpu\n", 1, None, "missing required column(s): model"),
        (NODE_HEADER + "a,1000,1024,two,T4\n", 2, "gpu", "not an integer: 'two'"),
        (NODE_HEADER + "a,1000,1024,-2,T4\n", 2, "gpu", "negative"),
        (NODE_HEADER + "a,1000,1024,1,T4\nb,1,1,0,\na,1000,1024,1,T4\n", 4, "sn", "duplicate node"),
        (NODE_HEADER + 'a,1000,1024,1,"T4\n', 2, None, "cannot read"),  # unterminated quote
    ],
)
def test_openb_node_errors_name_file_line_and_column(tmp_path, text, line, column, message):
    path = tmp_path / "nodes.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        load_openb_nodes(path)
    assert (err.value.line, err.value.column) == (line, column)
    assert message in str(err.value) and str(path) in str(err.value)


def test_openb_unreadable_inputs_are_trace_errors(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        load_openb_pods(tmp_path / "absent.csv")
    with pytest.raises(TraceError, match="not a regular file"):
        load_openb_nodes(tmp_path)
    err = pickle.loads(pickle.dumps(TraceError("f.csv", "bad", line=3, column="gpu")))
    assert (str(err), err.line, err.column) == ("f.csv:3: column 'gpu': bad", 3, "gpu")
    bad = tmp_path / "latin1.csv"
    bad.write_bytes(NODE_HEADER.encode() + "a,1,1,1,caf\xe9\n".encode("latin-1"))
    with pytest.raises(TraceError, match="cannot read"):
        load_openb_nodes(bad)


def test_openb_reads_gzip_too(tmp_path):
    path = tmp_path / "pods.csv.gz"
    path.write_bytes(gzip.compress((POD_HEADER + GOOD_POD).encode()))
    assert load_openb_pods(path).name.tolist() == ["p0"]


# ------------------------------------------------------------------------- SWF

SWF_HEADER = """\
; Version: 2.2
; Computer: Test cluster
; MaxProcs: 128
; MaxNodes: 64
; Note: synthetic
; Note: second note
"""
SWF_JOBS = """\
1 0 5 100 4 -1 -1 4 200 -1 1 3 1 -1 1 -1 -1 -1
; a comment between jobs

2 10 -1 0 8 -1 -1 8 60 -1 0 4 1 -1 2 -1 -1 -1
3 20.5 0 50 -1 -1 -1 16 -1 -1 1 3 1 -1 1 -1 -1 -1
4 30 0 -1 -1 -1 -1 -1 -1 -1 5 -1 -1 -1 -1 -1 -1 -1
"""
SWF_EXPECTED = [
    SwfJob(1, 0.0, 5.0, 100.0, 4, 200.0, 1, 3, 1, 1),
    SwfJob(2, 10.0, None, 0.0, 8, 60.0, 0, 4, 1, 2),  # zero run time
    SwfJob(3, 20.5, 0.0, 50.0, 16, None, 1, 3, 1, 1),  # allocated -1: requested 16
    SwfJob(4, 30.0, 0.0, 0.0, 0, None, 5, -1, -1, -1),  # nothing known: unusable
]
SWF_LINE = "{} 0 0 10 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n"


def _write_swf(path: Path, text: str, compress: bool) -> Path:
    path.write_bytes(gzip.compress(text.encode()) if compress else text.encode())
    return path


@pytest.mark.parametrize(
    "filename, compress",
    [("w.swf", False), ("w.swf.gz", True), ("no-suffix.swf", True)],  # gzip by magic bytes
)
def test_swf_jobs_and_header(tmp_path, filename, compress):
    path = _write_swf(tmp_path / filename, SWF_HEADER + SWF_JOBS, compress)
    jobs = list(iter_swf(path))
    assert jobs == SWF_EXPECTED
    assert [j.usable for j in jobs] == [True, True, True, False]
    header = read_swf_header(path)
    assert (header.max_procs, header.max_nodes) == (128, 64)
    assert header.fields["Computer"] == "Test cluster"
    assert header.fields["Note"] == "synthetic\nsecond note"


def test_swf_header_is_optional(tmp_path):
    path = _write_swf(tmp_path / "w.swf", "; MaxProcs: -1\n" + SWF_JOBS, False)
    header = read_swf_header(path)
    assert (header.max_procs, header.max_nodes) == (None, None)
    assert len(list(iter_swf(path))) == 4


@pytest.mark.parametrize(
    "bad, column, message",
    [
        ("5 40 0 10 4", None, "expected 18 fields, found 5"),
        ("5 40 0 ten 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1", "run time", "field 4 is not a finite"),
        ("5 40 0 10 2.5 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1", "allocated processors",
         "field 5 is not an integer"),
        ("5 40 nan 10 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1", "wait time", "field 3"),
        ("5 -1 0 10 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1", "submit time", "unknown or negative"),
        ("5 40 0 10 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1 7", None, "found 19"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("compress", [False, True])
def test_swf_malformed_lines_name_file_and_line(tmp_path, bad, column, message, compress):
    path = _write_swf(tmp_path / "w.swf", SWF_HEADER + SWF_JOBS + bad + "\n", compress)
    jobs = iter_swf(path)
    # Good jobs before the bad line come out first: the file is streamed.
    assert list(itertools.islice(jobs, 4)) == SWF_EXPECTED
    with pytest.raises(TraceError) as err:
        next(jobs)
    bad_line = SWF_HEADER.count("\n") + SWF_JOBS.count("\n") + 1
    assert (err.value.line, err.value.column) == (bad_line, column)
    assert f"{path}:{bad_line}" in str(err.value) and message in str(err.value)


def test_swf_missing_file_fails_at_call_time(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        iter_swf(tmp_path / "absent.swf")
    with pytest.raises(TraceError, match="no such file"):
        read_swf_header(tmp_path / "absent.swf")


@pytest.fixture(scope="module")
def big_swf(tmp_path_factory) -> tuple[Path, Path, int]:
    """A 200,000-job gzip SWF, and a copy cut off right after the header and 10 jobs."""
    root = tmp_path_factory.mktemp("swf")
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container
    head = "; MaxProcs: 1024\n" + "".join(SWF_LINE.format(i) for i in range(1, 11))
    # A sync flush ends a deflate block on a byte boundary, so the bytes so far
    # decode to exactly the header and 10 jobs.
    first = packer.compress(head.encode()) + packer.flush(zlib.Z_SYNC_FLUSH)
    rest = "".join(SWF_LINE.format(i) for i in range(11, 200_001)).encode()
    full, cut = root / "big.swf.gz", root / "cut.swf.gz"
    full.write_bytes(first + packer.compress(rest) + packer.flush())
    cut.write_bytes(first)
    return full, cut, head.count("\n")


def test_swf_streams_a_large_gzip_with_little_memory(big_swf):
    full, _, _ = big_swf
    tracemalloc.start()
    try:
        first = list(itertools.islice(iter_swf(full), 10))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [j.job_id for j in first] == list(range(1, 11))
    # The decompressed file is ~9 MB; taking 10 jobs must not read it all.
    assert peak < 1_000_000
    assert read_swf_header(full).max_procs == 1024


def test_swf_yields_jobs_before_a_truncated_gzip_ends(big_swf):
    _, cut, lines = big_swf
    seen = []
    with pytest.raises(TraceError) as err:
        for job in iter_swf(cut):
            seen.append(job.job_id)
    assert seen == list(range(1, 11))
    assert err.value.line == lines + 1 and "cannot read" in str(err.value)
    assert read_swf_header(cut).max_procs == 1024  # the header alone is intact

