"""Tenants, virtual clusters, applications, components and tasks.

Frozen dataclasses in canonical units (millicores, MiB, milli-devices,
seconds, ms). A task is one replica or one gang member, named
``APP/COMPONENT/INDEX``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from suanli.model.fleet import Fleet

DEFAULT_VC_SUFFIX = "/default"


@dataclass(frozen=True, slots=True)
class AcceleratorRequest:
    kind: str
    models: tuple[str, ...] | None  # None: any model of the kind
    milli: int  # < 1000: a share of one device; otherwise whole devices


@dataclass(frozen=True, slots=True)
class Resources:
    cpu_milli: int = 0
    mem_mib: int = 0
    accelerators: tuple[AcceleratorRequest, ...] = ()
    whole: bool = False  # a host that takes a whole node


@dataclass(frozen=True, slots=True)
class Near:
    site: str
    max_rtt_ms: float | None = None  # None: a preference only


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    weight: float = 1.0
    quota: Mapping[str, int] = field(default_factory=dict)  # resource name -> canonical units
    allowed_sites: tuple[str, ...] = ("*",)
    max_priority: int | None = None  # the admin's ceiling; None: none granted
    cohort: str | None = None  # tenants that lend one another the quota they do not use
    borrowing_limit: Mapping[str, int] | None = None  # None: up to what the cohort lends
    lending_limit: Mapping[str, int] = field(default_factory=dict)  # a resource not named: all of its quota
    reclaim: str = "any"  # evict work on borrowed quota to get its own back: any, lowerPriority, never

    def standing(self, priority: int) -> int:
        """What ``priority`` of this tenant's counts for against other tenants'
        work: clipped to 0 .. maxPriority (0 without one). A tenant's own
        priorities order its own work; only the admin's ceiling lets them
        reach past another tenant's, and a negative one does not give way to
        other tenants either."""
        return min(max(priority, 0), self.max_priority or 0)


class Labels(dict):
    """Labels as a selector asks for them: a mapping that hashes (by its
    items), so that a component holding one can be a key, as the copies of
    a document made per site are kept by their prototype. Not changed once made."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


@dataclass(frozen=True, slots=True)
class Selector:
    tiers: tuple[str, ...] | None = None
    names: tuple[str, ...] | None = None  # site globs
    regions: tuple[str, ...] | None = None
    labels: Mapping[str, str] = field(default_factory=Labels)

    def __post_init__(self) -> None:
        if type(self.labels) is not Labels:
            object.__setattr__(self, "labels", Labels(self.labels))


@dataclass(frozen=True, slots=True)
class HostGroup:
    name: str
    resources: Resources
    count: int | None = None  # fixed size
    min: int = 0  # elastic bounds
    max: int | None = None
    coupling: str | None = None
    selector: Selector = Selector()
    near: Near | None = None
    arch: tuple[str, ...] | None = None

    @property
    def elastic(self) -> bool:
        return self.count is None

    @property
    def initial(self) -> int:
        return self.count if self.count is not None else self.min

    @property
    def limit(self) -> int:
        return self.count if self.count is not None else int(self.max or 0)


@dataclass(frozen=True, slots=True)
class VirtualCluster:
    name: str
    tenant: str
    host_groups: tuple[HostGroup, ...] = ()
    scale_down_after_s: float = 300.0
    default: bool = False  # the tenant's default VC: hosts fitted to its tasks


MAX_RESTARTS = 5  # restarts in a row in one placement, unless a component's run says otherwise


@dataclass(frozen=True, slots=True)
class Probe:
    """A check of a running task (``schema.ProbeSpec``): ``kind`` exec, http
    or tcp; ``command`` (exec), ``port`` and ``path`` (http, tcp); times in
    real seconds."""

    kind: str
    command: tuple[str, ...] = ()
    port: int = 0
    path: str = "/"
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 1

    @property
    def target(self) -> str:
        """What it checks, in words."""
        if self.kind == "exec":
            return "exec " + " ".join(self.command)
        return f"http GET :{self.port}{self.path}" if self.kind == "http" else f"tcp :{self.port}"


