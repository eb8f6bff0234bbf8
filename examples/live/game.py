"""A stateful game for the real executors: a counter that must survive moves.

Every tick it adds one to its counter and prints ``tick N``. It keeps the
counter in ``$SUANLI_STATE_DIR/game.json`` by the checkpoint protocol:

- at start it reads the counter from there (0 when the folder is empty);
- on SIGUSR1 it writes the counter and then creates ``.checkpointed``;
- on SIGTERM it writes the counter and exits.

So its log, over all its runs, counts 1, 2, 3, ... with no number missing
and none twice, wherever it was moved in between.
"""

import json
import os
import signal
import sys
import time

state = os.environ["SUANLI_STATE_DIR"]
path = os.path.join(state, "game.json")
tick_s = float(os.environ.get("GAME_TICK_S", "0.05"))
asked = {"save": False, "exit": False}


def ask(what):
    def handler(signum, frame):
        asked[what] = True
    return handler


signal.signal(signal.SIGUSR1, ask("save"))
signal.signal(signal.SIGTERM, ask("exit"))


def save(count):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"count": count}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


count = 0
if os.path.exists(path):
    with open(path) as f:
        count = json.load(f)["count"]
print(f"game on {os.environ.get('SUANLI_NODE')}: resuming after {count}", flush=True)
while True:
    if asked["exit"]:
        save(count)
        print(f"game: saved {count}, leaving", flush=True)
        sys.exit(0)
    if asked["save"]:
        asked["save"] = False
        save(count)
        open(os.path.join(state, ".checkpointed"), "w").close()
    count += 1
    print(f"tick {count}", flush=True)
    time.sleep(tick_s)
