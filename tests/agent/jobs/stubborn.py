"""Test job: ignores SIGTERM (notes it in its checkpoint dir), sleeps; only SIGKILL ends it."""

import os
import signal
import time
from pathlib import Path

marker = Path(os.environ["GPUMARKET_CHECKPOINT_DIR"]) / "got-sigterm"


def noted(signum, frame):
    marker.write_text(str(time.time()))


signal.signal(signal.SIGTERM, noted)
print("stubborn running", flush=True)
while True:
    time.sleep(0.1)
