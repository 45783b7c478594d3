"""``python -m repro.paper``: the same as ``lra-paper``."""

import sys

from .entry import main

sys.exit(main())
