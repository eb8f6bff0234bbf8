"""Instructions a short task costs, counted, not timed.

On a machine whose speed wanders by a quarter within the hour, a change
worth a few percent cannot be seen in CPU seconds. This counts the
instructions (valgrind's cachegrind, its cache simulation off) of
``bench_short_tasks.py`` at two lengths of the same world and divides
their difference by the difference of the tasks done: what one more task
costs, without the loading, the compiled loops' cache, the warm-up world
and the outputs, which both runs share. The count is the same from run to
run (string hashing fixed: ``PYTHONHASHSEED=0``).

Each tree first runs a small world under valgrind once, uncounted, so
that its compiled loops are in their cache for the machine valgrind
presents. ``--against REV`` counts a worktree of ``REV`` too, with this
tree's ``bench_short_tasks.py`` (its ``src`` first on the path), two runs at
a time. Needs ``valgrind``; about 20 times slower than the run itself.
Prints one JSON object.

    .venv/bin/python bench/bench_task_instructions.py [--devices 1000] [--seconds 15,30] [--against REV]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def counted(src: Path, devices: int, seconds: float) -> tuple[int, int]:
    """(instructions, tasks finished) of ``bench_short_tasks.py`` with ``src`` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONHASHSEED="0")
    got = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                          sys.executable, str(HERE / "bench_short_tasks.py"), "--devices", str(devices),
                          "--seconds", str(seconds)], env=env, capture_output=True, text=True, check=True)
    refs = re.search(r"I\s+refs:\s+([\d,]+)", got.stderr)
    assert refs is not None, got.stderr[-2000:]
    done = json.loads(got.stdout)["tasks_finished"]
    return int(refs.group(1).replace(",", "")), done


def per_task(src: Path, devices: int, lengths: tuple[float, float], pool: ThreadPoolExecutor) -> dict:
    counted(src, 20, 5)  # the compiled loops cached for valgrind's machine (not counted)
    (a_refs, a_done), (b_refs, b_done) = pool.map(lambda s: counted(src, devices, s), lengths)
    assert b_done > a_done > 0, (a_done, b_done)
    return {"tasks": [a_done, b_done], "instructions": [a_refs, b_refs],
            "instructions_per_task": round((b_refs - a_refs) / (b_done - a_done))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--seconds", default="15,30", help="the two lengths of generation, in seconds")
    ap.add_argument("--against", help="a revision to count too")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench_task_instructions: valgrind is not installed")
    lengths = tuple(float(x) for x in args.seconds.split(","))
    assert len(lengths) == 2 and lengths[0] < lengths[1], "--seconds A,B with A < B"
    out = {"devices": args.devices, "seconds": list(lengths)}
    with ThreadPoolExecutor(2) as pool, tempfile.TemporaryDirectory() as tmp:
        if args.against:
            tree = Path(tmp) / "tree"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tree), args.against],
                           check=True)
            try:
                mine = per_task(REPO / "src", args.devices, lengths, pool)
                theirs = per_task(tree / "src", args.devices, lengths, pool)
            finally:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True)
            out.update(mine)
            out["against"] = {"rev": args.against, **theirs}
            assert theirs["tasks"] == mine["tasks"], (theirs["tasks"], mine["tasks"])  # the same work
            out["ratio_to_against"] = round(mine["instructions_per_task"] / theirs["instructions_per_task"], 4)
        else:
            out.update(per_task(REPO / "src", args.devices, lengths, pool))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
