"""``python3 -m chaos``: see cli.py."""

import sys

from .cli import main

sys.exit(main())
