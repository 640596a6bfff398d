"""What the distribution holds beyond pyproject.toml's metadata.

* The packages: ``harness`` and, mapped onto the checkout's folders, everything the harness reads at
  run time (``harness/resources.py`` finds them, installed or in a checkout): the suites as
  ``failover_harness_suites`` (``suites/``), the Compose files and image contexts
  (``compose/``), the rulebook the report links to (``docs/rules.md``), and the npm manifests with
  their lock files of the Allure command line (``tools/``) and of the Node drivers
  (``tools/drivers/node/``).
* The one compiled part: the persistent proxy's framing walk and one-call tracking
  (harness/persistproxy/frames.py, fastpath.py). ``optional``: without a C compiler the install
  still succeeds and the proxy uses the same walk and tracking in Python (``frames.COMPILED`` and
  ``fastpath.COMPILED`` say which).
"""

import hashlib
import os
import tempfile
from pathlib import Path

from setuptools import Extension, find_packages, setup

SUITES = "failover_harness_suites"
DATA = "failover_harness_data"
SUITE_FOLDERS = sorted(p.name for p in Path("suites").iterdir()
                       if p.is_dir() and not p.name.startswith((".", "_")) and any(p.glob("*.py")))
NPM = ["package.json", "package-lock.json"]

PACKAGE_DIR = {
    SUITES: "suites",
    **{f"{SUITES}.{name}": f"suites/{name}" for name in SUITE_FOLDERS},
    f"{DATA}.compose": "compose",
    f"{DATA}.docs": "docs",
    f"{DATA}.tools": "tools",
    f"{DATA}.node": "tools/drivers/node",
}
PACKAGE_DATA = {
    "harness.clients.lpq": ["node_helper.js", "java/*.java"],
    "harness.clients.app": ["node_pool_helper.js"],
    f"{DATA}.compose": ["*.yml", "*.sh", "images/*/*"],
    f"{DATA}.docs": ["rules.md"],
    f"{DATA}.tools": NPM,
    f"{DATA}.node": NPM,
}

# `pip install <checkout>` builds in place: its intermediate files go to a temporary folder of this
# user and this source tree, not into the checkout (an editable install still puts the compiled module
# beside its sources).
_TREE = hashlib.sha256(str(Path(__file__).resolve().parent).encode()).hexdigest()[:12]
SCRATCH = Path(tempfile.gettempdir()) / f"failover-harness-build-{os.getuid()}-{_TREE}"
SCRATCH.mkdir(parents=True, exist_ok=True)

SOURCES = ["harness/persistproxy/_frames.c", "harness/persistproxy/_track.c"]
setup(
    options={"build": {"build_base": str(SCRATCH / "build")}, "egg_info": {"egg_base": str(SCRATCH)}},
    packages=find_packages(include=["harness", "harness.*"]) + list(PACKAGE_DIR),
    package_dir=PACKAGE_DIR,
    package_data=PACKAGE_DATA,
    include_package_data=False,
    ext_modules=[Extension("harness.persistproxy._frames", SOURCES, depends=["harness/persistproxy/_wire.h"],
                           extra_compile_args=["-O2"], optional=True)],
)
