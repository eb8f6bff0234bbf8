"""An elastic data-parallel trainer for the real executors: its progress
survives resizes.

Each of the gang's ``SUANLI_WORLD_SIZE`` members (rank ``SUANLI_RANK``)
takes a batch of ``TRAIN_BATCH`` samples a step (``TRAIN_STEP_S`` seconds),
so the gang goes through ``world size x batch`` samples a step, and the job
is done after ``TRAIN_SAMPLES``. The members step together, so each knows
how far the gang is; rank 0 keeps the gang's progress in
``$SUANLI_STATE_DIR/progress.json`` by the checkpoint protocol:

- at start every member reads the progress from there: the executor gives
  each member of a resized gang the state its members left, merged, rank
  0's word first (docs/executors.md, "Gangs that change width");
- on SIGUSR1 rank 0 writes it (the others only say they are done), then
  each creates ``.checkpointed``;
- on SIGTERM each member writes what it has and exits.

Rank 0's log, over all the gang's runs, goes on from where the last run
stopped: each run prints ``resuming at sample S with N members``.
"""

import json
import os
import signal
import sys
import time

state = os.environ["SUANLI_STATE_DIR"]
path = os.path.join(state, "progress.json")
rank = int(os.environ.get("SUANLI_RANK", "0"))
world = int(os.environ.get("SUANLI_WORLD_SIZE", "1"))
total = int(os.environ.get("TRAIN_SAMPLES", "1600"))
batch = int(os.environ.get("TRAIN_BATCH", "5"))
step_s = float(os.environ.get("TRAIN_STEP_S", "0.1"))
asked = {"save": False, "exit": False}


def ask(what):
    def handler(signum, frame):
        asked[what] = True
    return handler


signal.signal(signal.SIGUSR1, ask("save"))
signal.signal(signal.SIGTERM, ask("exit"))


def save(samples):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"samples": samples, "saved_by": rank, "world_size": world}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


samples = 0
if os.path.exists(path):
    with open(path) as f:
        samples = json.load(f)["samples"]
print(f"rank {rank} on {os.environ.get('SUANLI_NODE')}: resuming at sample {samples} with {world} members",
      flush=True)
while samples < total:
    if asked["exit"]:
        save(samples)
        print(f"rank {rank}: saved {samples}, leaving", flush=True)
        sys.exit(0)
    if asked["save"]:
        asked["save"] = False
        if rank == 0:
            save(samples)
        open(os.path.join(state, ".checkpointed"), "w").close()
    time.sleep(step_s)
    samples = min(total, samples + world * batch)
    if rank == 0 and samples % (20 * batch) < world * batch:
        print(f"step: {samples} samples", flush=True)
print(f"rank {rank}: done at sample {samples}", flush=True)
