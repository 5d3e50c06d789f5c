import sys

from allocator.sim.cli import main

sys.exit(main())
