"""An elastic gang is placed at the largest size that every bound allows,
against a brute-force count on small worlds: the room of its best coupling
domain (members a node can hold, summed over the domain's nodes), its
size, and its tenant's quota. Below its minimum it is not placed, and the
first reason of its members names the bound that stopped it.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings, strategies as st

from builders import app, component, gpu, node_group, site, tenant, world
from conftest import schedule_json

TALLY: Counter = Counter()


@st.composite
def cases(draw):
    groups = []
    for j in range(draw(st.integers(1, 4))):
        fabric = draw(st.sampled_from([None, "ib-1", "ib-2"]))
        groups.append({"name": f"g{j}", "count": draw(st.integers(1, 3)), "cpu": draw(st.sampled_from([16, 32, 64])),
                       "gpus": draw(st.sampled_from([2, 4, 8])), "ib": fabric})
    size = draw(st.integers(2, 10))
    least = draw(st.integers(1, size))
    per = {"cpu": draw(st.sampled_from([4, 8, 16])), "gpus": draw(st.sampled_from([1, 2, 4]))}
    quota = draw(st.sampled_from([None, 4, 8, 12, 24]))
    coupling = draw(st.sampled_from([None, "ib"]))
    return groups, size, least, per, quota, coupling


def brute_force(groups, size, least, per, quota, coupling) -> tuple[int, bool]:
    """The largest size every bound allows (0: below the minimum), and
    whether the quota is what bounds it."""
    def holds(g):  # members one node of the group holds
        return min(g["gpus"] // per["gpus"], g["cpu"] // per["cpu"])
    if coupling == "ib":
        domains = {g["ib"] for g in groups if g["ib"]}
        room = max((sum(holds(g) * g["count"] for g in groups if g["ib"] == d) for d in domains), default=0)
    else:
        room = sum(holds(g) * g["count"] for g in groups)
    by_quota = size if quota is None else quota // per["gpus"]
    most = min(size, room, by_quota)
    return (most if most >= least else 0), by_quota < min(size, room)


def docs(tmp_path, groups, size, least, per, quota, coupling):
    ngs = [node_group(g["name"], count=g["count"], cpu=g["cpu"], memory="512Gi",
                      accelerators=[gpu(g["gpus"], "H100", shareable=False)],
                      fabrics={"ib": g["ib"]} if g["ib"] else None) for g in groups]
    comp = component("m", lifetime="job", cpu=per["cpu"], memory="1Gi",
                     accelerators=[{"kind": "gpu", "count": per["gpus"]}], gang={"size": size, "minSize": least},
                     **({"coupling": coupling} if coupling else {}))
    spec = {} if quota is None else {"quota": {"gpu": quota}}
    return world(tmp_path, sites=[site("c", groups=ngs)], tenants=[tenant(**spec)], apps=[app("g", components=[comp])])


@given(cases())
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_an_elastic_gang_takes_the_largest_size_every_bound_allows(tmp_path_factory, case):
    groups, size, least, per, quota, coupling = case
    r = schedule_json(docs(tmp_path_factory.mktemp("g"), *case))
    want, quota_binds = brute_force(*case)
    placed = [p for p in r["placements"] if p["task"].startswith("g/m/")]
    assert len(placed) == want, (case, r["unscheduled"][:1])
    if coupling == "ib" and placed:
        domains = {next(g["ib"] for g in groups if p["node"].startswith(f"c/{g['name']}-")) for p in placed}
        assert len(domains) == 1 and None not in domains
    left = [u for u in r["unscheduled"] if u["task"].startswith("g/m/")]
    assert len(left) == size - want
    if left and quota_binds:  # the quota binds: named first, with its gap
        first = left[0]["why"][0]
        assert first["binding"] and first["code"] == "quota" and first["layer"] == "tenant quota", left[0]
        # in figures: the gpus of every member it was sized for (all when shrunk, its minimum when refused)
        asked = (size if want else least) * per["gpus"] * 1000
        assert (first["resource"], first["requested"], first["allowed"]) == ("gpu", asked, quota * 1000), first
        assert first["gap"] == asked - quota * 1000 > 0 and first["args"]["tenant"] == "t", first
        TALLY["quota binds"] += 1
    TALLY["shrunk" if 0 < want < size else "whole" if want == size else "refused"] += 1


def test_the_generated_gangs_shrink_fill_and_are_refused():
    assert TALLY["shrunk"] >= 10 and TALLY["whole"] >= 10 and TALLY["refused"] >= 10 and TALLY["quota binds"] >= 5, TALLY
