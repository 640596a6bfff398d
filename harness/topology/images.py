"""Container images of the Compose backend: the official images where a registry serves them
(``postgres:15``, ``mariadb:10.11``, ``ghcr.io/shopify/toxiproxy:2.12.0``), else local stand-ins built here without any
registry - a Debian base from ``mmdebstrap`` fed the host's own apt sources, PostgreSQL 15 and
MariaDB 10.11 ``FROM`` it, and the real Toxiproxy binaries ``FROM scratch`` (like the official image).

Each stand-in is cached by its tag plus a label holding a hash of its build context, rebuilt only
when that changes; a rebuild removes this harness's superseded image of that name and nothing else.
:func:`image_for` says which image a compose file runs (env override, official, stand-in)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import MissingDependencyError, TopologyError
from harness.resources import checkout_root, resource

HASH_LABEL = "io.failover-harness.context-hash"
NAME_LABEL = "io.failover-harness.image"
HOST_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")


@dataclass(frozen=True)
class ImageSpec:
    """One image the compose files use: ``official`` name, local stand-in ``local`` tag, the compose
    variable that overrides it, the folder of its build context under ``compose/images``, and whether
    its Dockerfile builds ``FROM`` the Debian base (then the base's hash is part of its own)."""

    name: str
    official: str | None
    local: str
    variable: str | None
    context: str
    from_base: bool = False


BASE = ImageSpec("base", None, "failover-harness/debian:bookworm", None, "base")
POSTGRES = ImageSpec("postgres", "postgres:15", "failover-harness/postgres:15", "FH_POSTGRES_IMAGE", "postgres",
                     from_base=True)
MARIADB = ImageSpec("mariadb", "mariadb:10.11", "failover-harness/mariadb:10.11", "FH_MARIADB_IMAGE", "mariadb",
                    from_base=True)
TOXIPROXY = ImageSpec("toxiproxy", "ghcr.io/shopify/toxiproxy:2.12.0", "failover-harness/toxiproxy:2.12.0",
                      "FH_TOXIPROXY_IMAGE", "toxiproxy")
RUNTIME_IMAGES = (POSTGRES, MARIADB, TOXIPROXY)
#: The images a run of each database engine needs (its servers', the fault proxy's).
ENGINE_IMAGES = {"postgres": (POSTGRES, TOXIPROXY), "mariadb": (MARIADB, TOXIPROXY)}


def toxiproxy_dir() -> Path:
    """The real Toxiproxy 2.12.0 binaries: env ``FAILOVER_HARNESS_TOXIPROXY_DIR``, else the nearest
    ``shared/toxiproxy`` above the harness checkout (``../shared/toxiproxy`` in CI), or above the current
    directory for an installed harness."""
    configured = os.environ.get("FAILOVER_HARNESS_TOXIPROXY_DIR")
    if configured:
        return Path(configured)
    start = checkout_root() or Path.cwd()
    candidates = [base / "shared" / "toxiproxy" for base in [start, *start.parents]]
    return next((c for c in candidates if c.is_dir()), candidates[0])


def context_dir(spec: ImageSpec) -> Path:
    """The build-context folder of a stand-in image (``compose/images/<name>``)."""
    return resource("compose", "images", spec.context)


def _hash_files(paths: list[tuple[str, Path]], *extra: str) -> str:
    digest = hashlib.sha256()
    for text in extra:
        digest.update(text.encode() + b"\0")
    for rel, path in sorted(paths):
        digest.update(rel.encode() + b"\0")
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def _context_files(spec: ImageSpec) -> list[tuple[str, Path]]:
    root = context_dir(spec)
    files = [(str(p.relative_to(root)), p) for p in root.rglob("*") if p.is_file()]
    if spec is TOXIPROXY:
        src = toxiproxy_dir()
        for binary in ("toxiproxy-server", "toxiproxy-cli"):
            if not (src / binary).is_file():
                raise MissingDependencyError(
                    f"the real Toxiproxy binaries are not in {src} ({binary} missing); point "
                    "FAILOVER_HARNESS_TOXIPROXY_DIR at the folder holding toxiproxy-server and toxiproxy-cli")
            files.append((binary, src / binary))
    return files


def context_hash(spec: ImageSpec, base_hash: str = "") -> str:
    """The hash of an image's build context (for the base: the bootstrap recipe and the host's
    apt sources; for an image ``FROM`` the base it includes the base's hash, so a new base rebuilds it)."""
    if spec is BASE:
        sources = HOST_SOURCES.read_bytes().decode(errors="replace") if HOST_SOURCES.exists() else ""
        return _hash_files(_context_files(spec), sources)
    return _hash_files(_context_files(spec), base_hash)


def _labels(image: Any) -> dict[str, str]:
    return dict((image.attrs.get("Config") or {}).get("Labels") or {})


def local_image(client: Any, tag: str) -> Any | None:
    """The image called ``tag`` on the engine, or None."""
    import docker

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def image_for(spec: ImageSpec, client: Any) -> str:
    """The image a compose file runs for ``spec``: the variable's value when set in the environment,
    else the official image when the engine has it, else the local stand-in (MissingDependencyError
    naming ``failover-harness compose-setup`` when there is neither)."""
    if spec.variable and os.environ.get(spec.variable):
        return os.environ[spec.variable]
    for tag in (spec.official, spec.local):
        if tag and local_image(client, tag) is not None:
            return tag
    raise MissingDependencyError(f"no {spec.name} image on the Docker engine (neither {spec.official} nor "
                                 f"{spec.local}); run 'failover-harness compose-setup'")


class ImageBuilder:
    """Builds or pulls the images of the Compose backend, saying what it does (``say``)."""

    def __init__(self, client: Any, say: Callable[[str], None]) -> None:
        self.client = client
        self.say = say

    def ensure_all(self, pull: bool = True) -> dict[str, str]:
        """Every runtime image: official when present or pullable, else a fresh stand-in. Returns
        name -> image used."""
        used: dict[str, str] = {}
        base_hash: str | None = None
        for spec in RUNTIME_IMAGES:
            assert spec.official is not None
            if local_image(self.client, spec.official) is not None:
                used[spec.name] = spec.official
                continue
            fresh_local = self._fresh(spec, base_hash if spec.from_base else "")
            if fresh_local:
                used[spec.name] = spec.local
                continue
            if pull and self._try_pull(spec.official):
                used[spec.name] = spec.official
                continue
            if spec.from_base and base_hash is None:
                base_hash = self.ensure_base()
            used[spec.name] = self.build(spec, base_hash if spec.from_base else "")
        return used

    def _fresh(self, spec: ImageSpec, base_hash: str | None) -> bool:
        image = local_image(self.client, spec.local)
        if image is None:
            return False
        if spec.from_base and base_hash is None:
            base = local_image(self.client, BASE.local)
            base_hash = _labels(base).get(HASH_LABEL, "") if base is not None else context_hash(BASE)
        return _labels(image).get(HASH_LABEL) == context_hash(spec, base_hash or "")

    def _try_pull(self, tag: str) -> bool:
        import docker

        self.say(f"pulling {tag}")
        try:
            self.client.images.pull(tag)
        except docker.errors.APIError as exc:
            self.say(f"cannot pull {tag} ({str(exc).splitlines()[0][:160]}); building a local stand-in")
            return False
        return True

    def ensure_base(self) -> str:
        """The Debian base image (``mmdebstrap --variant=minbase bookworm`` fed the host's apt sources);
        returns its context hash."""
        wanted = context_hash(BASE)
        image = local_image(self.client, BASE.local)
        if image is not None and _labels(image).get(HASH_LABEL) == wanted:
            return wanted
        if shutil.which("mmdebstrap") is None:
            raise MissingDependencyError("mmdebstrap is not installed (it builds the base image without a "
                                         "registry); apt-get install -y mmdebstrap, or run "
                                         "'failover-harness compose-setup'")
        if not HOST_SOURCES.exists():
            raise MissingDependencyError(f"{HOST_SOURCES} is missing: the base image is bootstrapped from the "
                                         "host's own Debian sources")
        old = image.id if image is not None else None
        self.say(f"building {BASE.local} with mmdebstrap (minbase bookworm, the host's apt sources; ~30 s)")
        with tempfile.TemporaryDirectory(prefix="fh-base-") as tmp:
            tarball = Path(tmp) / "rootfs.tar"
            res = subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", "bookworm", str(tarball),
                                  str(HOST_SOURCES)], capture_output=True, text=True, timeout=900)
            if res.returncode != 0:
                raise TopologyError(f"mmdebstrap failed (exit {res.returncode}): {res.stderr.strip()[-800:]}")
            changes = [f"LABEL {HASH_LABEL}={wanted}", f"LABEL {NAME_LABEL}={BASE.name}", 'CMD ["bash"]']
            cmd = ["docker", "import", *(a for c in changes for a in ("--change", c)), str(tarball), BASE.local]
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if res.returncode != 0:
                raise TopologyError(f"docker import of the base image failed: {res.stderr.strip()[-800:]}")
        self._remove_superseded(BASE, wanted, old)
        return wanted

    def build(self, spec: ImageSpec, base_hash: str = "") -> str:
        """Build the stand-in of ``spec`` (``docker build --network host``), labelled with its context
        hash; removes the superseded image of that name. Returns its tag."""
        import docker

        wanted = context_hash(spec, base_hash)
        image = local_image(self.client, spec.local)
        old = image.id if image is not None else None
        self.say(f"building {spec.local} (context hash {wanted})")
        with tempfile.TemporaryDirectory(prefix=f"fh-{spec.name}-") as tmp:
            for rel, path in _context_files(spec):
                dest = Path(tmp) / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dest)
            try:
                self.client.images.build(path=tmp, tag=spec.local, network_mode="host", rm=True, forcerm=True,
                                         buildargs={"BASE": BASE.local},
                                         labels={HASH_LABEL: wanted, NAME_LABEL: spec.name})
            except docker.errors.BuildError as exc:
                log = "".join(str(c.get("stream", "")) for c in exc.build_log)[-1500:]
                raise TopologyError(f"building {spec.local} failed: {exc}\n{log}") from None
        self._remove_superseded(spec, wanted, old)
        return spec.local

    def _remove_superseded(self, spec: ImageSpec, wanted: str, old_id: str | None) -> None:
        import docker

        for image in self.client.images.list(filters={"label": f"{NAME_LABEL}={spec.name}"}):
            if _labels(image).get(HASH_LABEL) != wanted or (old_id and image.id == old_id and spec.local not in
                                                              image.tags):
                self.say(f"removing superseded {spec.name} image {image.short_id}")
                with contextlib.suppress(docker.errors.APIError):
                    self.client.images.remove(image.id, noprune=False)
