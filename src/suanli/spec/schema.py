"""The YAML documents users write (SPEC.md), as pydantic models.

This module owns the shape of every document kind and the conversion of
quantities into canonical units. Attribute names are snake_case; the YAML
names are their camelCase aliases (``nodeGroups``, ``maxRttMs``). Unknown
fields are errors. Cross-document references are checked in ``refs.py``.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from suanli.model import quantities as q
from suanli.model.work import EACH_SITE, MAX_RESTARTS  # EACH_SITE: `{site}`, in an application with `each`
from suanli.spec.problems import FieldError

NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=128)]
SITE_REF_PATTERN = r"^(?:[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?|\{site\})$"
SiteRef = Annotated[str, Field(pattern=SITE_REF_PATTERN, max_length=128)]

CpuMilli = Annotated[int, BeforeValidator(q.parse_cpu_milli)]
MemMiB = Annotated[int, BeforeValidator(q.parse_mem_mib)]
DeviceMilli = Annotated[int, BeforeValidator(q.parse_device_milli)]
BandwidthMbps = Annotated[float, BeforeValidator(q.parse_bandwidth_mbps)]
DurationS = Annotated[float, BeforeValidator(q.parse_duration_s)]
RatePerS = Annotated[float, BeforeValidator(q.parse_rate_per_s)]
DistributionQ = Annotated[q.Distribution, BeforeValidator(q.parse_distribution)]
CheckpointS = Annotated[float, BeforeValidator(lambda v: q.parse_duration_s(v, q.CHECKPOINT))]
StopGraceS = Annotated[float, BeforeValidator(lambda v: q.parse_duration_s(v, q.STOP_GRACE))]


def bounded(tp: type, limit: q.Limit, *constraints: Any) -> Any:
    """``tp`` (int or float) within ``limit``, after ``constraints`` (Field(ge=...)).

    A number above the limit is refused before pydantic converts it (an int
    of hundreds of digits is not a float), and the converted value is checked
    again (a numeric string, a value below the limit); ``constraints`` speak
    first for what they cover ("expected a number > 0")."""

    def too_big(value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit.most:
            limit.check(value)
        return value

    return Annotated[(tp, *constraints, AfterValidator(limit.validator()), BeforeValidator(too_big))]


def _listify(value: Any) -> Any:
    """Accept a single string where a list of strings is expected."""
    return [value] if isinstance(value, str) else value


StrList = Annotated[list[str], BeforeValidator(_listify)]

Tier = Literal["cloud", "edge", "device"]
Coupling = Literal["coherent", "ib", "roce", "ethernet", "wan"]
COUPLING_LEVELS: tuple[str, ...] = ("coherent", "ib", "roce", "ethernet", "wan")


def _unique(items: list, attr: str, what: str, problem: str) -> None:
    """Raise when two items share ``attr`` (the first such value is named)."""
    seen: set[str] = set()
    for item in items:
        key = getattr(item, attr)
        if key in seen:
            raise ValueError(f"{what} {key!r} {problem}")
        seen.add(key)


class Base(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=False,  # only the YAML (camelCase) names are accepted
        frozen=True,
    )


# ---------------------------------------------------------------- Fleet


RESERVED_KINDS = ("cpu", "memory")  # resource names that an accelerator kind may not take


def _not_reserved(kind: str) -> str:
    if kind in RESERVED_KINDS:
        raise ValueError(f"{kind!r} names a resource, not an accelerator kind; use e.g. gpu, npu, dsa")
    return kind


AcceleratorKind = Annotated[Name, AfterValidator(_not_reserved)]


# a Container Device Interface kind: a vendor's domain, then the class of its devices
CDI_KIND = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?\.[a-z]+/[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?$"


class DeviceSpec(Base):
    """Accelerators on every node of a node group."""

    kind: AcceleratorKind
    model: Name
    count: Annotated[int, Field(ge=1, le=64)]
    memory: MemMiB | None = None
    shareable: bool = False
    cdi: Annotated[str, Field(pattern=CDI_KIND, max_length=253)] | None = Field(
        None, description="the devices' CDI kind (VENDOR/CLASS, e.g. nvidia.com/gpu): a container given device i "
        "of these is given VENDOR/CLASS=i by its runtime")


class FabricsSpec(Base):
    coherent: Name | None = None
    ib: Name | None = None
    roce: Name | None = None
    ethernet: Name | None = None


class NodeGroupSpec(Base):
    name: Name
    count: bounded(int, q.NODES, Field(ge=0))
    arch: Name
    cpu: CpuMilli
    memory: MemMiB
    accelerators: list[DeviceSpec] = Field(default_factory=list)
    fabrics: FabricsSpec = FabricsSpec()
    labels: dict[str, str] = Field(default_factory=dict)
    cost_per_hour: bounded(float, q.COST_PER_HOUR, Field(ge=0)) | None = None

    @field_validator("accelerators")
    @classmethod
    def _one_entry_per_kind(cls, value: list[DeviceSpec]) -> list[DeviceSpec]:
        _unique(value, "kind", "accelerator kind", "is listed twice; use one entry per kind")
        return value


class AgentDeviceSpec(Base):
    """The most devices of a kind that one agent's node may claim."""

    kind: AcceleratorKind
    count: Annotated[int, Field(ge=1, le=64)]


class AgentNodeSpec(Base):
    """The most that one agent's node may claim (a kind not listed: none of it)."""

    cpu: CpuMilli
    memory: MemMiB
    accelerators: list[AgentDeviceSpec] = Field(default_factory=list)

    @field_validator("accelerators")
    @classmethod
    def _one_entry_per_kind(cls, value: list[AgentDeviceSpec]) -> list[AgentDeviceSpec]:
        _unique(value, "kind", "accelerator kind", "is listed twice; use one entry per kind")
        return value


