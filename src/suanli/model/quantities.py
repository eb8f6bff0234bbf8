"""Quantities: parse the user's forms into the canonical integer/float units.

Each parser takes what YAML produced (str, int or float) and returns the
canonical value, or raises ``QuantityError`` whose message names the accepted
forms. Canonical units: cpu in millicores, memory in MiB, accelerator shares in
milli-devices, bandwidth in Mbit/s, durations in seconds, rtt in ms, rates in
arrivals per second.

Every quantity is also bounded (``Limit``; the bounds are all in this module,
below the parsers' forms). The scheduler keeps resources in int64 arrays and
sums them over whole fleets and tenants; the bounds keep every such sum far
inside int64 and every time finite, and lie far beyond any real request, so a
value that would poison the arithmetic is refused where it is written.
"""

from __future__ import annotations

import functools
import math
import re
import reprlib
from dataclasses import dataclass

__all__ = [
    "QuantityError",
    "LimitError",
    "Limit",
    "show",
    "Distribution",
    "parse_cpu_milli",
    "parse_mem_mib",
    "parse_device_milli",
    "parse_bandwidth_mbps",
    "parse_duration_s",
    "parse_rate_per_s",
    "parse_distribution",
    "format_duration",
]


class QuantityError(ValueError):
    """A value that is not a quantity of the expected kind."""


class LimitError(QuantityError):
    """A quantity of the right form, outside the range suanli accepts."""


CPU_FORMS = "a number of cores (4, 0.5) or millicores ('500m')"
MEM_FORMS = "a size with a unit: '512Mi', '8Gi', '1Ti', '2G' (or 0)"
DEVICE_FORMS = "a device count: a fraction of one device (0.25) or whole devices (1, 8)"
BANDWIDTH_FORMS = "a bandwidth: '200Mbps', '10Gbps', '400Gbps'"
DURATION_FORMS = "a duration: '30s', '10m', '2h', '1d', '1h20m', or seconds as a number"
RATE_FORMS = "a rate: '2/s', '1/5m', '10/h'"
DISTRIBUTION_FORMS = "lognormal(MEDIAN, SIGMA), exponential(MEAN) or uniform(LOW, HIGH)"

_NUMBER = r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+"

# Bad values are echoed in messages; a bounded repr keeps a huge or deeply
# nested value (which YAML allows anywhere) from flooding or crashing the report.
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 2


