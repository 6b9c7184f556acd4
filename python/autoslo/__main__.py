"""``python -m autoslo``: the command line."""

import sys

from autoslo.cli import main

sys.exit(main())
