"""``python -m metricc``: the same as the ``metricc`` command."""

import sys

from .cli import main

sys.exit(main())
