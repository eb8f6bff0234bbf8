"""Reading openb CSVs a column at a time gives what reading them cell by cell
gives: the same arrays (values, dtypes, NaN for empty times), the same line
numbers and, for a bad file, the same error; and the arrivals built from a pod
list are the applications ``_single`` builds, pod by pod.

Random tables mix ordinary cells with awkward ones ("12000.0", blanks, spaces,
unicode digits and spaces, out-of-range numbers, quoted commas and line
breaks), blank lines, rows of the wrong width and Windows line ends.
"""

from __future__ import annotations

import csv
import io
import pickle
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from suanli.model.work import AcceleratorRequest, Resources
from suanli.sim import traces
from suanli.sim.traces import TraceError, load_openb_pods
from suanli.sim.workload import Arrival, _on_site, _single, openb_arrivals
from suanli.spec.build import load_world

POD_HEADER = ",".join(c.name for c in traces._POD_COLS) + "\n"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Awkward cells that are good, then bad ones.
INT_CELLS = (["12000.0", " 42 ", "+5", "1_000", "1e3", "-0", "٣", "\u3000 5", "9223372036854775807"],
             ["", " ", "x", "1.5", "nan", "9223372036854775808", "-9223372036854775809"])  # fmt: skip
FLOAT_CELLS = (["", "", " ", "1.5", "-0", "12000.0", " 8 ", "1_0", "1e5", "٣"],
               ["nan", "inf", "-inf", "1e400", "soon", "0x10"])  # fmt: skip
STR_CELLS = (["", "p0", " padded ", "A10|T4", "a,b", 'say "hi"', "two\nlines", "\u3000x\u2003", "café",
              "\x1fx"], [])  # fmt: skip


def _cells(kind: type) -> st.SearchStrategy[str]:
    # Mostly ordinary cells, so that many tables go through the fast path whole.
    plain = st.integers(0, 10**6).map(str) if kind is not str else st.text("abc-|", max_size=6)
    good = INT_CELLS[0] if kind is int else FLOAT_CELLS[0] if kind is float else STR_CELLS[0]
    return st.one_of(plain, plain, plain, st.sampled_from(good))


@st.composite
def csv_files(draw, cols: tuple[traces._Col, ...]) -> str:
    """A file of good rows, with up to two faults: a bad cell or a row too short."""
    names = [c.name for c in cols if c.required or draw(st.booleans())]
    names += draw(st.lists(st.sampled_from(["extra", "name"]), max_size=2))  # unknown and repeated columns
    names = draw(st.permutations(names))
    kinds = [{c.name: c.kind for c in cols}.get(n, str) for n in names]
    rows: list[list[str] | None] = []  # None: a blank line
    for _ in range(draw(st.integers(0, 12))):
        blank = draw(st.integers(0, 9)) == 0
        rows.append(None if blank else [draw(_cells(kind)) for kind in kinds])
    lines = [i for i, row in enumerate(rows) if row is not None]
    for _ in range(draw(st.integers(0, 2)) if lines else 0):
        row = rows[draw(st.sampled_from(lines))]
        if not row:
            continue
        j = draw(st.integers(0, len(row) - 1))
        wrong = INT_CELLS[1] if kinds[j] is int else FLOAT_CELLS[1] if kinds[j] is float else []
        if wrong and draw(st.booleans()):
            row[j] = draw(st.sampled_from(wrong))
        else:
            row.pop()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=draw(st.sampled_from(["\n", "\r\n"])))
    writer.writerow(names)
    for row in rows:
        if row is None:
            out.write("\n")
        else:
            writer.writerow(row)
    return out.getvalue()


def _read_both(text: str, cols, chunk: int):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        path.write_bytes(text.encode())
        results = []
        for read in (traces._read_csv, traces._read_csv_by_cell):
            try:
                with mock.patch.object(traces, "_CSV_CHUNK", chunk):
                    results.append(read(path, cols))
            except TraceError as exc:
                results.append((str(exc), exc.line, exc.column))
        return results


def _same_tables(got, want) -> None:
    (cols, lines, present), (cols2, lines2, present2) = got, want
    assert present == present2 and lines.dtype == lines2.dtype and lines.tolist() == lines2.tolist()
    for name in cols2:
        a, b = cols[name], cols2[name]
        assert a.dtype == b.dtype and not a.flags.writeable, name
        if a.dtype.kind == "f":  # bit for bit: -0.0 and NaN too
            assert a.view(np.uint64).tolist() == b.view(np.uint64).tolist(), name
        else:
            assert a.tolist() == b.tolist(), name


