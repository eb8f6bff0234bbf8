"""Why work waits, as data.

``explain`` charges each row to the first check it fails, so the counts say
where the fleet's rows went, not what stops the task: a GPU model that no
node has shows as "58 site not allowed" before "5 gpu model mismatch". The
binding constraint is the one whose relaxation alone would let the task fit:
the check that some rows fail and nothing else. ``Reasons`` keeps the counts
(the ``reasons`` map of every output) and, beside them, that constraint with
its figures; outputs list it first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from suanli.model.quantities import format_amount


class Why(str):
    """A reason's text with its code, as the check that gives it names it:
    the key of the counts (a string, as outputs show it) that also says what
    kind of constraint it is, without reading its words.

    Codes: ``site`` (the tenant's allowed sites), ``selector`` (a component's
    or host group's tier, names, regions, labels), ``private`` (another
    device's own site), ``near`` (beyond the latency bound), ``reach`` (data,
    state or the VC's hosts unreachable), ``arch``, ``kind`` (no such
    accelerator), ``model``, ``shareable``, ``capacity`` (too little of a
    resource, with ``resource``), ``unavailable`` (a node out of service),
    ``in-use`` (a whole node already used), ``anti-affinity``, ``quota``;
    for a unit: ``domain`` (no coupling or affinity domain holds it),
    ``elastic`` (members an elastic gang did without), ``hosts`` and
    ``growth`` (an explicit VC without hosts, or that could not grow)."""

    def __new__(cls, text: str, code: str, resource: str | None = None) -> "Why":
        out = super().__new__(cls, text)
        out.code, out.resource = code, resource
        return out

    def __reduce__(self):
        return Why, (str(self), self.code, self.resource)


def code_of(reason: str) -> str | None:
    return reason.code if isinstance(reason, Why) else None


@dataclass(frozen=True, slots=True)
class Binding:
    """The check that, relaxed alone, lets the task fit on ``nodes`` rows."""

    reason: str  # its key among the counts
    nodes: int  # rows that fail this check and no other (0: a bound on the whole unit, such as a quota)
    resource: str | None = None  # for a capacity check: cpu, memory or an accelerator kind
    column: int = -1  # that resource's column (canonical units below)
    requested: int | None = None
    free: int | None = None  # the most that one of those rows has free
    layer: str = "business"

    @property
    def gap(self) -> int | None:
        """How much more of the resource the best of those rows would need."""
        return None if self.requested is None or self.free is None else self.requested - self.free

    def text(self) -> str:
        """One line: "insufficient cpu: 16 requested, 12 free at best (4 more needed) on 3 nodes"."""
        if not self.nodes:  # a bound on the whole unit (a quota), not on nodes
            return self.reason
        if self.gap is None:
            return f"{self.reason} (the only obstacle on {self.nodes} node{'s' if self.nodes != 1 else ''})"
        c = self.column
        return (f"{self.reason}: {format_amount(c, self.requested)} requested, {format_amount(c, self.free)} free "
                f"at best ({format_amount(c, self.gap)} more needed) on {self.nodes} node{'s' if self.nodes != 1 else ''}")

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Binding":
        """The binding constraint of a ``why`` entry (as outputs wrote it)."""
        resource = d.get("resource")
        column = -1 if resource is None else {"cpu": 0, "memory": 1}.get(resource, 2)  # formats alike past 1
        reason = Why(d["reason"], d["code"], resource) if d.get("code") else d["reason"]
        return Binding(reason, d["nodes"], resource, column, d.get("requested"), d.get("free"),
                       d.get("layer", "business"))

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": str(self.reason), "code": code_of(self.reason), "layer": self.layer,
                               "nodes": self.nodes}
        if self.resource is not None:
            out.update(resource=self.resource, requested=self.requested, free=self.free, gap=self.gap)
        return out


class Reasons(Counter):
    """Rows (or units) per reason, and the binding constraint when there is one."""

    binding: Binding | None = None


def bound(reason: str, layer: str, also: Counter | None = None) -> Reasons:
    """Reasons whose binding constraint is a bound on the whole unit (``reason``,
    decided at ``layer``), with ``also``'s counts after it."""
    out = Reasons({reason: 1})
    if also:
        out.update(also)
    out.binding = Binding(reason, 0, layer=layer)
    return out


def binding_of(reasons: Counter) -> Binding | None:
    return reasons.binding if isinstance(reasons, Reasons) else None


def why_json(reasons: Counter) -> list[dict[str, Any]]:
    """A task's reasons, the binding constraint first (marked, with its
    figures), then the others by rows, then by name."""
    b = binding_of(reasons)
    out = []
    if b is not None:
        out.append({**b.json(), "binding": True, "count": int(reasons.get(b.reason, 0))})
    for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        if b is None or reason != b.reason:
            out.append({"reason": str(reason), "code": code_of(reason), "count": int(n), "binding": False})
    return out