@dataclass(frozen=True, slots=True)
class RunCommand:
    """The process a real executor starts for each task of a component: a
    command, or a container of ``image`` (or of the variant in ``images`` for
    the arch of the node the task lands on) running ``command`` (empty: the
    image's own)."""

    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    restart: str = "never"  # always | onFailure | never
    max_restarts: int = MAX_RESTARTS
    stop_grace_s: float = 10.0
    image: str | None = None
    images: tuple[tuple[str, str], ...] | None = None  # (arch, reference), sorted by arch
    readiness: Probe | None = None
    liveness: Probe | None = None

    @property
    def containerized(self) -> bool:
        return self.image is not None or self.images is not None

    def image_for(self, arch: str) -> str | None:
        """The image a task runs on a node of ``arch`` (None: no variant for it)."""
        if self.images is None:
            return self.image
        return dict(self.images).get(arch)


@dataclass(frozen=True, slots=True)
class Component:
    app: str
    name: str
    lifetime: str  # job | service
    size: int  # replicas, or gang size
    resources: Resources
    priority: int
    preemptible: bool
    gang: bool = False
    min_size: int | None = None
    coupling: str | None = None
    work_s: float | None = None
    duration_s: float | None = None
    time_limit_s: float | None = None  # the expected run its user states (backfill plans with it)
    efficiency: float = 1.0
    scaling: Any = None  # a speed-up model (``speedup.py``); None: the formula with ``efficiency``
    max_size: int | None = None  # an elastic policy may grow a running gang to this (default: size)
    start_size: int | None = None  # a gang named up to maxSize starts at most this wide (its size)
    resize_cost_s: float = 0.0
    parts: bool = False  # a job split into parts (``decompose``): its members are its parts, some run at a time
    stateful: bool = False
    state_mib: int = 0
    checkpoint_every_s: float | None = None
    arch: tuple[str, ...] | None = None
    data_source: str | None = None
    data_sink: str | None = None
    near: Near | None = None
    affinity: tuple[str, str] | None = None  # (group, scope)
    anti_affinity: tuple[str, str] | None = None  # (group, scope)
    run: RunCommand | None = None  # None: real executors hold the slice with a stand-in
    selector: "Selector | None" = None  # the sites its tasks may use (tier, names, regions, labels)

    def task_name(self, index: int) -> str:
        return f"{self.app}/{self.name}/{index}"


_PER_SITE = ("app", "near", "data_source", "data_sink")  # what a component made per site (``each``) has of its own
COMPONENT_FIELDS = tuple(Component.__dataclass_fields__)


class _MadePerSite:
    """What a copy made per site shares with the frozen dataclass it stands
    for (named ``_KIND``, with fields ``_NAMES``): it is frozen, compares
    and hashes by those fields with that class and its own (``_SAME``), and
    prints as that class does."""

    __slots__ = ()
    _KIND: str
    _NAMES: tuple
    _SAME: tuple

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field {name!r}")

    def _fields(self) -> tuple:
        return tuple(getattr(self, f) for f in self._NAMES)

    def __eq__(self, other):
        if isinstance(other, self._SAME):
            return self._fields() == tuple(getattr(other, f) for f in self._NAMES)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return self._KIND + "(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self._NAMES) + ")"


class SiteComponent(_MadePerSite):
    """A component of an application made per site (``each``: a million cars'
    applications). It reads as a ``Component`` of the same fields; what it
    shares with its prototype is held once, on a class made per prototype
    (``site_component``), and only the fields that name the site are kept
    per copy: 64 bytes, not the 224 of a ``Component``. It compares and
    hashes by its fields, as a ``Component`` does, and ``dataclasses.replace``
    of one gives a ``Component``."""

    __slots__ = _PER_SITE
    __dataclass_fields__ = Component.__dataclass_fields__  # fields(), replace() and asdict() read it
    _proto: Component  # (on the class of each prototype)

    def __new__(cls, *args, **kwargs):  # (what ``dataclasses.replace`` calls: a plain Component)
        return Component(*args, **kwargs)

    _KIND, _NAMES = "Component", COMPONENT_FIELDS
    task_name = Component.task_name

    def __reduce__(self):
        return _site_copy, (self._proto, self.app, self.near, self.data_source, self.data_sink)