class SiteAgentsSpec(Base):
    """What nodes that register themselves (``suanli agent``) may bring to a site:
    how many it takes (none: as many as the agents' tokens allow), and the most
    one may claim (none: what the site's largest node group has)."""

    nodes: bounded(int, q.NODES, Field(ge=0)) | None = None
    node: AgentNodeSpec | None = None


class SiteSpec(Base):
    name: Name
    tier: Tier
    region: str = ""
    intra_site_rtt_ms: bounded(float, q.RTT_MS, Field(ge=0)) = 0.2
    labels: dict[str, str] = Field(default_factory=dict)
    node_groups: list[NodeGroupSpec] = Field(default_factory=list)
    agents: SiteAgentsSpec | None = None
    transit: bool | None = None  # relays paths between other sites (default: a device does not, others do)

    @field_validator("node_groups")
    @classmethod
    def _unique_groups(cls, value: list[NodeGroupSpec]) -> list[NodeGroupSpec]:
        _unique(value, "name", "node group name", "is used twice in this site")
        return value


class LinkSpec(Base):
    between: tuple[Name, Name]
    rtt_ms: bounded(float, q.RTT_MS, Field(ge=0))
    bandwidth: BandwidthMbps

    @field_validator("between")
    @classmethod
    def _two_sites(cls, value: tuple[str, str]) -> tuple[str, str]:
        if value[0] == value[1]:
            raise ValueError(f"a link joins two different sites, got {value[0]!r} twice")
        return value


class SelectorSpec(Base):
    """Which nodes a host group may use; every given criterion must hold."""

    tier: Annotated[list[Tier], BeforeValidator(_listify)] | None = None
    names: StrList | None = None
    regions: StrList | None = None
    labels: dict[str, str] = Field(default_factory=dict)


RttSpread = Annotated[q.Spread, BeforeValidator(
    lambda v: q.parse_spread(v, q.parse_rtt_ms, q.RTT_MS, "an rtt in ms, e.g. 2 or uniform(1, 5)"))]
BandwidthSpread = Annotated[q.Spread, BeforeValidator(
    lambda v: q.parse_spread(v, q.parse_bandwidth_mbps, q.BANDWIDTH, "a bandwidth, e.g. 100Mbps or uniform(50Mbps, 1Gbps)"))]


def _name_pattern(value: Any) -> Any:
    from suanli.model.sites import NamePattern

    if not isinstance(value, str):
        raise ValueError(f"expected {NamePattern.FORM}")
    pattern = NamePattern.parse(value)
    import re

    if re.fullmatch(NAME_PATTERN, pattern.name(0)) is None or len(pattern.name(0)) > 128:
        raise ValueError(f"{value!r} does not make site names: letters, digits, '.', '_' and '-', "
                         "starting and ending with a letter or digit, at most 128 characters")
    return value


class AttachSpec(Base):
    """How each site of a population links to the listed sites: ``homes``
    links to distinct sites chosen among those the selector ``to`` picks,
    in proportion to ``weights`` (glob -> weight; a site no glob names weighs 1)."""

    to: SelectorSpec
    homes: Annotated[int, Field(ge=1, le=q.HOMES)] = 1
    weights: dict[str, bounded(float, q.ATTACH_WEIGHT, Field(ge=0))] = Field(default_factory=dict)
    rtt_ms: RttSpread
    bandwidth: BandwidthSpread

    @model_validator(mode="before")
    @classmethod
    def _rejoin(cls, value: Any) -> Any:
        return rejoin_flow_split(value)  # {rttMs: uniform(1, 4)} in a flow mapping


class PopulationSpec(Base):
    """``count`` sites named by ``sites`` (``car-######``), each with the
    template's node groups and the links ``attach`` draws for it."""

    name: Name
    count: bounded(int, q.POPULATION, Field(ge=1))
    sites: Annotated[str, AfterValidator(_name_pattern)]
    tier: Tier = "device"
    region: str | None = None  # None: the region of the first site it attaches to
    intra_site_rtt_ms: bounded(float, q.RTT_MS, Field(ge=0)) = 0.2
    labels: dict[str, str] = Field(default_factory=dict)
    node_groups: Annotated[list[NodeGroupSpec], Field(min_length=1)]
    attach: AttachSpec | None = None
    private: bool = False  # a site runs only work bound near it (the device's own), never others'
    transit: bool | None = None  # its sites relay paths between others (default: devices do not)
    seed: bounded(int, q.SEED, Field(ge=0)) = 0

    @field_validator("node_groups")
    @classmethod
    def _unique_groups(cls, value: list[NodeGroupSpec]) -> list[NodeGroupSpec]:
        _unique(value, "name", "node group name", "is used twice in this population")
        return value

    @model_validator(mode="after")
    def _pattern_holds_count(self) -> "PopulationSpec":
        from suanli.model.sites import NamePattern

        width = NamePattern.parse(self.sites).width
        if len(str(self.count - 1)) > width:
            raise FieldError(("sites",), f"{self.sites!r} has {width} '#' for the index, too few for "
                                         f"{self.count} sites: give at least {len(str(self.count - 1))}")
        return self


