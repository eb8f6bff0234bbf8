"""A container image for tests, built here from the distribution's
``busybox-static`` (no registry is reached): ``podman import`` of a root
filesystem that holds busybox and its applets."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

IMAGE = "localhost/suanli-test-busybox:2"
APPLETS = ("sh", "echo", "cat", "sleep", "ls", "id", "env", "dd", "touch", "rm", "mkdir", "true", "false", "seq",
           "head", "sort", "grep", "wc", "uname", "test", "[")


def podman_missing() -> str | None:
    from suanli.executors.podman import podman_problem

    return podman_problem() or (None if Path("/bin/busybox").exists() else "no /bin/busybox (busybox-static)")


def image() -> str:
    """The test image (built once per machine); the test is skipped where
    podman is missing, and fails so under CI."""
    why = podman_missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"containers are needed under CI: {why}")
        pytest.skip(f"no containers here: {why}")
    podman = [shutil.which("podman"), "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    if subprocess.run([*podman, "image", "exists", IMAGE]).returncode == 0:
        return IMAGE
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, "root")
        for d in ("bin", "tmp", "etc", "suanli/state", "suanli/home"):
            (root / d).mkdir(parents=True)
        (root / "tmp").chmod(0o1777)
        shutil.copy2("/bin/busybox", root / "bin" / "busybox")
        for applet in APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
        tar = Path(tmp, "root.tar")
        with tarfile.open(tar, "w") as t:
            t.add(root, arcname=".")
        done = subprocess.run([*podman, "import", "--change", "CMD=/bin/sh", str(tar), IMAGE], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr
    return IMAGE
