"""A small container image made on this machine, with no registry: a root
file system of the distribution's ``busybox-static`` (its applets as links),
imported with ``podman import``. The tests, the container benchmark and a
first try of the podman executor run it (``localhost/suanli-busybox:2``)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

BUSYBOX_IMAGE = "localhost/suanli-busybox:2"
APPLETS = ("sh", "echo", "cat", "sleep", "ls", "id", "env", "dd", "touch", "rm", "mkdir", "true", "false", "seq",
           "head", "sort", "grep", "wc", "uname", "test", "[")


def busybox_image(ref: str = BUSYBOX_IMAGE, busybox: str = "/bin/busybox") -> str:
    """``ref``, made from ``busybox`` unless podman has it already; raises
    ``RuntimeError`` saying why it cannot be made."""
    from suanli.executors.podman import podman

    if subprocess.run([*podman(), "image", "exists", ref]).returncode == 0:
        return ref
    if not Path(busybox).exists():
        raise RuntimeError(f"no {busybox} (Debian: apt install busybox-static)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, "root")
        for d in ("bin", "tmp", "etc", "suanli/state", "suanli/home"):
            (root / d).mkdir(parents=True)
        (root / "tmp").chmod(0o1777)
        shutil.copy2(busybox, root / "bin" / "busybox")
        for applet in APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
        tar = Path(tmp, "root.tar")
        with tarfile.open(tar, "w") as t:
            t.add(root, arcname=".")
        done = subprocess.run([*podman(), "import", "--change", "CMD=/bin/sh", str(tar), ref], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise RuntimeError(f"podman import failed: {done.stderr.strip()}")
    return ref