class FleetSpec(Base):
    sites: list[SiteSpec] = Field(default_factory=list)
    links: list[LinkSpec] = Field(default_factory=list)
    populations: list[PopulationSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some_sites(self) -> "FleetSpec":
        if not self.sites and not self.populations:
            raise FieldError(("sites",), "a fleet needs at least one site (in sites or populations)")
        return self

    @field_validator("populations")
    @classmethod
    def _unique_populations(cls, value: list[PopulationSpec]) -> list[PopulationSpec]:
        _unique(value, "name", "population name", "is used twice")
        return value


# ---------------------------------------------------------------- Tenant


class TenantSpec(Base):
    weight: bounded(float, q.WEIGHT, Field(gt=0)) = 1.0
    quota: dict[str, int] | None = None
    allowed_sites: StrList = ["*"]
    # the admin's ceiling on the tenant's priorities: above it an application is
    # refused; against other tenants a priority counts up to it (None: 0)
    max_priority: bounded(int, q.MAX_PRIORITY, Field(ge=0)) | None = None
    # a cohort: tenants that lend one another the quota they do not use
    cohort: Name | None = None
    borrowing_limit: dict[str, int] | None = None  # at most this much above its quota (default: what the cohort lends)
    lending_limit: dict[str, int] | None = None  # at most this much of its quota lent (default: all of it)
    # evict work running on borrowed quota when it needs its own back: any, lowerPriority, never
    reclaim_within_cohort: Literal["any", "lowerPriority", "never"] = "any"

    @field_validator("quota", "borrowing_limit", "lending_limit", mode="before")
    @classmethod
    def _parse_quota(cls, value: Any, info: ValidationInfo) -> Any:
        """cpu and memory in their units; any other key is an accelerator kind (device count)."""
        if value is None:
            return None
        if not isinstance(value, dict):
            name = to_camel(info.field_name)
            raise ValueError(f"{name} is a mapping such as {{cpu: 2000, memory: 8Ti, gpu: 128}}")
        out: dict[str, int] = {}
        for key, raw in value.items():
            try:
                if key == "cpu":
                    out[key] = q.parse_cpu_milli(raw, q.MAX_QUOTA_CPU)
                elif key == "memory":
                    out[key] = q.parse_mem_mib(raw, q.MAX_QUOTA_MEMORY)
                elif raw == 0 and not isinstance(raw, bool):  # none of that kind (a limit: none borrowed or lent)
                    out[str(key)] = 0
                else:
                    out[str(key)] = q.parse_device_milli(raw, q.MAX_QUOTA_DEVICES)
            except q.QuantityError as exc:
                raise FieldError((key,), str(exc)) from None
        return out

    @model_validator(mode="after")
    def _cohort_limits(self) -> "TenantSpec":
        """Limits are a cohort's: without one there is nothing to borrow or
        lend; a tenant lends only what its quota names."""
        for name, limit in (("borrowingLimit", self.borrowing_limit), ("lendingLimit", self.lending_limit)):
            if limit and self.cohort is None:
                raise FieldError((name,), f"{name} needs a cohort to borrow from and lend to: set cohort")
        if self.cohort is not None and not self.quota:
            raise FieldError(("cohort",), "a tenant in a cohort needs a quota: a cohort lends and borrows quota")
        for key in (self.lending_limit or {}):
            if key not in (self.quota or {}):
                raise FieldError(("lendingLimit", key), f"lends {key}, which its quota does not name: "
                                 f"a tenant lends only its own quota")
        for key in (self.borrowing_limit or {}):
            if key not in (self.quota or {}):
                raise FieldError(("borrowingLimit", key), f"borrows {key}, which its quota does not name: "
                                 f"it uses any amount of {key} without borrowing")
        return self


# ---------------------------------------------------------------- shared by VCs and apps


class AcceleratorDemandSpec(Base):
    kind: AcceleratorKind
    model: StrList | None = None
    count: DeviceMilli = 1000


class ResourcesSpec(Base):
    cpu: CpuMilli = 0
    memory: MemMiB = 0
    accelerators: list[AcceleratorDemandSpec] = Field(default_factory=list)
    whole: bool = False  # host groups only: `resources: whole` takes a whole node

    @model_validator(mode="after")
    def _whole_alone(self) -> "ResourcesSpec":
        if self.whole and (self.cpu or self.memory or self.accelerators):
            raise ValueError("resources: whole takes the whole node; give no cpu, memory or accelerators")
        return self

    @field_validator("accelerators")
    @classmethod
    def _one_entry_per_kind(
        cls, value: list[AcceleratorDemandSpec]
    ) -> list[AcceleratorDemandSpec]:
        _unique(value, "kind", "accelerator kind", "is listed twice; use one entry per kind")
        return value


class NearSpec(Base):
    site: SiteRef
    max_rtt_ms: bounded(float, q.RTT_MS, Field(ge=0)) | None = None


class PlatformSpec(Base):
    arch: Annotated[StrList, Field(min_length=1)]


# ---------------------------------------------------------------- VirtualCluster


class HostGroupSpec(Base):
    name: Name
    count: bounded(int, q.HOSTS, Field(ge=0)) | None = None
    min: bounded(int, q.HOSTS, Field(ge=0)) | None = None
    max: bounded(int, q.HOSTS, Field(ge=0)) | None = None
    resources: ResourcesSpec
    coupling: Coupling | None = None
    sites: SelectorSpec = SelectorSpec()
    near: NearSpec | None = None
    platform: PlatformSpec | None = None

    @field_validator("resources", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        return {"whole": True} if value == "whole" else value

    @model_validator(mode="after")
    def _fixed_or_elastic(self) -> "HostGroupSpec":
        if self.count is not None and (self.min is not None or self.max is not None):
            raise ValueError("a host group has either count (fixed) or min/max (elastic), not both")
        if self.count is None and self.max is None:
            raise ValueError("a host group needs count (fixed) or max (elastic, with optional min)")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise FieldError(("min",), f"min {self.min} is above max {self.max}")
        return self

    @property
    def elastic(self) -> bool:
        return self.count is None

    @property
    def initial(self) -> int:
        return self.count if self.count is not None else (self.min or 0)


class AutoscaleSpec(Base):
    scale_down_after: DurationS = 300.0


class VirtualClusterSpec(Base):
    host_groups: Annotated[list[HostGroupSpec], Field(min_length=1)]
    autoscale: AutoscaleSpec = AutoscaleSpec()

    @field_validator("host_groups")
    @classmethod
    def _unique(cls, value: list[HostGroupSpec]) -> list[HostGroupSpec]:
        _unique(value, "name", "host group name", "is used twice")
        return value


# ---------------------------------------------------------------- Application


class GangSpec(Base):
    size: bounded(int, q.MEMBERS, Field(ge=1))
    min_size: bounded(int, q.MEMBERS, Field(ge=1)) | None = None
    # an elastic policy (policy.elastic) may resize a running gang between minSize and maxSize
    # (default: size); each resize checkpoints the gang and restarts it at the new width
    max_size: bounded(int, q.MEMBERS, Field(ge=1)) | None = None
    resize_cost: DurationS = 0.0  # seconds a resize stops progress, besides moving the state

    @model_validator(mode="after")
    def _min_le_size(self) -> "GangSpec":
        if self.min_size is not None and self.min_size > self.size:
            raise FieldError(("minSize",), f"minSize {self.min_size} is above size {self.size}")
        if self.max_size is not None and self.max_size < self.size:
            raise FieldError(("maxSize",), f"maxSize {self.max_size} is below size {self.size}")
        if self.resize_cost < 0:
            raise FieldError(("resizeCost",), f"a resize cannot cost less than nothing, got {self.resize_cost}")
        return self


class DecomposeSpec(Base):
    """A job split into ``parts`` equal parts, of which ``minParallel`` up to
    all run at a time: in parallel on much hardware, in series on little."""

    parts: bounded(int, q.MEMBERS, Field(ge=2))
    min_parallel: bounded(int, q.MEMBERS, Field(ge=1)) = 1

    @model_validator(mode="after")
    def _min_le_parts(self) -> "DecomposeSpec":
        if self.min_parallel > self.parts:
            raise FieldError(("minParallel",), f"minParallel {self.min_parallel} is above parts {self.parts}")
        return self


class CommunicationSpec(Base):
    step: DurationS  # one step's compute on one member
    per_step: dict[Literal["coherent", "ib", "roce", "ethernet"], DurationS]  # synchronisation a step, by fabric

    @model_validator(mode="after")
    def _positive(self) -> "CommunicationSpec":
        if self.step <= 0:
            raise FieldError(("step",), f"a step takes some time, got {self.step}")
        if not self.per_step:
            raise FieldError(("perStep",), "give the time a step's synchronisation takes on at least one fabric")
        for fabric, s in self.per_step.items():
            if s < 0:
                raise FieldError(("perStep", fabric), f"a synchronisation cannot take less than nothing, got {s}")
        return self


def _speedup_table(value: Any) -> Any:
    if not isinstance(value, dict) or not value:
        raise ValueError("expected speed-ups by members, like {1: 1.0, 2: 1.9, 4: 3.5}")
    out = {}
    for k, v in value.items():
        try:
            members = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"a key is a number of members, got {k!r}") from None
        if members < 1 or str(members) != str(k).strip():
            raise ValueError(f"a key is a number of members (1 or more), got {k!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"the speed-up at {members} members is a number above 0, got {v!r}")
        out[members] = float(v)
    return dict(sorted(out.items()))


def _profile_dir(value: Any, info: ValidationInfo) -> Any:
    """A profile's directory, relative to the document's file."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected the path of a profile's directory")
    base = (info.context or {}).get("dir") if info.context else None
    path = os.path.normpath(os.path.join(base, value)) if base and not os.path.isabs(value) else value
    if not os.path.isfile(os.path.join(path, "placements.csv")):
        raise ValueError(f"no profile at {value!r}: a directory with placements.csv, scalability.csv and "
                         "validation-BATCH.csv files (paths are relative to the document's file)")
    return path


class ScalingSpec(Base):
    """How fast a job's work goes on an allocation (``model/speedup.py``): the
    formula with ``efficiency`` (the default), a measured ``table``, Amdahl's
    ``serialFraction`` with an optional ``communication`` cost, or a measured
    deep-learning ``profile`` (with an optional fixed ``batchSize``)."""

    efficiency: bounded(float, q.EFFICIENCY, Field(gt=0, le=1)) = 1.0
    table: Annotated[dict[int, float], BeforeValidator(_speedup_table)] | None = None
    serial_fraction: Annotated[float, Field(ge=0, lt=1)] | None = None
    communication: CommunicationSpec | None = None
    profile: Annotated[str, BeforeValidator(_profile_dir)] | None = None
    batch_size: bounded(int, q.MEMBERS, Field(ge=1)) | None = None

    @model_validator(mode="after")
    def _one_model(self) -> "ScalingSpec":
        given = [k for k, v in (("efficiency", self.efficiency if "efficiency" in self.model_fields_set else None),
                                ("table", self.table), ("serialFraction", self.serial_fraction),
                                ("profile", self.profile)) if v is not None]
        if self.communication is not None and self.serial_fraction is None and "serialFraction" not in given:
            given.append("communication")
        if len(given) > 1:
            raise FieldError((given[1],), f"one speed-up model a component: {given[0]} or {given[1]}, not both")
        if self.batch_size is not None and self.profile is None:
            raise FieldError(("batchSize",), "batchSize is the batch a measured profile runs at: give profile too")
        return self

    @property
    def model(self) -> str:
        if self.table is not None:
            return "table"
        if self.profile is not None:
            return "profile"
        if self.serial_fraction is not None or self.communication is not None:
            return "amdahl"
        return "formula"


class StateSpec(Base):
    kind: Literal["stateless", "stateful"] = "stateless"
    size: MemMiB = 0
    checkpoint_every: CheckpointS | None = None

    @model_validator(mode="after")
    def _stateful_fields(self) -> "StateSpec":
        if self.kind == "stateless" and (self.size or self.checkpoint_every):
            raise ValueError("size and checkpointEvery apply to kind: stateful")
        return self


class DataSpec(Base):
    source: SiteRef | None = None
    sink: SiteRef | None = None


class AffinitySpec(Base):
    group: Name
    scope: Literal["node", "site", "reachable", "fabric"] = "site"


class AntiAffinitySpec(Base):
    group: Name
    scope: Literal["node", "site"] = "node"


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


# an OCI image reference as podman takes it: [registry[:port]/]path[:tag][@digest]
IMAGE_REF = re.compile(r"[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
                       r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?")


def _image_ref(value: str) -> str:
    if len(value) > 255 or not IMAGE_REF.fullmatch(value):
        raise ValueError(f"{value!r} is not an image reference: [registry[:port]/]path[:tag][@sha256:digest], "
                         f"in lower case, e.g. registry.example:5000/team/app:1.2")
    return value


ImageRef = Annotated[str, AfterValidator(_image_ref)]


ProbeS = Annotated[float, BeforeValidator(lambda v: q.parse_duration_s(v, q.STOP_GRACE))]  # at most an hour


class HttpProbeSpec(Base):
    port: Annotated[int, Field(ge=1, le=65535)]
    path: Annotated[str, Field(pattern=r"^/[^\s]*$", max_length=1000)] = "/"


class TcpProbeSpec(Base):
    port: Annotated[int, Field(ge=1, le=65535)]


class ProbeSpec(Base):
    """A check of a running task (as Kubernetes has them): a command that
    exits 0 (``exec``, run as the task, where it runs), an HTTP GET on the
    task's machine answered 200-399 (``http``), or a TCP port that accepts
    (``tcp``), every ``period`` after ``initialDelay``, each within
    ``timeout``; ``failureThreshold`` failures in a row fail it, and
    ``successThreshold`` successes in a row pass it."""

    exec: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    http: HttpProbeSpec | None = None
    tcp: TcpProbeSpec | None = None
    initial_delay: ProbeS = 0.0
    period: Annotated[ProbeS, Field(gt=0)] = 10.0
    timeout: Annotated[ProbeS, Field(gt=0)] = 1.0
    failure_threshold: Annotated[int, Field(ge=1, le=1000)] = 3
    success_threshold: Annotated[int, Field(ge=1, le=1000)] = 1

    @model_validator(mode="after")
    def _one_check(self) -> "ProbeSpec":
        given = [k for k in ("exec", "http", "tcp") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a probe is one of exec, http and tcp; got {', '.join(given) or 'none'}")
        return self


class RunSpec(Base):
    """What a real executor runs for each of the component's tasks: a
    command on the node, or an image (one, or one per arch) whose container
    runs it (its own command when ``command`` is left out)."""

    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    image: ImageRef | None = None
    images: Annotated[dict[Annotated[str, Field(min_length=1)], ImageRef], Field(min_length=1)] | None = None
    env: dict[Annotated[str, Field(pattern=ENV_NAME)], str] = Field(default_factory=dict)
    restart: Literal["always", "onFailure", "never"] | None = None  # default: services always, jobs never
    max_restarts: bounded(int, q.RESTARTS, Field(ge=0)) = MAX_RESTARTS
    stop_grace: Annotated[StopGraceS, Field(gt=0)] = 10.0
    readiness: ProbeSpec | None = None  # until it passes, a task is running but not ready (not serving)
    liveness: ProbeSpec | None = None  # when it fails, the task is killed, and its restart policy applies

    @field_validator("env")
    @classmethod
    def _not_ours(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key.startswith("SUANLI_"):
                raise ValueError(f"{key}: names starting SUANLI_ are set by the executor")
        return value

    @model_validator(mode="after")
    def _what_runs(self) -> "RunSpec":
        if self.image is not None and self.images is not None:
            raise ValueError("run has either image (one for every arch) or images (one per arch), not both")
        if self.command is None and self.image is None and self.images is None:
            raise ValueError("run needs a command, or an image (image, or images by arch) whose own command runs")
        return self


class ComponentSpec(Base):
    name: Name
    lifetime: Literal["job", "service"] = "job"
    replicas: bounded(int, q.MEMBERS, Field(ge=0)) | None = None
    gang: GangSpec | None = None
    coupling: Coupling | None = None
    resources: ResourcesSpec = ResourcesSpec()
    work: DurationS | None = None
    duration: DurationS | None = None
    time_limit: DurationS | None = None  # a job's expected run as its user states it (backfill plans with it)
    scaling: ScalingSpec = ScalingSpec()
    decompose: DecomposeSpec | None = None  # a job run as parts, some at a time (time for space)
    state: StateSpec = StateSpec()
    platform: PlatformSpec | None = None
    data: DataSpec | None = None
    near: NearSpec | None = None
    sites: SelectorSpec | None = None  # where its tasks may go: tier, names, regions, labels (as a host group's)
    affinity: AffinitySpec | None = None
    anti_affinity: AntiAffinitySpec | None = None
    priority: bounded(int, q.PRIORITY) | None = None
    preemptible: bool | None = None
    run: RunSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "ComponentSpec":
        if self.resources.whole:
            raise ValueError("resources: whole is for host groups; a task states cpu, memory, accelerators")
        if self.gang is not None and self.replicas is not None:
            raise ValueError("a component has either replicas (independent tasks) or gang, not both")
        if self.coupling is not None and self.gang is None:
            raise ValueError("coupling applies to gang members; add gang or remove coupling")
        if self.work is not None and self.duration is not None:
            raise ValueError("a job has either work (scales with parallelism) or duration, not both")
        if self.lifetime == "service" and (self.work is not None or self.duration is not None
                                           or self.time_limit is not None):
            raise ValueError("a service runs until deleted; work, duration and timeLimit apply to jobs")
        if self.scaling.profile is not None:
            if self.lifetime != "job":
                raise FieldError(("scaling", "profile"), "a measured profile's work ends: it applies to jobs")
            if self.work is not None or self.duration is not None:
                raise FieldError(("work" if self.work is not None else "duration",),
                                 "a job with a measured profile does the profile's work (its epochs): "
                                 "give no work or duration")
        elif self.lifetime == "job" and self.work is None and self.duration is None:
            raise ValueError("a job needs duration (fixed length) or work (total task-time)")
        if self.decompose is not None:
            if self.lifetime != "job":
                raise FieldError(("decompose",), "a service does not end: only a job's work splits into parts")
            if self.gang is not None or self.replicas is not None:
                raise FieldError(("decompose",), "a job split into parts is one job: give no gang or replicas")
            if self.work is None:
                raise FieldError(("decompose",), "a job split into parts gives its work (the task-time of all "
                                                 "its parts), not a duration")
            if self.scaling.model != "formula" or "efficiency" in self.scaling.model_fields_set:
                raise FieldError(("scaling",), "parts run alone, each at its own speed: give no speed-up with "
                                               "decompose")
        if self.gang is None and self.decompose is None and self.scaling.model != "formula":
            raise FieldError(("scaling",), "a speed-up is over a gang's members: add gang (replicas run alone)")
        return self

    @property
    def size(self) -> int:
        if self.decompose is not None:
            return self.decompose.parts
        if self.gang is not None:
            return self.gang.size
        return 1 if self.replicas is None else self.replicas


def _share_or_count(value: Any) -> Any:
    if isinstance(value, str):
        if not re.fullmatch(r"(100|[1-9]?[0-9])%", value.strip()):
            raise ValueError(f"{value!r}: give a count of replicas (2) or a percentage of them (25%)")
        return value.strip()
    return value


ShareOrCount = Annotated[Union[Annotated[int, Field(ge=0, le=q.APP_TASKS)], str], BeforeValidator(_share_or_count)]


class UpdateSpec(Base):
    """How a changed application is rolled out to its running replicas (under
    ``serve``): a replica is replaced in place (its name and state kept),
    and at most ``maxUnavailable`` of a component's replicas are not ready at
    once (a percentage rounds down, and is at least one). A service without
    state may run up to ``maxSurge`` extra replicas of the new version
    meanwhile (a percentage rounds up; 0: none), withdrawn once it is rolled
    out: they count as ready replicas, so the old ones are replaced sooner."""

    max_unavailable: ShareOrCount = "25%"
    max_surge: ShareOrCount = "25%"


class ApplicationSpec(Base):
    # one application per site of this population, named APP.SITE; "{site}"
    # in near.site, data.source and data.sink stands for that site
    each: Name | None = None
    virtual_cluster: Name | None = None
    priority: bounded(int, q.PRIORITY) = 0
    preemptible: bool = True
    update: UpdateSpec = UpdateSpec()
    components: Annotated[list[ComponentSpec], Field(min_length=1)]

    @field_validator("components")
    @classmethod
    def _unique(cls, value: list[ComponentSpec]) -> list[ComponentSpec]:
        _unique(value, "name", "component name", "is used twice")
        if sum(c.size for c in value) > q.APP_TASKS:
            raise ValueError(f"the components have {sum(c.size for c in value)} tasks together; "
                             f"an application has at most {q.APP_TASKS}")
        for field, what in (("affinity", "affinity"), ("anti_affinity", "antiAffinity")):
            scopes: dict[str, tuple[str, str]] = {}  # group -> (first component, its scope)
            for i, c in enumerate(value):
                rule = getattr(c, field)
                if rule is None:
                    continue
                first = scopes.setdefault(rule.group, (c.name, rule.scope))
                if first[1] != rule.scope:
                    raise FieldError(
                        (i, what, "scope"),
                        f"{what} group {rule.group!r} has scope {first[1]!r} in component "
                        f"{first[0]!r}; one group has one scope, got {rule.scope!r}",
                    )
        return value


# ---------------------------------------------------------------- Scenario


def rejoin_flow_split(value: Any) -> Any:
    """Undo YAML's split of ``{duration: lognormal(30m, 0.6)}`` at the comma.

    In a flow mapping the comma ends the entry, so YAML reads
    ``{'duration': 'lognormal(30m', '0.6)': None}``. The pieces are glued back
    while a value has an unclosed parenthesis and the next keys have no value.
    """
    if not isinstance(value, dict) or None not in value.values():  # (nothing split: no key without a value)
        return value
    out: dict[Any, Any] = {}
    items = list(value.items())
    i = 0
    while i < len(items):
        key, val = items[i]
        i += 1
        while (
            isinstance(val, str)
            and val.count("(") > val.count(")")
            and i < len(items)
            and items[i][1] is None
        ):
            val = f"{val}, {items[i][0]}"
            i += 1
        out[key] = val
    return out



class ArrivalSpec(Base):
    """When an application arrives. For one made per site (``each``): which
    ``share`` of its copies arrive, spread at random over ``over`` from
    ``at``, each leaving after a ``stay`` drawn for it (default: all, at
    ``at``, for good)."""

    at: DurationS = 0.0
    app: Name
    share: bounded(float, q.SHARE, Field(gt=0)) | None = None
    over: DurationS | None = None
    stay: DistributionQ | None = None

    @model_validator(mode="before")
    @classmethod
    def _rejoin(cls, value: Any) -> Any:
        return rejoin_flow_split(value)  # {rttMs: uniform(1, 4)} in a flow mapping


class GeneratorSpec(Base):
    name: Name
    tenant: Name
    rate: RatePerS
    start: DurationS = 0.0
    until: DurationS | None = None
    template: ApplicationSpec
    jitter: dict[Literal["duration", "work"], DistributionQ] = Field(default_factory=dict)

    @field_validator("jitter", mode="before")
    @classmethod
    def _rejoin(cls, value: Any) -> Any:
        return rejoin_flow_split(value)


class TraceSpec(Base):
    format: Literal["openb", "swf"]
    tenant: Name
    nodes: str | None = None
    pods: str | None = None
    path: str | None = None
    site: Name | None = None

    @model_validator(mode="after")
    def _fields_for_format(self) -> "TraceSpec":
        if self.format == "openb":
            if self.pods is None:
                raise ValueError("an openb trace needs pods (and usually nodes)")
            if self.path is not None:
                raise ValueError("an openb trace takes nodes and pods, not path")
        else:
            if self.path is None or self.site is None:
                raise ValueError("an swf trace needs path and site")
            if self.nodes is not None or self.pods is not None:
                raise ValueError("an swf trace takes path and site, not nodes or pods")
        return self


class _EventBase(Base):
    at: DurationS


class DeleteEvent(_EventBase):
    kind: Literal["delete"]
    app: Name


class NodeDownEvent(_EventBase):
    kind: Literal["nodeDown"]
    node: str


class NodeUpEvent(_EventBase):
    kind: Literal["nodeUp"]
    node: str


class NodeDrainEvent(_EventBase):
    kind: Literal["nodeDrain"]  # no new work; running work moves off gracefully; nodeUp ends it
    node: str


class NodeCordonEvent(_EventBase):
    kind: Literal["nodeCordon"]  # no new work; running work stays; nodeUp ends it
    node: str


class LinkDownEvent(_EventBase):
    kind: Literal["linkDown"]
    between: tuple[Name, Name]


class LinkUpEvent(_EventBase):
    kind: Literal["linkUp"]
    between: tuple[Name, Name]


class DeviceBusyEvent(_EventBase):
    kind: Literal["deviceBusy"]
    site: Name | None = None
    node: str | None = None
    resources: ResourcesSpec
    duration: DurationS | None = None

    @model_validator(mode="after")
    def _where(self) -> "DeviceBusyEvent":
        if (self.site is None) == (self.node is None):
            raise ValueError("deviceBusy names exactly one of site or node")
        if self.resources.whole:
            raise FieldError(("resources",), "deviceBusy takes cpu, memory and accelerators, not whole")
        return self


class HandoverEvent(_EventBase):
    """A device re-attaches: every link it has is replaced by links to ``to``
    (one, or several when multi-homed: a phone in reach of several cells), of
    ``rttMs`` and ``bandwidth`` (default: those of its first link before)."""

    kind: Literal["handover"]
    site: Name
    to: Annotated[list[Name], Field(min_length=1, max_length=q.HOMES)]
    rtt_ms: bounded(float, q.RTT_MS, Field(ge=0)) | None = None
    bandwidth: BandwidthMbps | None = None

    @field_validator("to")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"a device attaches to distinct sites, got {value}")
        return value


class DeviceOfflineEvent(_EventBase):
    kind: Literal["deviceOffline"]  # its nodes go down and its links with them; deviceOnline ends it
    site: Name


class DeviceOnlineEvent(_EventBase):
    kind: Literal["deviceOnline"]
    site: Name


EventSpec = Annotated[
    Union[DeleteEvent, NodeDownEvent, NodeUpEvent, NodeDrainEvent, NodeCordonEvent, LinkDownEvent, LinkUpEvent,
          DeviceBusyEvent, HandoverEvent, DeviceOfflineEvent, DeviceOnlineEvent],
    Field(discriminator="kind"),
]


def _parse_budget(value: Any) -> Any:
    """A disruption budget: a count of replicas (>= 1) or a percentage ("25%")."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            pct = float(value.strip()[:-1])
        except ValueError:
            raise ValueError(f"expected a count or a percentage like '25%', got {value!r}") from None
        if not 0 < pct <= 100:
            raise ValueError(f"a percentage must be above 0% and at most 100%, got {value!r}")
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > q.MEMBERS.most:
        q.MEMBERS.check(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected a count (1 or more) or a percentage like '25%', got {q.show(value)}")
    return q.MEMBERS.check(value)


DisruptionBudget = Annotated[Union[int, str], BeforeValidator(_parse_budget)]


class ReschedulingPolicy(Base):
    enabled: bool = True
    hysteresis: DurationS = 60.0
    max_concurrent_migrations: bounded(int, q.MIGRATIONS, Field(ge=1)) = 8
    # at most this many of a component's replicas disturbed at once by voluntary
    # moves (returns, reclaim, defragmentation, drains); at least one
    disruption_budget: DisruptionBudget = "25%"
    # a moved service serves again this long after it is placed (and its state,
    # if any, has arrived): process start and readiness. Until then it counts
    # as moving against its component's disruption budget.
    restart_time: DurationS = 5.0

    def budget(self, replicas: int) -> int:
        b = self.disruption_budget
        if isinstance(b, str):
            return max(1, int(replicas * float(b[:-1]) / 100))
        return b


PlacementPolicy = Literal["default", "random", "dotprod", "clustering", "packing", "bestfit", "fgd", "suanli"]


class ElasticPolicy(Base):
    """How running elastic gangs are resized (``scheduling/elastic.py``):
    ``none`` (a gang keeps the size it started at), ``greedy`` (grow into
    free room, shrink to start waiting gangs) or ``goodput`` (the widths and
    batch sizes of most goodput, weighted toward the work nearest its end,
    within tenants' fair shares and a bound on each job's slowdown)."""

    policy: Literal["none", "greedy", "goodput"] = "none"
    every: DurationS = 60.0  # how often the widths are decided again
    max_slowdown: Annotated[float, Field(gt=1)] = 4.0  # a job past this (time so far / time alone) is served first
    hysteresis: Annotated[float, Field(ge=0, lt=1)] = 0.05  # a resize must gain this share beyond its cost

    @model_validator(mode="before")
    @classmethod
    def _word(cls, value: Any) -> Any:
        return {"policy": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _positive(self) -> "ElasticPolicy":
        if self.every <= 0:
            raise FieldError(("every",), f"widths are decided again after some time, got {self.every}")
        return self


class PolicySpec(Base):
    rescheduling: ReschedulingPolicy = ReschedulingPolicy()
    elastic: ElasticPolicy = ElasticPolicy()
    placement: PlacementPolicy = "default"  # how the business layer picks rows and devices (docs/fgd.md)
    # what may pass a unit that does not fit: everything that fits (off), nothing (fcfs), what delays
    # no reservation of the first (easy) or of each, up to ``reservations`` of them (conservative)
    backfill: Annotated[Literal["off", "fcfs", "easy", "conservative"],
                        BeforeValidator(lambda v: "off" if v is False else v)] = "off"  # (YAML reads off as false)
    reservations: bounded(int, q.RESERVATIONS, Field(ge=1)) = 64


class MobilitySpec(Base):
    """Handovers and offline spells of a population's devices, each at a rate
    per device (Poisson over the population, drawn as the simulation goes: no
    list of events). A handover moves a device to another site its
    population's ``attach`` may pick (``to`` narrows them)."""

    population: Name
    handovers: RatePerS | None = None  # per device: '1/10h'
    to: SelectorSpec | None = None
    offline: RatePerS | None = None  # per device
    offline_for: DistributionQ = q.parse_distribution("lognormal(10m, 0.5)")
    start: DurationS = 0.0
    until: DurationS | None = None
    seed: bounded(int, q.SEED, Field(ge=0)) = 0

    @model_validator(mode="before")
    @classmethod
    def _rejoin(cls, value: Any) -> Any:
        return rejoin_flow_split(value)  # {rttMs: uniform(1, 4)} in a flow mapping

    @model_validator(mode="after")
    def _something(self) -> "MobilitySpec":
        if self.handovers is None and self.offline is None:
            raise FieldError(("handovers",), "give a rate of handovers, of offline spells, or both")
        return self


class ScenarioSpec(Base):
    include: list[str] = Field(default_factory=list)
    seed: bounded(int, q.SEED) = 0
    until: DurationS | None = None
    arrivals: list[ArrivalSpec] = Field(default_factory=list)
    generators: list[GeneratorSpec] = Field(default_factory=list)
    traces: list[TraceSpec] = Field(default_factory=list)
    events: list[EventSpec] = Field(default_factory=list)
    mobility: list[MobilitySpec] = Field(default_factory=list)
    policy: PolicySpec = PolicySpec()


# ---------------------------------------------------------------- documents


class Metadata(Base):
    name: Name
    tenant: Name | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class _Document(Base):
    api_version: Literal["suanli/v1"]
    metadata: Metadata
    # what the document is, when it belongs to a tenant ("an application"); None: to no tenant
    owned_by_tenant: ClassVar[str | None] = None

    @model_validator(mode="after")
    def _tenant(self) -> "_Document":
        owned = self.owned_by_tenant
        if owned is not None and self.metadata.tenant is None:
            raise FieldError(("metadata", "tenant"), f"required field is missing: {owned} belongs to a tenant")
        if owned is None and self.metadata.tenant is not None:
            raise FieldError(("metadata", "tenant"),
                             f"a {self.kind} belongs to no tenant; metadata.tenant is for VirtualCluster and Application")
        return self


class FleetDoc(_Document):
    kind: Literal["Fleet"]
    spec: FleetSpec


class TenantDoc(_Document):
    kind: Literal["Tenant"]
    spec: TenantSpec = TenantSpec()


class VirtualClusterDoc(_Document):
    kind: Literal["VirtualCluster"]
    spec: VirtualClusterSpec
    owned_by_tenant: ClassVar[str | None] = "a virtual cluster"


class ApplicationDoc(_Document):
    kind: Literal["Application"]
    spec: ApplicationSpec
    owned_by_tenant: ClassVar[str | None] = "an application"


class ScenarioDoc(_Document):
    kind: Literal["Scenario"]
    spec: ScenarioSpec = ScenarioSpec()


DOCUMENT_KINDS: dict[str, type[_Document]] = {
    "Fleet": FleetDoc,
    "Tenant": TenantDoc,
    "VirtualCluster": VirtualClusterDoc,
    "Application": ApplicationDoc,
    "Scenario": ScenarioDoc,
}
