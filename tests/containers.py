"""The test image (``executors.images``): made once per machine; the test
is skipped where podman or busybox-static is missing, and fails so under CI."""

from __future__ import annotations

import os

import pytest


def image() -> str:
    from suanli.executors.images import busybox_image
    from suanli.executors.podman import podman_problem

    why = podman_problem()
    if why is None:
        try:
            return busybox_image()
        except RuntimeError as exc:
            why = str(exc)
    if os.environ.get("CI"):
        pytest.fail(f"containers are needed under CI: {why}")
    pytest.skip(f"no containers here: {why}")


# A stateful counter in a container: it resumes from its state folder, ticks,
# checkpoints on SIGUSR1 and saves and leaves on SIGTERM (the checkpoint protocol).
COUNTER = ('n=$(cat "$SUANLI_STATE_DIR/count" 2>/dev/null || echo 0); echo "counter: resuming after $n"; '
           'save() { echo $n > "$SUANLI_STATE_DIR/count"; }; '
           'trap \'save; echo "counter: saved $n, leaving"; exit 0\' TERM; '
           'trap \'save; touch "$SUANLI_STATE_DIR/.checkpointed"\' USR1; '
           'while true; do n=$((n + 1)); echo "tick $n"; sleep 0.1; done')
