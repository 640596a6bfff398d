"""``python -m harness.cli`` = the ``failover-harness`` command."""

import sys

from harness.cli import main

sys.exit(main())
