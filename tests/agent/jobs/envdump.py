"""Test job: write its environment, arguments, working directory and group to OUT, print a line, exit CODE."""

import json
import os
import sys

out, code = sys.argv[1], int(sys.argv[2])
with open(out, "w") as f:
    json.dump(
        {
            "env": dict(os.environ),
            "argv": sys.argv[3:],
            "cwd": os.getcwd(),
            "pgid": os.getpgrp(),
            "sid": os.getsid(0),
            "pid": os.getpid(),
        },
        f,
    )
print("envdump wrote", out, flush=True)
print("to stderr too", file=sys.stderr, flush=True)
sys.exit(code)
