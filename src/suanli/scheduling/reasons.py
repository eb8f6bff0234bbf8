"""Why work waits, as data.

Every check and bound names what stops a task as a typed reason (``Why``):
a code (what kind of constraint), a detail where a code has several forms,
the resource, and the figures (the tenant, the site, the bound in ms, the
members that fit, the quota's gap). No words are written here: the outputs
(``suanli.phrases``) render a reason's text from its code and figures, for
the JSON, the command line, the report and the API alike.

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
from typing import Any, Union

# the layer that decides each code (the rest: the business layer)
LAYERS = {"quota": "tenant quota", "hosts": "global", "growth": "global"}

Arg = Union[str, int, float, "Why", "Domain", None]


@dataclass(frozen=True, slots=True)
class Domain:
    """What a group of members must share, as a reason names it: coupling
    ``levels`` (one domain of each), an affinity ``scope``, or, for a VC's
    first hosts, a set of mutually ``reachable`` sites; none of them: the
    whole placement (anywhere)."""

    levels: tuple[str, ...] = ()
    scope: str | None = None
    reachable: bool = False

    @property
    def anywhere(self) -> bool:
        return not (self.levels or self.scope or self.reachable)


class Why:
    """One reason a task (or a host) does not fit, as data.

    ``code`` says what kind of constraint it is: ``site`` (the tenant's
    allowed sites), ``selector`` (a component's or host group's tier, names,
    regions, labels), ``private`` (another device's own site), ``near``
    (beyond the latency bound), ``reach`` (data, state or the VC's hosts
    unreachable), ``arch``, ``kind`` (no such accelerator), ``model``,
    ``shareable``, ``capacity`` (too little of ``resource``),
    ``unavailable`` (a node out of service), ``in-use`` (a whole node
    already used), ``anti-affinity``, ``quota``, ``offline`` (the device a
    task must be near is away); for a unit: ``domain`` (no coupling or
    affinity domain holds it), ``elastic`` (members an elastic gang did
    without), ``hosts`` and ``growth`` (an explicit VC without hosts, or
    that could not grow). ``detail`` tells a code's forms apart; ``args``
    are the figures. Equal reasons are one key of the counts."""

    __slots__ = ("code", "detail", "resource", "args", "_key", "_hash")

    def __init__(self, code: str, detail: str | None = None, resource: str | None = None, **args: Arg) -> None:
        self.code, self.detail, self.resource = code, detail, resource
        self.args = tuple(sorted(args.items()))
        self._key = (code, detail, resource, self.args)
        self._hash = hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Why) and self._hash == other._hash and self._key == other._key)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.args)
        return f"Why({self.code!r}, {self.detail!r}, {self.resource!r}{extra})"

    def __reduce__(self):
        return _why, (self.code, self.detail, self.resource, self.args)

    def arg(self, name: str, default: Any = None) -> Any:
        for k, v in self.args:
            if k == name:
                return v
        return default

    @property
    def layer(self) -> str:
        return LAYERS.get(self.code, "business")


def _why(code, detail, resource, args) -> Why:
    return Why(code, detail, resource, **dict(args))


@dataclass(frozen=True, slots=True)
class Binding:
    """The check that, relaxed alone, lets the task fit on ``nodes`` rows; or
    (``nodes`` 0) a bound on the whole unit, such as its tenant's quota."""

    reason: Why  # its key among the counts
    nodes: int
    resource: str | None = None  # for a capacity check or a quota: cpu, memory or an accelerator kind
    requested: int | None = None  # canonical units (cpu millicores, memory MiB, milli-devices)
    free: int | None = None  # a capacity check: the most that one of those rows has free
    allowed: int | None = None  # a quota: what it leaves
    layer: str = "business"
    capacity: int | None = None  # a capacity check: the most one of those rows holds even empty

    @property
    def gap(self) -> int | None:
        """How much more of the resource would be needed."""
        have = self.free if self.free is not None else self.allowed
        return None if self.requested is None or have is None else self.requested - have

    def json(self) -> dict[str, Any]:
        """Its figures (the reason's own entry, with its text, is the output's)."""
        out: dict[str, Any] = {"layer": self.layer, "nodes": self.nodes}
        if self.resource is not None:
            out["resource"] = self.resource
        if self.requested is not None:
            out["requested"] = self.requested
            out["free" if self.free is not None else "allowed"] = self.free if self.free is not None else self.allowed
            out["gap"] = self.gap
            if self.capacity is not None and self.capacity < self.requested:
                out["capacity"] = self.capacity  # it can never fit on those rows, whatever leaves them
        return out


class Reasons(Counter):
    """Rows (or units) per reason, and the binding constraint when there is one."""

    binding: Binding | None = None


def bound(reason: Why, also: Counter | None = None) -> Reasons:
    """Reasons whose binding constraint is a bound on the whole unit
    (``reason``, decided at its layer, with the figures it carries: what it
    asks, what a quota leaves, or the ``most`` any node has), with
    ``also``'s counts after it."""
    out = Reasons({reason: 1})
    if also:
        out.update(also)
    most = reason.arg("most")
    out.binding = Binding(reason, 0, reason.resource, reason.arg("requested"), free=most,
                          allowed=reason.arg("allowed"), layer=reason.layer, capacity=most)
    return out


def binding_of(reasons: Counter) -> Binding | None:
    return reasons.binding if isinstance(reasons, Reasons) else None