SiteComponent._SAME = (Component, SiteComponent)
_SET_SITE = tuple(getattr(SiteComponent, name).__set__ for name in _PER_SITE)  # slot setters: no frozen check


def site_component(proto: Component) -> type[SiteComponent]:
    """The class of ``proto``'s copies made per site: its fields other than
    the site's are class attributes (read as fast as slots)."""
    shared = {f: getattr(proto, f) for f in COMPONENT_FIELDS if f not in _PER_SITE}
    return type("Component", (SiteComponent,), {"__slots__": (), "_proto": proto, **shared})


def copy_for_site(cls: type[SiteComponent], app: str, near: Near | None, data_source: str | None,
                  data_sink: str | None) -> SiteComponent:
    out = object.__new__(cls)
    for put, value in zip(_SET_SITE, (app, near, data_source, data_sink)):
        put(out, value)
    return out


_SITE_CLASSES: dict[Component, type[SiteComponent]] = {}


def site_class(proto: Component) -> type[SiteComponent]:
    """``site_component(proto)``, one class per prototype in this process (a
    copy unpickled, or made again from its prototype: a shard's)."""
    cls = _SITE_CLASSES.get(proto)
    if cls is None:
        cls = _SITE_CLASSES[proto] = site_component(proto)
    return cls


def _site_copy(proto: Component, app: str, near: Near | None, data_source: str | None,
               data_sink: str | None) -> SiteComponent:
    """A copy unpickled (another process): one class per prototype there too."""
    return copy_for_site(site_class(proto), app, near, data_source, data_sink)


@dataclass(frozen=True, slots=True)
class Application:
    name: str
    tenant: str
    vc: str  # explicit, or the tenant's default VC
    priority: int
    preemptible: bool
    components: tuple[Component, ...]
    template: str | None = None  # the document it was made from, when made per site (``each``)

    @property
    def document(self) -> str:
        """The Application document's name: arrivals and deletions name it."""
        return self.template or self.name


EACH_SITE = "{site}"  # in an application made per site (``each``): the site it is made for
_APP_FIELDS = tuple(Application.__dataclass_fields__)


class SiteApplication(_MadePerSite):
    """An application made per site (``each``: a car's services, for a
    million cars). It reads as an ``Application`` of the same fields, and
    keeps only its site's number: what its copies share is held once on a
    class made per prototype (``site_application``), and its name and its
    components (``SiteComponent``: the prototype's, with ``{site}`` read as
    the site) are made when read. It compares and hashes by its fields, as an
    ``Application`` does, and ``dataclasses.replace`` of one gives an
    ``Application``. Two reads of ``components`` may give distinct objects
    (equal ones): tell its components apart by place or name."""

    __slots__ = ("site",)
    __dataclass_fields__ = Application.__dataclass_fields__
    _proto: Application  # (these on the class of each prototype)
    _classes: tuple  # the components' per-site classes
    _names: object  # the fleet's site names (``SiteNames``)
    _last: tuple = (-1, "", ())  # the site read last: its name and components (read again at once, often)
    place_of: dict  # a component's class -> its place in ``components`` (a copy's component: without reading them)

    _KIND, _NAMES = "Application", _APP_FIELDS

    def __new__(cls, *args, **kwargs):  # (what ``dataclasses.replace`` calls: a plain Application)
        return Application(*args, **kwargs)

    def _named(self) -> tuple[str, str]:
        """Its site's name and its own."""
        site = self._names.name(self.site)
        return site, f"{self.template}.{site}"

    def _made(self) -> tuple:
        last = self._last
        if last[0] == self.site:
            return last
        cls = type(self)
        site, name = self._named()
        nears: dict = {}
        comps = tuple(_for_site(c, k, name, site, nears) for c, k in zip(cls._proto.components, cls._classes))
        cls._last = made = (self.site, name, comps)
        return made

    @property
    def name(self) -> str:
        return self._made()[1]

    @property
    def components(self) -> tuple:
        return self._made()[2]

    @property
    def document(self) -> str:
        return self.template

    def component_at(self, k: int) -> SiteComponent:
        """``components[k]`` (the copy's components made once while it is the
        one read last: its units are read one after another)."""
        return self._made()[2][k]

    def __reduce__(self):
        return _site_app, (self._proto, self._names, self.site)


