"""``python -m repro.paper``: the same as ``lra-paper``."""

import sys

from .cli import main

sys.exit(main())
