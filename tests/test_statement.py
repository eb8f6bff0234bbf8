"""The statement that all tentative work goes through: a discarded statement
leaves the table and everything it recorded exactly as found, however its
changes were nested and committed into it; a committed one keeps them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from builders import node_group, site, world
from suanli.scheduling.state import PlacementState
from suanli.scheduling.statement import Statement
from suanli.scheduling.table import Allocation
from suanli.spec.build import load_world

_TABLE = {}
CHANGED = {True: 0, False: 0}


def table():
    if not _TABLE:
        import tempfile
        from pathlib import Path

        tmp = Path(tempfile.mkdtemp())
        path = world(tmp, sites=[site("s", groups=[node_group(count=4, cpu=8, memory="8Gi")])])
        _TABLE["state"] = PlacementState(load_world([path]))
    return _TABLE["state"]


ops = st.lists(st.tuples(st.sampled_from(["take", "give", "count", "nest-commit", "nest-discard"]),
                         st.integers(0, 3), st.integers(1, 2000)), max_size=30)


def apply(stmt: Statement, nodes, counter: list, program) -> None:
    for op, row, milli in program:
        a = Allocation(row, np.array([milli, 1, *([0] * (nodes.free.shape[0] - 2))], np.int64))
        if op == "take":
            stmt.take(nodes, [a])
        elif op == "give":
            stmt.give(nodes, [a])
        elif op == "count":
            counter[0] += milli
            stmt.did(lambda m=milli: counter.__setitem__(0, counter[0] - m))
        else:
            child = Statement(stmt)
            child.take(nodes, [a])
            counter[0] += 1
            child.did(lambda: counter.__setitem__(0, counter[0] - 1))
            child.commit() if op == "nest-commit" else child.discard()


@given(ops)
@settings(max_examples=200, deadline=None, derandomize=True)
def test_a_discarded_statement_leaves_everything_as_it_found_it(program):
    nodes = table().nodes
    before, counter = nodes.free.copy(), [0]
    with Statement() as probe:
        apply(probe, nodes, counter, program)
        changed = not np.array_equal(nodes.free, before) or counter[0] != 0
    assert np.array_equal(nodes.free, before) and counter == [0]
    CHANGED[changed] += 1


def test_the_generated_programs_changed_things_before_they_were_undone():
    assert CHANGED[True] >= 100, CHANGED


def test_a_committed_statement_keeps_its_changes_and_then_belongs_to_its_parent():
    nodes = table().nodes
    before = nodes.free.copy()
    a = Allocation(0, np.array([1000, 1, *([0] * (nodes.free.shape[0] - 2))], np.int64))
    outer = Statement()
    inner = Statement(outer)
    inner.take(nodes, [a])
    inner.commit()
    assert outer.taken == 1 and nodes.free[0, 0] == before[0, 0] - 1000  # kept, now the outer's
    outer.discard()
    assert np.array_equal(nodes.free, before)
    done = Statement()
    done.take(nodes, [a])
    done.commit()
    done.discard()  # nothing left to undo once committed
    assert nodes.free[0, 0] == before[0, 0] - 1000
    nodes.give(a)
