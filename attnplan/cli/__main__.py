import sys

from attnplan.cli.main import main

sys.exit(main())
