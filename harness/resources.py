"""The one place that finds the files the harness reads at run time: the shipped suites, the Compose
files and stand-in image contexts, the npm manifests of the Allure command line and of the Node
drivers, and the rulebook the report links to.

Each resource is a package of the distribution (``setup.py`` maps the checkout's folders onto them):

==============================  ======================  =====================================
package                         checkout folder         what
==============================  ======================  =====================================
``failover_harness_suites``     ``suites/``             the pytest suites, one folder per profile
``failover_harness_data.compose``  ``compose/``         Compose files, entrypoint, ``images/``
``failover_harness_data.docs``  ``docs/``               ``rules.md`` (the rulebook)
``failover_harness_data.tools`` ``tools/``              ``package.json`` + lock (Allure CLI)
``failover_harness_data.node``  ``tools/drivers/node/`` ``package.json`` + lock (Node drivers)
==============================  ======================  =====================================

An installed wheel (or ``pip install <checkout>``) holds them in site-packages and they are found as
packages. A harness imported from a checkout - an editable install, or ``PYTHONPATH=<checkout>`` -
reads the checkout's own folders (the ones being edited), found beside its ``harness`` package; an
installed harness never looks beside itself."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from harness.errors import ConfigError

SUITES = "failover_harness_suites"
#: resource name -> (package, folder of a checkout that is imported without being installed)
PACKAGES: dict[str, tuple[str, str]] = {
    "suites": (SUITES, "suites"),
    "compose": ("failover_harness_data.compose", "compose"),
    "docs": ("failover_harness_data.docs", "docs"),
    "tools": ("failover_harness_data.tools", "tools"),
    "node": ("failover_harness_data.node", "tools/drivers/node"),
}


def _package_dir(package: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _uninstalled_checkout(folder: str) -> Path | None:
    """``folder`` of the checkout the ``harness`` package is imported from (editable install or
    ``PYTHONPATH``): the folder holding the project's ``pyproject.toml`` beside the package; None for an
    installed harness (site-packages holds no ``pyproject.toml``)."""
    import harness

    root = Path(harness.__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / folder).is_dir():
        return root / folder
    return None


def resource_dir(name: str) -> Path:
    """The folder of the resource ``name`` (a key of :data:`PACKAGES`): a checkout's own folder when the
    harness is imported from one, else the installed package's. ConfigError naming the fix when the
    installation lacks it."""
    package, folder = PACKAGES[name]
    found = _uninstalled_checkout(folder) or _package_dir(package)
    if found is None or not found.is_dir():
        raise ConfigError(f"the harness's {name} ({package}) are not installed with it; reinstall the package "
                          "(pip install --force-reinstall failover-harness)")
    return found


def resource(name: str, *parts: str) -> Path:
    """A file or folder inside the resource ``name`` (e.g. ``resource("compose", "pg-pair.yml")``)."""
    return resource_dir(name).joinpath(*parts)


def suites_dir() -> Path:
    """The shipped suites' folder (``<suites>/<profile folder>/test_*.py``)."""
    return resource_dir("suites")


def rulebook() -> Path:
    """The rulebook the report links each rule to (``docs/rules.md``)."""
    return resource("docs", "rules.md")


def checkout_root() -> Path | None:
    """The harness checkout the package is imported from (editable install or ``PYTHONPATH``), else
    None: an installed harness has no checkout, and nothing is looked for or written beside it."""
    found = _uninstalled_checkout("harness")
    return found.parent if found else None