def show(value: object) -> str:
    """A value as messages echo it: bounded in length, whatever its size."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int too long to print (more than 4300 digits)
        return "a number of thousands of digits"


_show = show


# ------------------------------------------------------------------ limits


@dataclass(frozen=True, slots=True)
class Limit:
    """The range a value must lie in, in canonical units, and how the bound reads.

    ``check`` refuses a value outside it (nan included) with a message that
    names the bound as the user writes it ("at most 1000000 cores")."""

    most: float
    shown: str
    least: float | None = None
    least_shown: str = ""

    def check(self, value, raw: object = None):
        if value != value:  # nan
            raise LimitError(f"{_show(value if raw is None else raw)} is not a number; give at most {self.shown}")
        if value > self.most:
            raise LimitError(f"{_show(value if raw is None else raw)} is above the limit: at most {self.shown}")
        if self.least is not None and value < self.least:
            raise LimitError(f"{_show(value if raw is None else raw)} is below the limit: at least {self.least_shown}")
        return value

    def validator(self):
        """``check`` as a one-argument function, for a schema field."""
        return lambda value: self.check(value)


# The scheduler's arrays hold cpu (millicores), memory (MiB) and device shares
# (milli-devices) as int64 (max ~9.2e18). A fleet has at most FLEET_NODES
# nodes, each at most MAX_CPU / MAX_MEMORY and 64 devices of a kind, so a
# fleet's total, and so any tenant's usage, stays below 1.1e16: 800 times
# inside int64. Quotas are totals, so their bounds are larger.
YEAR_S = 365.25 * 86400
MAX_CPU = Limit(1_000_000 * 1000, "1000000 cores")  # a task, host or node
MAX_MEMORY = Limit(2**30, "1Pi (1 PiB)")  # a task, host, node, device or state
MAX_DEVICES = Limit(1_000_000 * 1000, "1000000 devices")  # a task's or host's demand of one kind
HOMES = 16  # links a device of a population may have at once (attach.homes, a handover's sites)
RESERVATIONS = Limit(10_000, "10000 reservations")
MAX_QUOTA_CPU = Limit(10**10 * 1000, "10000000000 cores")
MAX_QUOTA_MEMORY = Limit(2**40, "1024Pi (1 EiB)")
MAX_QUOTA_DEVICES = Limit(10**9 * 1000, "1000000000 devices")
BANDWIDTH = Limit(1e9, "1000000Gbps", 1e-3, "1Kbps")
DURATION = Limit(100 * YEAR_S, "36525d (100 years)")
CHECKPOINT = Limit(100 * YEAR_S, "36525d (100 years)", 1.0, "1s")  # an executor is asked that often
STOP_GRACE = Limit(3600.0, "1h")  # a stopped task holds its place this long at most
RTT_MS = Limit(1e6, "1000000 ms")
RATE = Limit(1e6, "1000000/s", 1 / (100 * YEAR_S), "1/36525d")
SIGMA = Limit(10.0, "10")  # lognormal: larger spreads draw durations beyond any limit
PRIORITY = Limit(10**9, "1000000000", -(10**9), "-1000000000")
MAX_PRIORITY = Limit(10**9, "1000000000", 0, "0")  # a tenant's ceiling
MEMBERS = Limit(100_000, "100000")  # replicas of a component, members of a gang
APP_TASKS = 1_000_000  # tasks of one application, all components together
HOSTS = Limit(100_000, "100000")  # hosts of a host group
NODES = Limit(1_000_000, "1000000")  # nodes of a node group
FLEET_NODES = 10_000_000  # nodes of all Fleet documents together
WEIGHT = Limit(1e6, "1000000", 1e-3, "0.001")
EFFICIENCY = Limit(1.0, "1", 0.01, "0.01")
COST_PER_HOUR = Limit(1e9, "1000000000")
RESTARTS = Limit(10_000, "10000")
MIGRATIONS = Limit(100_000, "100000")
SEED = Limit(2**63 - 1, "9223372036854775807", 0, "0")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite_nonneg(x: float, forms: str, raw: object, limit: Limit | None = None) -> float:
    if x == math.inf and limit is not None:
        raise LimitError(f"{_show(raw)} is not {forms}; give at most {limit.shown}")
    if not math.isfinite(x) or x < 0:
        raise QuantityError(f"{_show(raw)} is not {forms}")
    return x


def _rounded(x: float, limit: Limit, raw: object) -> int:
    """``x`` rounded to an int once it is known to lie within ``limit``
    (an infinite or huge value is refused before it becomes an int)."""
    limit.check(x, raw)
    return int(round(x))


def _memo_text(parse):
    """``parse`` remembering what it made of each text: a quantity such as
    ``"10m"`` is written on thousands of documents of one load."""
    seen: dict = {}

    @functools.wraps(parse)
    def cached(value, *rest, **named):
        if type(value) is not str or named:
            return parse(value, *rest, **named)
        key = (value, rest)
        got = seen.get(key)
        if got is None:
            got = parse(value, *rest)  # a refused text raises each time, with its message
            if len(seen) >= 8192:
                seen.clear()
            seen[key] = got
        return got

    return cached


@_memo_text
def parse_cpu_milli(value: object, limit: Limit = MAX_CPU) -> int:
    """``4`` -> 4000, ``0.5`` -> 500, ``"500m"`` -> 500."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise QuantityError(f"{_show(value)} is not {CPU_FORMS}")
        return limit.check(value * 1000, value)  # exact at any size: no float in between
    if _is_number(value):
        cores = _finite_nonneg(float(value), CPU_FORMS, value, limit)
        return _rounded(cores * 1000, limit, value)
    if isinstance(value, str):
        text = value.strip()
        m = re.fullmatch(rf"({_NUMBER})(m?)", text)
        if m:
            number = float(m.group(1))
            return _rounded(number if m.group(2) else number * 1000, limit, value)
    raise QuantityError(f"{_show(value)} is not {CPU_FORMS}")


