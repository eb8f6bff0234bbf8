"""A stateless service for the real executors: a heartbeat a second until stopped."""

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
name = os.environ.get("SUANLI_TASK", "service")
beat = 0
while True:
    beat += 1
    print(f"{name} on {os.environ.get('SUANLI_NODE')}: beat {beat}", flush=True)
    time.sleep(1.0)
