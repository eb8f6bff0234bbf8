"""Helpers for tests that run scenarios for real (``suanli run``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIVE = ROOT / "examples" / "live" / "autodrive.yaml"
GAME = "infotainment/game/0"


def suanli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def events(out: Path) -> list[dict]:
    with open(out / "events.jsonl") as f:
        return [json.loads(line) for line in f]


def placements(evs: list[dict]) -> list[tuple[str, str]]:
    """Every placement, in order: (task, node)."""
    return [(e["task"], e["node"]) for e in evs if e["kind"] == "placed"]


def simulated(scenario: Path, tmp: Path) -> list[dict]:
    r = suanli("simulate", scenario, "--out", tmp / "twin")
    assert r.returncode == 0, r.stderr
    return events(tmp / "twin")


def log_text(work: Path, task: str) -> str:
    r = suanli("logs", task, "--work-dir", work)
    assert r.returncode == 0, r.stderr
    return r.stdout


def ticks(log: str) -> list[int]:
    return [int(line.split()[1]) for line in log.splitlines() if line.startswith("tick ")]


def resumed(log: str) -> list[int]:
    """The counter each run of the game started after."""
    return [int(line.rsplit(" ", 1)[1]) for line in log.splitlines() if ": resuming after " in line]


def ticks_by_run(log: str) -> list[list[int]]:
    """The game's ticks, run by run (each run's output follows a header line)."""
    out: list[list[int]] = []
    for line in log.splitlines():
        if line.startswith("--- suanli: "):
            out.append([])
        elif line.startswith("tick "):
            out[-1].append(int(line.split()[1]))
    return out
