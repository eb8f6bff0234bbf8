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
