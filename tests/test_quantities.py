"""Quantity parsers: every accepted form gives its canonical value; every bad
form raises QuantityError whose message shows the value and the accepted forms."""

from __future__ import annotations

import math

import pytest

from suanli.model.quantities import (
    BANDWIDTH_FORMS,
    CPU_FORMS,
    DEVICE_FORMS,
    DISTRIBUTION_FORMS,
    DURATION_FORMS,
    MEM_FORMS,
    RATE_FORMS,
    Distribution,
    QuantityError,
    format_duration,
    parse_bandwidth_mbps,
    parse_cpu_milli,
    parse_device_milli,
    parse_distribution,
    parse_duration_s,
    parse_mem_mib,
    parse_rate_per_s,
)


def cases(*rows):
    """(id, value, expected) rows -> parametrize arguments with ids."""
    return pytest.mark.parametrize(
        ("value", "expected"), [r[1:] for r in rows], ids=[r[0] for r in rows]
    )


def bad_cases(*rows):
    """(id, value) rows -> parametrize arguments with ids."""
    return pytest.mark.parametrize("value", [r[1] for r in rows], ids=[r[0] for r in rows])


def assert_rejected(parse, value, forms: str, *, hint: str = "") -> None:
    with pytest.raises(QuantityError) as info:
        parse(value)
    message = str(info.value)
    assert repr(value) in message, message
    assert forms in message, message
    assert hint in message, message


# ------------------------------------------------------------------ cpu


@cases(
    ("int-cores", 4, 4000),
    ("float-cores", 0.5, 500),
    ("millicores", "500m", 500),
    ("cores-as-text", "4", 4000),
    ("fraction-as-text", "0.25", 250),
    ("zero", 0, 0),
    ("large", 192, 192000),
    ("padded", " 2 ", 2000),
    ("whole-millicores", "1m", 1),
)
def test_cpu_forms(value, expected):
    assert parse_cpu_milli(value) == expected


@bad_cases(
    ("suffix", "4x"),
    ("words", "4 cores"),
    ("empty", ""),
    ("negative", -1),
    ("negative-text", "-1"),
    ("nan", math.nan),
    ("inf", math.inf),
    ("bool", True),
    ("null", None),
    ("list", [4]),
    ("memory-unit", "4Gi"),
)
def test_cpu_rejects(value):
    assert_rejected(parse_cpu_milli, value, CPU_FORMS)


# ------------------------------------------------------------------ memory


@cases(
    ("mebibytes", "512Mi", 512),
    ("gibibytes", "8Gi", 8192),
    ("tebibytes", "1Ti", 1024 * 1024),
    ("decimal-gigabytes", "2G", 1907),
    ("decimal-megabytes", "1000M", 954),
    ("fractional-gibibytes", "1.5Gi", 1536),
    ("byte-suffix", "512MiB", 512),
    ("zero-number", 0, 0),
    ("zero-text", "0", 0),
    ("zero-with-unit", "0Gi", 0),
)
def test_memory_forms(value, expected):
    assert parse_mem_mib(value) == expected


@bad_cases(
    ("no-unit-number", 512),
    ("no-unit-text", "512"),
    ("unit-only", "Gi"),
    ("unknown-unit", "8Xi"),
    ("negative", "-1Gi"),
    ("lowercase-unit", "8gi"),
    ("exponent", "1e3Mi"),
    ("bool", True),
    ("null", None),
)
def test_memory_rejects(value):
    assert_rejected(parse_mem_mib, value, MEM_FORMS)


# ------------------------------------------------------------------ accelerator share


@cases(
    ("quarter", 0.25, 250),
    ("half", 0.5, 500),
    ("one", 1, 1000),
    ("eight", 8, 8000),
    ("whole-float", 2.0, 2000),
    ("thousandth", 0.001, 1),
    ("fraction-as-text", "0.5", 500),
)
def test_device_count_forms(value, expected):
    assert parse_device_milli(value) == expected


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (1.5, "a count of 1 or more must be a whole number"),
        (2.25, "a count of 1 or more must be a whole number"),
        (0, "it must be above 0"),
        (-1, "it must be above 0"),
        (math.nan, "it must be above 0"),
        ("two", ""),
        (True, ""),
        (None, ""),
        (0.0001, "finer than a thousandth of a device"),
    ],
    ids=["fraction-above-one", "quarter-above-one", "zero", "negative", "nan", "word", "bool",
         "null", "finer-than-milli"],
)
def test_device_count_rejects(value, hint):
    assert_rejected(parse_device_milli, value, DEVICE_FORMS, hint=hint)


# ------------------------------------------------------------------ bandwidth


@cases(
    ("megabits", "200Mbps", 200.0),
    ("gigabits", "10Gbps", 10000.0),
    ("fast", "400Gbps", 400000.0),
    ("kilobits", "500Kbps", 0.5),
    ("terabits", "1Tbps", 1e6),
    ("space", "10 Gbps", 10000.0),
    ("fractional", "1.5Gbps", 1500.0),
)
def test_bandwidth_forms(value, expected):
    assert parse_bandwidth_mbps(value) == pytest.approx(expected)


@bad_cases(
    ("bare-number", 200),
    ("bare-text", "200"),
    ("lowercase", "10gbps"),
    ("bytes", "10GB/s"),
    ("words", "10 furlongs"),
    ("null", None),
)
def test_bandwidth_rejects(value):
    assert_rejected(parse_bandwidth_mbps, value, BANDWIDTH_FORMS)


