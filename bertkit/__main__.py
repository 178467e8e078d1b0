"""``python -m bertkit``: the ``bertkit`` command."""

import sys

from bertkit.cli import main

sys.exit(main())
