"""python -m tessel.cli ... (as the `tessel` command)."""
import sys

from tessel.cli.main import main

sys.exit(main())