def test_bandwidth_zero_says_above_zero():
    assert_rejected(parse_bandwidth_mbps, "0Mbps", BANDWIDTH_FORMS, hint="above 0")


def test_bandwidth_bad_form_does_not_blame_the_sign():
    with pytest.raises(QuantityError) as info:
        parse_bandwidth_mbps("10gbps")
    assert "above 0" not in str(info.value)


# ------------------------------------------------------------------ durations


@cases(
    ("seconds", "30s", 30.0),
    ("minutes", "10m", 600.0),
    ("hours", "2h", 7200.0),
    ("days", "1d", 86400.0),
    ("compound", "1h20m", 4800.0),
    ("compound-spaced", "1h 20m", 4800.0),
    ("milliseconds", "500ms", 0.5),
    ("fractional-hours", "1.5h", 5400.0),
    ("number", 90, 90.0),
    ("float-number", 2.5, 2.5),
    ("number-as-text", "90", 90.0),
    ("zero", 0, 0.0),
)
def test_duration_forms(value, expected):
    assert parse_duration_s(value) == pytest.approx(expected)


@bad_cases(
    ("words", "5 minutes"),
    ("unit-only", "h"),
    ("unknown-unit", "3w"),
    ("trailing-number", "1m1"),
    ("negative-text", "-5s"),
    ("negative-number", -1),
    ("inf", math.inf),
    ("empty", ""),
    ("bool", True),
    ("null", None),
)
def test_duration_rejects(value):
    assert_rejected(parse_duration_s, value, DURATION_FORMS)


# ------------------------------------------------------------------ rates


@cases(
    ("per-second", "2/s", 2.0),
    ("one-per-five-minutes", "1/5m", 1 / 300),
    ("per-hour", "10/h", 10 / 3600),
    ("one-per-ten-seconds", "1/10s", 0.1),
    ("per-day", "24/d", 24 / 86400),
    ("spaced", "3 / 2m", 3 / 120),
)
def test_rate_forms(value, expected):
    assert parse_rate_per_s(value) == pytest.approx(expected)


@bad_cases(
    ("bare-number", 2),
    ("bare-text", "2"),
    ("no-count", "/s"),
    ("unknown-unit", "2/x"),
    ("words", "often"),
    ("null", None),
)
def test_rate_rejects(value):
    assert_rejected(parse_rate_per_s, value, RATE_FORMS)


@bad_cases(("zero-count", "0/s"), ("zero-period", "1/0s"))
def test_rate_zero_says_above_zero(value):
    assert_rejected(parse_rate_per_s, value, RATE_FORMS, hint="above 0")


# ------------------------------------------------------------------ distributions


@cases(
    ("lognormal", "lognormal(300s, 1.0)", Distribution("lognormal", (300.0, 1.0))),
    ("lognormal-minutes", "lognormal(30m, 0.6)", Distribution("lognormal", (1800.0, 0.6))),
    ("lognormal-zero-sigma", "lognormal(1m, 0)", Distribution("lognormal", (60.0, 0.0))),
    ("exponential", "exponential(5m)", Distribution("exponential", (300.0,))),
    ("exponential-seconds", "exponential(90)", Distribution("exponential", (90.0,))),
    ("uniform", "uniform(1m, 2m)", Distribution("uniform", (60.0, 120.0))),
    ("uniform-equal", "uniform(1m,1m)", Distribution("uniform", (60.0, 60.0))),
    ("spaced", " uniform( 10s , 20s ) ", Distribution("uniform", (10.0, 20.0))),
)
def test_distribution_forms(value, expected):
    assert parse_distribution(value) == expected


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("normal(1m, 2m)", ""),
        ("lognormal(30m)", ""),
        ("exponential(1m, 2m)", ""),
        ("uniform(, 1m)", ""),
        ("lognormal(300s, x)", ""),
        ("lognormal(5 minutes, 1)", ""),
        ("lognormal 300s 1.0", ""),
        (5, ""),
        (None, ""),
        ("uniform(2m, 1m)", "uniform needs LOW <= HIGH"),
        ("lognormal(0s, 1)", "lognormal needs MEDIAN > 0, SIGMA >= 0"),
        ("lognormal(30m, -1)", "lognormal needs MEDIAN > 0, SIGMA >= 0"),
        ("exponential(0)", "exponential needs MEAN > 0"),
        ("lognormal(30m, nan)", "finite"),
        ("lognormal(30m, inf)", "finite"),
    ],
    ids=["unknown-name", "missing-sigma", "extra-argument", "empty-argument", "sigma-not-number",
         "median-not-duration", "no-parentheses", "number", "null", "uniform-reversed",
         "lognormal-zero-median", "lognormal-negative-sigma", "exponential-zero-mean",
         "sigma-nan", "sigma-inf"],
)
def test_distribution_rejects(value, hint):
    assert_rejected(parse_distribution, value, DISTRIBUTION_FORMS, hint=hint)


def test_distribution_prints_its_parameters():
    assert str(parse_distribution("lognormal(5m, 0.5)")) == "lognormal(300, 0.5)"


# ------------------------------------------------------------------ formatting


@cases(
    ("seconds", 45, "45s"),
    ("fraction", 0.5, "0.5s"),
    ("minutes-seconds", 90, "1m30s"),
    ("hours-minutes", 4800, "1h20m"),
    ("day", 86400, "1d"),
)
def test_format_duration(value, expected):
    assert format_duration(value) == expected


@pytest.mark.parametrize("text", ["30s", "10m", "2h", "1d", "1h20m", "1d2h3m4s"])
def test_format_duration_round_trips(text):
    assert format_duration(parse_duration_s(text)) == text
