"""Keyword builders for documents, so each test states only what it is about.

``world(tmp_path, sites=[...], tenants=[...], apps=[...], vcs=[...])`` writes
one YAML file and returns its path; the builders fill sensible defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def node_group(name="n", count=1, cpu=16, memory="64Gi", arch="x86_64", accelerators=(), fabrics=None, **extra):
    g = {"name": name, "count": count, "arch": arch, "cpu": cpu, "memory": memory}
    if accelerators:
        g["accelerators"] = list(accelerators)
    if fabrics:
        g["fabrics"] = fabrics
    g.update(extra)
    return g


def gpu(count=1, model="A100", shareable=True, kind="gpu"):
    return {"kind": kind, "model": model, "count": count, "shareable": shareable}


def site(name, tier="cloud", groups=(), **extra):
    return {"name": name, "tier": tier, "nodeGroups": list(groups) or [node_group()], **extra}


def link(a, b, rtt=5, bandwidth="10Gbps"):
    return {"between": [a, b], "rttMs": rtt, "bandwidth": bandwidth}


def tenant(name="t", **spec):
    return {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": name}, "spec": spec}


def component(name="c", lifetime="service", cpu=1, memory="1Gi", accelerators=(), **extra):
    c: dict[str, Any] = {"name": name, "lifetime": lifetime, "resources": {"cpu": cpu, "memory": memory}}
    if accelerators:
        c["resources"]["accelerators"] = list(accelerators)
    if lifetime == "job" and "duration" not in extra and "work" not in extra:
        c["duration"] = "1h"
    c.update(extra)
    return c


def app(name="a", tenant="t", components=(), **spec):
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name, "tenant": tenant},
            "spec": {"components": list(components) or [component()], **spec}}


def vc(name="v", tenant="t", groups=(), **spec):
    return {"apiVersion": "suanli/v1", "kind": "VirtualCluster", "metadata": {"name": name, "tenant": tenant},
            "spec": {"hostGroups": list(groups), **spec}}


def world(tmp_path: Path, sites=(), links=(), tenants=None, apps=(), vcs=()) -> Path:
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"sites": list(sites) or [site("s1")], "links": list(links)}}
    docs = [fleet, *(tenants if tenants is not None else [tenant()]), *vcs, *apps]
    path = tmp_path / "world.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def scenario(tmp_path: Path, sites=(), apps=(), tenants=None, vcs=(), links=(), until="1h", arrivals=(),
             events=(), policy=None, name="scenario.yaml") -> Path:
    """A world and a Scenario over it, in one file; returns its path."""
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"sites": list(sites) or [site("s1")], "links": list(links)}}
    spec: dict[str, Any] = {"until": until, "arrivals": list(arrivals), "events": list(events)}
    if policy:
        spec["policy"] = {"rescheduling": policy}
    docs = [fleet, *(tenants if tenants is not None else [tenant()]), *vcs, *apps,
            {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"}, "spec": spec}]
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path