_MEM_UNITS_MIB = {
    "Ki": 1 / 1024,
    "Mi": 1.0,
    "Gi": 1024.0,
    "Ti": 1024.0**2,
    "Pi": 1024.0**3,
    "k": 1e3 / 2**20,
    "K": 1e3 / 2**20,
    "M": 1e6 / 2**20,
    "G": 1e9 / 2**20,
    "T": 1e12 / 2**20,
    "P": 1e15 / 2**20,
}


@_memo_text
def parse_mem_mib(value: object, limit: Limit = MAX_MEMORY) -> int:
    """``"512Mi"`` -> 512, ``"8Gi"`` -> 8192, ``"2G"`` -> 1907 (rounded)."""
    if _is_number(value) and value == 0:
        return 0
    if isinstance(value, str):
        m = re.fullmatch(rf"({_NUMBER})\s*(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)B?", value.strip())
        if m:
            return _rounded(float(m.group(1)) * _MEM_UNITS_MIB[m.group(2)], limit, value)
        if value.strip() == "0":
            return 0
    raise QuantityError(f"{_show(value)} is not {MEM_FORMS}")


@_memo_text
def parse_device_milli(value: object, limit: Limit = MAX_DEVICES) -> int:
    """``0.25`` -> 250, ``1`` -> 1000, ``8`` -> 8000; a count of 1 or more must be whole."""
    raw = value
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise QuantityError(f"{_show(value)} is not {DEVICE_FORMS}") from None
    if not _is_number(value):
        raise QuantityError(f"{_show(value)} is not {DEVICE_FORMS}")
    if isinstance(value, int):  # exact at any size: no float in between
        if value <= 0:
            raise QuantityError(f"{_show(raw)} is not {DEVICE_FORMS}; it must be above 0")
        return limit.check(value * 1000, raw)
    count = float(value)
    if count == math.inf:
        raise LimitError(f"{_show(raw)} is not {DEVICE_FORMS}; give at most {limit.shown}")
    if not math.isfinite(count) or count <= 0:
        raise QuantityError(f"{_show(raw)} is not {DEVICE_FORMS}; it must be above 0")
    if count >= 1 and count != int(count):
        raise QuantityError(
            f"{_show(raw)} is not {DEVICE_FORMS}; a count of 1 or more must be a whole number"
        )
    milli = limit.check(count * 1000, raw)
    if abs(milli - round(milli)) > 1e-6:
        raise QuantityError(
            f"{_show(raw)} is finer than a thousandth of a device; "
            f"give {DEVICE_FORMS} in steps of 0.001"
        )
    return _rounded(milli, limit, raw)


_BANDWIDTH_MBPS = {"Kbps": 1e-3, "Mbps": 1.0, "Gbps": 1e3, "Tbps": 1e6}


@_memo_text
def parse_bandwidth_mbps(value: object, limit: Limit = BANDWIDTH) -> float:
    if isinstance(value, str):
        m = re.fullmatch(rf"({_NUMBER})\s*(Kbps|Mbps|Gbps|Tbps)", value.strip())
        if m:
            mbps = float(m.group(1)) * _BANDWIDTH_MBPS[m.group(2)]
            if mbps > 0:
                return limit.check(mbps, value)
            raise QuantityError(f"{_show(value)} is not {BANDWIDTH_FORMS}; it must be above 0")
    raise QuantityError(f"{_show(value)} is not {BANDWIDTH_FORMS}")