SiteApplication._SAME = (Application, SiteApplication)
_SET_APP_SITE = SiteApplication.site.__set__  # (the slot's setter: no frozen check)


def copies_named(classes: Mapping[str, list[type[SiteApplication]]], app: str):
    """The (class, site number) of each copy that ``app`` could name, of the
    classes of copies given by their document's name (``APP.SITE``: a
    document's name, a dot, a site of the class's names)."""
    for template, of_template in classes.items():
        if app.startswith(template) and app[len(template):len(template) + 1] == ".":
            site_name = app[len(template) + 1:]
            for cls in of_template:
                site = cls._names.get(site_name)
                if site >= 0:
                    yield cls, site


def layout(app: Application) -> tuple:
    """What ``app``'s components are, in order, for what their names and sizes
    say (a copy made per site: its prototype's, without making its own)."""
    return app._proto.components if isinstance(app, SiteApplication) else app.components


def task_count(app: Application) -> int:
    """How many tasks ``app``'s components make."""
    return sum(c.size for c in layout(app))


def site_application(proto: Application, names) -> type[SiteApplication]:
    """The class of the copies of ``proto`` (an application written with
    ``{site}``, its ``template`` its document's name) made per site of
    ``names`` (the fleet's ``SiteNames``), one per prototype in this process
    (a copy unpickled, or made again from its prototype: a shard's)."""
    for known, cls in _APP_CLASSES.get(proto, ()):
        if known is names:
            return cls
    classes = tuple(site_class(c) for c in proto.components)
    shared = {"tenant": proto.tenant, "vc": proto.vc, "priority": proto.priority, "preemptible": proto.preemptible,
              "template": proto.template, "_proto": proto, "_names": names, "_classes": classes,
              "place_of": {k: i for i, k in enumerate(classes)}}
    cls = type("Application", (SiteApplication,), {"__slots__": (), **shared})
    _APP_CLASSES.setdefault(proto, []).append((names, cls))
    return cls


_APP_CLASSES: dict[Application, list[tuple[object, type[SiteApplication]]]] = {}


def app_for_site(cls: type[SiteApplication], site: int) -> SiteApplication:
    """The copy of class ``cls`` (``site_application``) for site number ``site``."""
    out = object.__new__(cls)
    _SET_APP_SITE(out, site)
    return out


def _site_app(proto: Application, names, site: int) -> SiteApplication:
    """A copy unpickled (another process)."""
    return app_for_site(site_application(proto, names), site)


def _for_site(c: Component, cls: type[SiteComponent], app: str, site: str, nears: dict) -> SiteComponent:
    """A component of an ``each`` application's prototype ``c`` (of per-site
    class ``cls``), for ``app`` on ``site``. ``nears``: the site's bounds made
    so far, by their rtt (components bound alike share one)."""
    near = c.near
    if near is not None and near.site == EACH_SITE:
        near = nears.get(c.near.max_rtt_ms)
        if near is None:
            near = nears[c.near.max_rtt_ms] = Near(site, c.near.max_rtt_ms)
    return copy_for_site(cls, app, near, site if c.data_source == EACH_SITE else c.data_source,
                         site if c.data_sink == EACH_SITE else c.data_sink)


@dataclass(frozen=True, slots=True)
class World:
    """Everything one load describes."""

    fleet: Fleet
    tenants: Mapping[str, Tenant]
    vcs: Mapping[str, VirtualCluster]
    apps: tuple[Application, ...]
    seed: int = 0
    scenario: object | None = None  # the Scenario spec, for the simulator
    base_dir: str = "."  # where the scenario's relative paths (traces) start
    warnings: tuple = ()  # the load's warnings (spec Problems): demands nothing in the fleet meets


def default_vc_name(tenant: str) -> str:
    return tenant + DEFAULT_VC_SUFFIX
