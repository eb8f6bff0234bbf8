"""Quantities: parse the user's forms into the canonical integer/float units.

Each parser takes what YAML produced (str, int or float) and returns the
canonical value, or raises ``QuantityError`` whose message names the accepted
forms. Canonical units: cpu in millicores, memory in MiB, accelerator shares in
milli-devices, bandwidth in Mbit/s, durations in seconds, rtt in ms, rates in
arrivals per second.
"""

from __future__ import annotations

import math
import re
import reprlib
from dataclasses import dataclass

__all__ = [
    "QuantityError",
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


def _show(value: object) -> str:
    return _REPR.repr(value)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite_nonneg(x: float, forms: str, raw: object) -> float:
    if not math.isfinite(x) or x < 0:
        raise QuantityError(f"{_show(raw)} is not {forms}")
    return x


def parse_cpu_milli(value: object) -> int:
    """``4`` -> 4000, ``0.5`` -> 500, ``"500m"`` -> 500."""
    if _is_number(value):
        cores = _finite_nonneg(float(value), CPU_FORMS, value)
        return int(round(cores * 1000))
    if isinstance(value, str):
        text = value.strip()
        m = re.fullmatch(rf"({_NUMBER})(m?)", text)
        if m:
            number = float(m.group(1))
            return int(round(number if m.group(2) else number * 1000))
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


def parse_mem_mib(value: object) -> int:
    """``"512Mi"`` -> 512, ``"8Gi"`` -> 8192, ``"2G"`` -> 1907 (rounded)."""
    if _is_number(value) and value == 0:
        return 0
    if isinstance(value, str):
        m = re.fullmatch(rf"({_NUMBER})\s*(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)B?", value.strip())
        if m:
            return int(round(float(m.group(1)) * _MEM_UNITS_MIB[m.group(2)]))
        if value.strip() == "0":
            return 0
    raise QuantityError(f"{_show(value)} is not {MEM_FORMS}")


def parse_device_milli(value: object) -> int:
    """``0.25`` -> 250, ``1`` -> 1000, ``8`` -> 8000; a count of 1 or more must be whole."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise QuantityError(f"{_show(value)} is not {DEVICE_FORMS}") from None
    if not _is_number(value):
        raise QuantityError(f"{_show(value)} is not {DEVICE_FORMS}")
    count = float(value)
    if not math.isfinite(count) or count <= 0:
        raise QuantityError(f"{_show(value)} is not {DEVICE_FORMS}; it must be above 0")
    if count >= 1 and count != int(count):
        raise QuantityError(
            f"{_show(value)} is not {DEVICE_FORMS}; a count of 1 or more must be a whole number"
        )
    milli = count * 1000
    if abs(milli - round(milli)) > 1e-6:
        raise QuantityError(
            f"{_show(value)} is finer than a thousandth of a device; "
            f"give {DEVICE_FORMS} in steps of 0.001"
        )
    return int(round(milli))


_BANDWIDTH_MBPS = {"Kbps": 1e-3, "Mbps": 1.0, "Gbps": 1e3, "Tbps": 1e6}


def parse_bandwidth_mbps(value: object) -> float:
    if isinstance(value, str):
        m = re.fullmatch(rf"({_NUMBER})\s*(Kbps|Mbps|Gbps|Tbps)", value.strip())
        if m:
            mbps = float(m.group(1)) * _BANDWIDTH_MBPS[m.group(2)]
            if mbps > 0:
                return mbps
            raise QuantityError(f"{_show(value)} is not {BANDWIDTH_FORMS}; it must be above 0")
    raise QuantityError(f"{_show(value)} is not {BANDWIDTH_FORMS}")


_DURATION_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_s(value: object) -> float:
    """``"30s"``, ``"10m"``, ``"1h20m"``, ``90`` (seconds) -> seconds."""
    if _is_number(value):
        return _finite_nonneg(float(value), DURATION_FORMS, value)
    if isinstance(value, str):
        text = value.strip()
        parts = re.findall(rf"({_NUMBER})(ms|s|m|h|d)", text)
        if parts and "".join(n + u for n, u in parts) == text.replace(" ", ""):
            return sum(float(n) * _DURATION_S[u] for n, u in parts)
        if re.fullmatch(_NUMBER, text):
            return float(text)
    raise QuantityError(f"{_show(value)} is not {DURATION_FORMS}")


def parse_rate_per_s(value: object) -> float:
    """``"2/s"`` -> 2.0, ``"1/5m"`` -> 1/300, ``"10/h"`` -> 10/3600."""
    if isinstance(value, str):
        m = re.fullmatch(rf"\s*({_NUMBER})\s*/\s*({_NUMBER})?\s*(ms|s|m|h|d)\s*", value)
        if m:
            count = float(m.group(1))
            per = float(m.group(2) or 1) * _DURATION_S[m.group(3)]
            if count > 0 and per > 0:
                return count / per
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
    except (QuantityError, ValueError):
        raise bad() from None
    if not all(math.isfinite(p) for p in params):
        raise bad("give finite numbers")
    if name == "uniform" and params[0] > params[1]:
        raise bad("uniform needs LOW <= HIGH")
    if name == "lognormal" and (params[0] <= 0 or params[1] < 0):
        raise bad("lognormal needs MEDIAN > 0, SIGMA >= 0")
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