@pytest.mark.parametrize("cols", [traces._POD_COLS, traces._NODE_COLS], ids=["pods", "nodes"])
@SETTINGS
@given(data=st.data())
def test_reading_by_column_equals_reading_by_cell(cols, data):
    text = data.draw(csv_files(cols))
    chunk = data.draw(st.sampled_from([1, 2, 3, 512]))
    note(repr(text))
    got, want = _read_both(text, cols, chunk)
    if isinstance(want, tuple) and isinstance(want[0], str):
        assert got == want  # the same message, line and column
    else:
        _same_tables(got, want)


def test_ordinary_files_are_read_by_column(tmp_path):
    path = tmp_path / "pods.csv"
    # Windows line ends, "12000.0" and " 500 " counts, empty times; blank lines; several chunks
    rows = [f"p{i},{i}000,{i}.0,1, 500 ,A10|T4,LS,Running,{i},,{'' if i % 3 else i}\r\n" for i in range(1300)]
    path.write_text(POD_HEADER + "".join(rows) + "\n\nlast,1,2,0,0,,BE,Pending,,,\n")
    got = traces._read_csv_by_column(path, traces._POD_COLS)  # no fallback to reading by cell
    _same_tables(got, traces._read_csv_by_cell(path, traces._POD_COLS))
    assert got[1][-1] == 1304 and np.isnan(got[0]["deletion_time"]).all()


def test_the_first_bad_cell_in_file_order_is_reported(tmp_path):
    path = tmp_path / "pods.csv"
    rows = ["p,1,1,0,0,,LS,Running,5,10,5"] * 600
    rows[300] = "p,1,1,0,0,,LS,Running,5,10,later"  # a bad time, then a bad count on a later line
    rows[301] = "p,lots,1,0,0,,LS,Running,5,10,5"
    rows[302] = "p,1,1"
    path.write_text(POD_HEADER + "\n".join(rows) + "\n")
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert (err.value.line, err.value.column) == (302, "scheduled_time")
    assert "not a finite number: 'later'" in str(err.value)


# ------------------------------------------------------------------ arrivals


def test_openb_arrivals_are_the_applications_single_builds(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text(
        POD_HEADER
        + "a,1000,1024,1,500,,LS,Running,5,10,5\n"
        "b,1000,1024,1,500,,LS,Running,5,4,5\n"  # same shape as a; leaves before it comes
        "c,8000,4096,4,1000,A10|T4|A10,LS,Running,1,,\n"
        "d,2000,2048,0,0,,BE,Running,,30,\n"
        "e,2000,2048,2,250,T4,LS,Running,7,9,7\n"
    )
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,T4\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "apiVersion: suanli/v1\nkind: Tenant\nmetadata: {name: t}\n---\n"
        "apiVersion: suanli/v1\nkind: Scenario\nmetadata: {name: s}\nspec:\n  traces:\n"
        "    - {format: openb, tenant: t, nodes: nodes.csv, pods: pods.csv}\n"
    )
    world = load_world([str(scenario)])
    tr = world.scenario.spec.traces[0]
    near = _on_site(world.fleet, "openb")  # the site the trace's nodes make
    want = []
    for pod in load_openb_pods(pods).arrivals():
        accels = ()
        if pod.num_gpu:
            milli = pod.gpu_milli if pod.num_gpu == 1 and pod.gpu_milli < 1000 else 1000 * pod.num_gpu
            accels = (AcceleratorRequest("gpu", pod.models or None, milli),)
        res = Resources(pod.cpu_milli, pod.mem_mib, accels)
        app = _single(pod.name, "t", "pod", res, "service", near=near)
        want.append(Arrival(pod.at_s, app, pod.leave_at_s))
    got = list(openb_arrivals(tr, world.base_dir, world.fleet))
    assert got == want and repr(got) == repr(want)
    assert pickle.loads(pickle.dumps(got)) == want
    assert [a.app.name for a in got] == ["d", "c", "a", "b", "e"]
    shared = got[2].app.components[0].resources is got[3].app.components[0].resources
    assert shared  # pods of one shape share one Resources
