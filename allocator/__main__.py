"""``python -m allocator``: see allocator/cli.py."""

import sys

from allocator.cli import main

sys.exit(main())
