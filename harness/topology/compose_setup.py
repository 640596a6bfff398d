"""Set-up of the Compose backend (``failover-harness compose-setup`` = ``failover-harness compose-setup``):
idempotent, saying what it does, quick when nothing is missing.

1. the Docker engine and CLI (Debian ``docker.io``) where missing;
2. Compose v2 where ``docker compose`` does not answer: the ``docker-compose`` package of Debian
   *trixie* from the host's own archive (Debian-signed; bookworm has only v1), fetched with
   ``apt-get download`` under a temporary apt configuration of its own so the host's apt sources
   and state stay untouched, its plugin extracted into ``/usr/local/lib/docker/cli-plugins``;
3. an engine that answers (:func:`harness.topology.dockerd.ensure_engine`: never a second one);
4. the images (:class:`harness.topology.images.ImageBuilder`: official when a registry serves them,
   else local stand-ins cached by tag and context hash)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness.errors import MissingDependencyError, TopologyError
from harness.topology import dockerd
from harness.topology.images import HOST_SOURCES, ImageBuilder

PLUGIN_DIR = Path("/usr/local/lib/docker/cli-plugins")
#: command or file to check -> Debian package providing it (installed where missing).
NEED = {"dockerd": "docker.io", "docker": "docker.io", "mmdebstrap": "mmdebstrap", "dpkg-deb": "dpkg"}


def compose_version() -> str | None:
    """The version of ``docker compose`` (v2) when it answers, else None."""
    if shutil.which("docker") is None:
        return None
    res = subprocess.run(["docker", "compose", "version", "--short"], capture_output=True, text=True)
    return res.stdout.strip() if res.returncode == 0 and res.stdout.strip() else None


def _apt_install(packages: list[str], say: Callable[[str], None]) -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise MissingDependencyError(f"missing: {', '.join(packages)}; install them (Debian: apt-get install -y "
                                     f"--no-install-recommends {' '.join(packages)}) and run again")
    say(f"installing {' '.join(packages)} (apt)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, capture_output=True)
    res = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise MissingDependencyError(f"apt-get install {' '.join(packages)} failed: {res.stderr.strip()[-600:]}")


def archive_uri(sources: Path = HOST_SOURCES) -> str:
    """The host's own Debian archive (the first ``URIs:`` of a stanza with a ``bookworm`` suite that
    is not the security archive), read from its deb822 sources file."""
    try:
        text = sources.read_text()
    except OSError:
        raise MissingDependencyError(f"{sources} is missing: Compose v2 is fetched from the host's own "
                                     "Debian archive; install docker-compose v2 yourself") from None
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, re.M))
        suites = fields.get("Suites", "").split()
        if "bookworm" in suites and fields.get("URIs"):
            return fields["URIs"].split()[0]
    raise MissingDependencyError(f"{sources} names no bookworm archive to fetch Compose v2 from")


def install_compose_plugin(say: Callable[[str], None]) -> str:
    """Install Compose v2 from Debian trixie's ``docker-compose`` package (see module docstring)."""
    if os.geteuid() != 0:
        raise MissingDependencyError("Compose v2 ('docker compose') is missing and only root can install it "
                                     "here; install docker-compose v2 or run 'failover-harness compose-setup' as root")
    say("installing Compose v2: Debian trixie's docker-compose package from the host's archive "
        "(temporary apt configuration; the host's apt state is untouched)")
    uri = archive_uri()
    with tempfile.TemporaryDirectory(prefix="fh-compose-") as tmp:
        t = Path(tmp)
        (t / "lists" / "partial").mkdir(parents=True)
        (t / "cache" / "archives" / "partial").mkdir(parents=True)
        (t / "parts").mkdir()
        (t / "sources.list").write_text(
            f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {uri} trixie main\n")
        opts = ["-o", f"Dir::Etc::SourceList={t / 'sources.list'}", "-o", f"Dir::Etc::SourceParts={t / 'parts'}",
                "-o", f"Dir::State::Lists={t / 'lists'}", "-o", f"Dir::Cache={t / 'cache'}",
                "-o", "Debug::NoLocking=1", "-qq"]
        for step in (["update"], ["download", "docker-compose"]):
            res = subprocess.run(["apt-get", *opts, *step], cwd=t, capture_output=True, text=True, timeout=300)
            if res.returncode != 0:
                raise MissingDependencyError(f"apt-get {step[0]} (trixie, temporary configuration) failed: "
                                             f"{(res.stderr or res.stdout).strip()[-600:]}")
        debs = glob.glob(str(t / "docker-compose_*.deb"))
        if not debs:
            raise MissingDependencyError("apt-get download docker-compose fetched no package")
        subprocess.run(["dpkg-deb", "-x", debs[0], str(t / "x")], check=True)
        plugin = t / "x" / "usr" / "libexec" / "docker" / "cli-plugins" / "docker-compose"
        if not plugin.is_file():
            raise TopologyError(f"{Path(debs[0]).name} holds no Compose v2 plugin")
        PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copy2(plugin, PLUGIN_DIR / "docker-compose")
        (PLUGIN_DIR / "docker-compose").chmod(0o755)
    version = compose_version()
    if version is None:
        raise TopologyError(f"Compose v2 was installed in {PLUGIN_DIR} but 'docker compose version' fails")
    return version


def setup(say: Callable[[str], None], pull: bool = True) -> dict[str, str]:
    """Everything the Compose backend needs (module docstring); returns what it found or did."""
    t0 = time.monotonic()
    missing = sorted({pkg for probe, pkg in NEED.items() if shutil.which(probe) is None})
    if missing:
        _apt_install(missing, say)
    version = compose_version() or install_compose_plugin(say)
    engine = dockerd.ensure_engine(say)
    client = dockerd.docker_client()
    try:
        used = ImageBuilder(client, say).ensure_all(pull=pull)
        info = client.version()
    finally:
        client.close()
    result = {"engine": f"{info.get('Version', '?')} ({engine})", "compose": version, **used,
              "seconds": f"{time.monotonic() - t0:.1f}"}
    say("ready: " + ", ".join(f"{k} {v}" for k, v in result.items()))
    return result

