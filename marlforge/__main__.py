"""``python -m marlforge``: the ``marlforge`` command."""

import sys

from marlforge.cli import main

sys.exit(main())