_DURATION_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@_memo_text
def parse_duration_s(value: object, limit: Limit = DURATION) -> float:
    """``"30s"``, ``"10m"``, ``"1h20m"``, ``90`` (seconds) -> seconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise QuantityError(f"{_show(value)} is not {DURATION_FORMS}")
        return float(limit.check(value, value))  # compared as an int: any size
    if _is_number(value):
        return limit.check(_finite_nonneg(float(value), DURATION_FORMS, value, limit), value)
    if isinstance(value, str):
        text = value.strip()
        parts = re.findall(rf"({_NUMBER})(ms|s|m|h|d)", text)
        if parts and "".join(n + u for n, u in parts) == text.replace(" ", ""):
            return limit.check(sum(float(n) * _DURATION_S[u] for n, u in parts), value)
        if re.fullmatch(_NUMBER, text):
            return limit.check(float(text), value)
    raise QuantityError(f"{_show(value)} is not {DURATION_FORMS}")


@_memo_text
def parse_rate_per_s(value: object, limit: Limit = RATE) -> float:
    """``"2/s"`` -> 2.0, ``"1/5m"`` -> 1/300, ``"10/h"`` -> 10/3600."""
    if isinstance(value, str):
        m = re.fullmatch(rf"\s*({_NUMBER})\s*/\s*({_NUMBER})?\s*(ms|s|m|h|d)\s*", value)
        if m:
            count = float(m.group(1))
            per = float(m.group(2) or 1) * _DURATION_S[m.group(3)]
            if count > 0 and per > 0:
                return limit.check(count / per, value)
            raise QuantityError(
                f"{_show(value)} is not {RATE_FORMS}; count and period must be above 0"
            )
    raise QuantityError(f"{_show(value)} is not {RATE_FORMS}")


@dataclass(frozen=True, slots=True)
class Distribution:
    """A named distribution with its parameters in canonical units (seconds)."""

    name: str
    params: tuple[float, ...]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(format(p, 'g') for p in self.params)})"


_DISTRIBUTION_ARITY = {"lognormal": 2, "exponential": 1, "uniform": 2}


def parse_distribution(value: object) -> Distribution:
    """``"lognormal(300s, 1.0)"`` -> Distribution('lognormal', (300.0, 1.0))."""

    def bad(reason: str = "") -> QuantityError:
        text = f"{_show(value)} is not {DISTRIBUTION_FORMS}"
        return QuantityError(f"{text}; {reason}" if reason else text)

    if not isinstance(value, str):
        raise bad()
    m = re.fullmatch(r"\s*([a-z]+)\s*\((.*)\)\s*", value)
    if not m or m.group(1) not in _DISTRIBUTION_ARITY:
        raise bad()
    name = m.group(1)
    args = [a.strip() for a in m.group(2).split(",")]
    if len(args) != _DISTRIBUTION_ARITY[name] or not all(args):
        raise bad()
    try:
        if name == "lognormal":
            params = (parse_duration_s(args[0]), float(args[1]))
        else:
            params = tuple(parse_duration_s(a) for a in args)
    except LimitError as exc:
        raise bad(str(exc)) from None
    except (QuantityError, ValueError):
        raise bad() from None
    if not all(math.isfinite(p) for p in params):
        raise bad("give finite numbers")
    if name == "uniform" and params[0] > params[1]:
        raise bad("uniform needs LOW <= HIGH")
    if name == "lognormal" and (params[0] <= 0 or params[1] < 0):
        raise bad("lognormal needs MEDIAN > 0, SIGMA >= 0")
    if name == "lognormal" and params[1] > SIGMA.most:
        raise bad(f"SIGMA is above the limit: at most {SIGMA.shown}")
    if name == "exponential" and params[0] <= 0:
        raise bad("exponential needs MEAN > 0")
    return Distribution(name, params)


def format_duration(seconds: float) -> str:
    """Readable form for reports: 90 -> '1m30s'."""
    if seconds < 60:
        return f"{seconds:g}s"
    out, rest = [], int(round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out)


def format_bytes(n: float) -> str:
    """A size as a reader takes it in: 512 B, 1.5 KiB, 4.0 GiB (binary units)."""
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def format_amount(column: int, value: int) -> str:
    """A canonical amount of resource ``column`` (0 cpu millicores, 1 memory
    MiB, 2.. accelerator milli-devices) as a user writes it: 16, 0.5, 64Gi, 512Mi, 8."""
    if column == 1:
        return f"{value // 1024}Gi" if value % 1024 == 0 and value else f"{value}Mi"
    return f"{value / 1000:g}"


# ------------------------------------------------------------------ spreads


SPREAD_FORMS = "a value, or uniform(LOW, HIGH), normal(MEAN, SD) or lognormal(MEDIAN, SIGMA) of such values"
POPULATION = Limit(10_000_000, "10000000")  # sites of one population
SHARE = Limit(1.0, "1")  # a fraction of a population
ATTACH_WEIGHT = Limit(1e6, "1000000")  # a site's share of a population's attachments (0: none)


@dataclass(frozen=True, slots=True)
class Spread:
    """A per-member value of a population: fixed, or drawn from a distribution
    (parameters in canonical units; normal draws are clipped to the limit)."""

    name: str  # fixed | uniform | normal | lognormal
    params: tuple[float, ...]

    def draw(self, rng, n: int, limit: Limit):
        import numpy as np

        p = self.params
        if self.name == "fixed":
            out = np.full(n, p[0])
        elif self.name == "uniform":
            out = rng.uniform(p[0], p[1], n)
        elif self.name == "normal":
            out = rng.normal(p[0], p[1], n)
        else:
            out = p[0] * np.exp(p[1] * rng.standard_normal(n))
        return np.clip(out, limit.least or 0.0, limit.most)

    def __str__(self) -> str:
        return format(self.params[0], "g") if self.name == "fixed" else \
            f"{self.name}({', '.join(format(x, 'g') for x in self.params)})"


def parse_spread(value: object, parse, limit: Limit, what: str) -> Spread:
    """``2``, ``'100Mbps'``, ``'uniform(1, 5)'``, ``'lognormal(100Mbps, 0.5)'``:
    ``parse`` reads one value of the quantity (``what`` names its forms)."""
    forms = f"{SPREAD_FORMS} ({what})"
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(uniform|normal|lognormal)\s*\((.*)\)\s*", value)
        if m:
            name, args = m.group(1), [a.strip() for a in m.group(2).split(",")]
            if len(args) != 2 or not all(args):
                raise QuantityError(f"{_show(value)} is not {forms}")
            try:
                a = parse(args[0])
                b = float(args[1]) if name == "lognormal" else parse(args[1])
            except (QuantityError, ValueError) as exc:
                raise QuantityError(f"{_show(value)} is not {forms}: {exc}") from None
            if not (math.isfinite(a) and math.isfinite(b)):
                raise QuantityError(f"{_show(value)} is not {forms}; give finite numbers")
            if name == "uniform" and a > b:
                raise QuantityError(f"{_show(value)}: uniform needs LOW <= HIGH")
            if name == "normal" and b < 0:
                raise QuantityError(f"{_show(value)}: normal needs SD >= 0")
            if name == "lognormal" and (a <= 0 or not 0 <= b <= SIGMA.most):
                raise QuantityError(f"{_show(value)}: lognormal needs MEDIAN > 0 and 0 <= SIGMA <= {SIGMA.shown}")
            return Spread(name, (a, b))
    try:
        return Spread("fixed", (parse(value),))
    except LimitError:
        raise
    except (QuantityError, ValueError):
        raise QuantityError(f"{_show(value)} is not {forms}") from None


def parse_rtt_ms(value: object) -> float:
    """An rtt in milliseconds: a number >= 0."""
    text = value.strip().removesuffix("ms").strip() if isinstance(value, str) else value
    if isinstance(text, str) and re.fullmatch(_NUMBER, text):
        text = float(text)
    if _is_number(text) and not isinstance(text, bool):
        v = float(text)
        if math.isfinite(v) and v >= 0:
            return RTT_MS.check(v, value)
    raise QuantityError(f"{_show(value)} is not an rtt in ms (a number >= 0)")
