"""``python -m repro.paper``: the same as ``lra-paper``."""

import sys

from .commands import main

sys.exit(main())
