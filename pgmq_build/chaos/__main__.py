"""``python3 -m pgmq_build.chaos``: see cli.py."""

import sys

from .cli import main

sys.exit(main())
