"""Time columns kept as codes into a run's distinct times (``sim.times``):
what is read back is what was written, bit for bit, on random writes."""

from __future__ import annotations

import struct
from array import array

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.sim.times import NONE, Instants, TimeColumn


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


# a clock: mostly the same instant again or a later one, sometimes NaN, an
# earlier time (a record restored), a zero of either sign
steps = st.one_of(
    st.just(("same", 0.0)), st.just(("same", 0.0)),
    st.tuples(st.just("later"), st.floats(0.0, 100.0, allow_nan=False)),
    st.just(("nan", 0.0)),
    st.tuples(st.just("earlier"), st.floats(0.0, 1e6, allow_nan=False)),
    st.sampled_from([("zero", 0.0), ("zero", -0.0)]),
)


SEEN: dict[str, int] = {"repeat": 0, "apart": 0, "nan": 0}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(steps, st.integers(0, 2), st.booleans()), min_size=1, max_size=300))
def _reads_back(ops):
    instants = Instants()
    columns = [TimeColumn(instants) for _ in range(3)]
    reference = [array("d") for _ in range(3)]
    now = 0.0
    seen = SEEN
    for (kind, x), which, overwrite in ops:
        if kind == "later":
            now += x
            t = now
        elif kind == "earlier":
            t = now - x
        elif kind == "nan":
            t = float("nan")
        elif kind == "zero":
            t = x
        else:
            t = now
        col, ref = columns[which], reference[which]
        before = len(instants)
        if overwrite and len(ref):
            i = len(ref) // 2
            col[i] = t
            ref[i] = t
        else:
            col.append(t)
            ref.append(t)
        seen["repeat"] += t == t and len(instants) == before
        seen["nan"] += t != t
        seen["apart"] += len(instants) > before and t < now
    for col, ref in zip(columns, reference):
        assert len(col) == len(ref)
        for i in range(len(ref)):
            assert bits(col[i]) == bits(ref[i]) or (ref[i] != ref[i] and col[i] != col[i]), (i, col[i], ref[i])
            assert col.is_none(i) == (ref[i] != ref[i])
        got = col.numpy()
        want = np.array(ref)
        assert got.dtype == np.float64 and got.tobytes() == want.tobytes() or \
            np.array_equal(got, want, equal_nan=True) and (np.signbit(got) == np.signbit(want)).all()
        if len(ref) > 2:
            assert np.array_equal(col.numpy(1, len(ref) - 1), want[1:-1], equal_nan=True)
    assert (instants.at.tolist() == sorted(instants.at.tolist()))  # the table rises
    assert len(set(bits(v) for v in instants.at)) == len(instants.at)  # each time once


def test_a_time_column_reads_back_what_was_written():
    """Random writes (appends and overwrites) on three columns sharing one
    table: each read, and each NumPy read whole and in part, is the float
    written; not vacuous: times repeat, come out of order, and are NaN."""
    _reads_back()
    assert SEEN["repeat"] > 100 and SEEN["apart"] > 10 and SEEN["nan"] > 10, SEEN


def test_the_cases_are_exercised_and_an_instant_costs_one_entry():
    """Not vacuous: many writes of one instant keep one entry; an earlier
    time not in the table is kept apart, one already there is found."""
    instants = Instants()
    col = TimeColumn(instants)
    for t in (0.0, 0.0, 5.0, 5.0, 5.0, 7.5):
        col.append(t)
    assert len(instants.at) == 3 and col.codes.itemsize == 4
    col.append(5.0)  # in the table: found
    col.append(3.0)  # earlier and new: apart
    col.append(-0.0)  # a zero of the other sign: apart
    col.append(float("nan"))
    assert len(instants.at) == 3 and len(instants._odd) == 2
    assert col.codes[9] == NONE and col.codes[6] == 1 and col[9] != col[9]
    written = (0.0, 0.0, 5.0, 5.0, 5.0, 7.5, 5.0, 3.0, -0.0)
    assert [bits(col[i]) for i in range(9)] == [bits(v) for v in written]
    assert np.signbit(col.numpy()[8]) and col.numpy()[7] == 3.0 and np.isnan(col.numpy()[9])


# ------------------------------------------------------------ sparse lists

from suanli.scheduling.state import SparseList  # noqa: E402

MARK = object()
SPARSE_SEEN = {"freed": 0, "kept": 0}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5000), st.sampled_from(["mark", "mark", "mark", "a", "b"])),
                min_size=1, max_size=400), st.integers(0, 3000))
def _sparse_as_a_list(ops, start):
    sparse, ref = SparseList(MARK), []
    for _ in range(start):  # a run of defaults first: blocks that keep no slots
        sparse.append(MARK)
        ref.append(MARK)
    for write, at, v in ops:
        value = MARK if v == "mark" else v
        if write and ref:
            i = at % len(ref)
            sparse[i] = value
            ref[i] = value
        else:
            sparse.append(value)
            ref.append(value)
        assert len(sparse) == len(ref)
    assert list(sparse) == ref and [sparse[i] for i in range(len(ref))] == ref and sparse[-1] is ref[-1]
    for b, block in enumerate(sparse._blocks):  # a block is kept exactly while it holds something else
        holds = any(x is not MARK for x in ref[b * 1024:(b + 1) * 1024])
        assert (block is not None) == holds
        SPARSE_SEEN["kept" if holds else "freed"] += 1


def test_a_sparse_list_reads_as_a_list_and_keeps_blocks_only_where_needed():
    """Random appends and overwrites: it reads as the list it stands for,
    and a block is kept exactly while one of its slots is not the default
    (not vacuous: blocks of both kinds occur)."""
    _sparse_as_a_list()
    # (both kinds, many times: a run of the draws gave 50 freed blocks, others more than 100)
    assert SPARSE_SEEN["freed"] >= 20 and SPARSE_SEEN["kept"] >= 20, SPARSE_SEEN
    s = SparseList()
    s.append("x")
    s[0] = None  # the one slot back to the default: the block goes
    assert s._blocks == [None] and len(s) == 1 and s[0] is None
