"""``python -m attnplan``: the same command as ``attnplan``."""

import sys

from attnplan.cli.main import main

sys.exit(main())
