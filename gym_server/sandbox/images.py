"""Building the sandbox image offline: a debootstrap rootfs with python3, imported into Docker.

Where a registry is reachable, `sandbox/Dockerfile` builds the same image the usual way. Where none is
(air-gapped clusters, this project's CI), only a Debian mirror is: `debootstrap --variant=minbase` makes
a small Debian root with python3, we trim caches and docs, stream it as a tar into the engine with
`docker import`, and set the configuration a `FROM scratch` image would need (command, user, work dir,
environment) through import "changes". The container's main process runs as uid 65533 and model code as
65534, so nothing a model runs can signal the process that keeps its container alive.
The same rootfs can back the bubblewrap backend (`BubblewrapBackend(rootfs=...)`).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_MIRROR",
    "DEFAULT_PACKAGES",
    "IMAGE_CHANGES",
    "build_image",
    "build_rootfs",
    "image_exists",
    "import_rootfs",
]

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "gym-sandbox:latest"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SUITE = "bookworm"
DEFAULT_PACKAGES = ("python3", "ca-certificates")
MAIN_USER = "65533:65533"  # keeps the container alive; model code (uid 65534) cannot signal it

IMAGE_CHANGES = (
    'CMD ["sleep", "infinity"]',
    f"USER {MAIN_USER}",
    "WORKDIR /work",
    "ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 HOME=/work TMPDIR=/tmp PYTHONDONTWRITEBYTECODE=1",
    "LABEL gym-server.image=sandbox",
)

# Trimmed from the rootfs: nothing a sandboxed program needs, a third of the size.
_TRIM = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/log",
)


def build_rootfs(
    target: Path,
    *,
    suite: str = DEFAULT_SUITE,
    mirror: str = DEFAULT_MIRROR,
    packages: Sequence[str] = DEFAULT_PACKAGES,
) -> Path:
    """Run debootstrap into `target` (root only, blocking, about a minute) and trim it.

    Raises:
        RuntimeError: debootstrap is missing or failed (its last output lines are in the message).
    """
    debootstrap = shutil.which("debootstrap", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if debootstrap is None:
        raise RuntimeError("debootstrap is not installed (Debian: apt-get install debootstrap)")
    argv = [debootstrap, "--variant=minbase", f"--include={','.join(packages)}", suite, str(target), mirror]
    log.info("running %s", " ".join(argv))
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"debootstrap failed with exit code {done.returncode}:\n{tail}")
    for relative in _TRIM:
        folder = target / relative
        if folder.is_dir():
            for child in folder.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
    for name in ("work", "tmp"):
        (target / name).mkdir(exist_ok=True)
    (target / "work").chmod(0o755)
    (target / "tmp").chmod(0o1777)
    return target


def _tar_rootfs(root: Path, tar_path: Path) -> None:
    """A tar of the rootfs with numeric owners, as `tar -C root -c .` would write it."""
    with tarfile.open(tar_path, "w") as archive:
        for child in sorted(root.iterdir()):
            archive.add(child, arcname=child.name, recursive=True)


def import_rootfs(client: Any, root: Path, tag: str = DEFAULT_IMAGE) -> str:
    """Import a rootfs folder into the engine behind `client` (a `docker.DockerClient`); returns the image."""
    repository, _, version = tag.partition(":")
    with tempfile.TemporaryDirectory(prefix="gym-image-") as scratch:
        tar_path = Path(scratch) / "rootfs.tar"
        _tar_rootfs(root, tar_path)
        client.api.import_image_from_file(
            str(tar_path), repository=repository, tag=version or "latest", changes=list(IMAGE_CHANGES)
        )
    image = client.images.get(tag)
    return str(image.id)


def image_exists(client: Any, tag: str = DEFAULT_IMAGE) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_image(
    client: Any,
    tag: str = DEFAULT_IMAGE,
    *,
    suite: str = DEFAULT_SUITE,
    mirror: str = DEFAULT_MIRROR,
    packages: Sequence[str] = DEFAULT_PACKAGES,
    keep_rootfs: Path | None = None,
) -> str:
    """debootstrap, trim, import: the whole offline build. Returns the new image id.

    Args:
        client: a `docker.DockerClient` for the engine that receives the image.
        tag: the image name the Docker backend starts (`GYM_SANDBOX__IMAGE`).
        keep_rootfs: also keep the rootfs at this path (for `BubblewrapBackend(rootfs=...)`).
    """
    if keep_rootfs is not None:
        # Built in place: moving a rootfs across folders may fall back to copying, and copying reads
        # device nodes such as /dev/zero as if they were files.
        if keep_rootfs.exists():
            shutil.rmtree(keep_rootfs)
        keep_rootfs.parent.mkdir(parents=True, exist_ok=True)
        root = build_rootfs(keep_rootfs, suite=suite, mirror=mirror, packages=packages)
        image_id = import_rootfs(client, root, tag)
    else:
        with tempfile.TemporaryDirectory(prefix="gym-rootfs-") as scratch:
            root = build_rootfs(Path(scratch) / "rootfs", suite=suite, mirror=mirror, packages=packages)
            image_id = import_rootfs(client, root, tag)
    log.info("built sandbox image %s (%s)", tag, image_id)
    return image_id
