"""``python3 -m bench [options]``: the benchmark of `make bench` (see run.py)."""

import sys

from .run import main

sys.exit(main())
