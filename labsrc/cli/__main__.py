"""``python -m labsrc.cli``: the same as the ``labsrc`` command."""

import sys

from labsrc.cli.main import main

sys.exit(main())
