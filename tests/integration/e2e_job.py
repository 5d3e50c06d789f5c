"""The job the end-to-end tests submit (run by the agent as `python tests/integration/e2e_job.py SECONDS`).

It records what it was given (CUDA_VISIBLE_DEVICES, the GPUMARKET_* variables, its pid) in its checkpoint
directory, computes for SECONDS (so the simulated GPUs show it busy), and exits 0. On SIGTERM it writes a
checkpoint file and then ignores the rest of its grace period, so the agent has to SIGKILL it. A run that
finds a checkpoint from an earlier one says so and has only RESUMED_SECONDS of work left.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

RESUMED_SECONDS = 2.0


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    ckpt = Path(os.environ["GPUMARKET_CHECKPOINT_DIR"])
    ckpt.mkdir(parents=True, exist_ok=True)
    lease = os.environ.get("GPUMARKET_LEASE_ID", "?")
    resumed = (ckpt / "checkpoint").exists()
    seen = {k: v for k, v in os.environ.items() if k == "CUDA_VISIBLE_DEVICES" or k.startswith("GPUMARKET_")}
    if resumed:
        seconds = RESUMED_SECONDS
    (ckpt / f"env-{lease}.json").write_text(json.dumps({**seen, "resumed": resumed, "pid": os.getpid()}))
    print(
        f"lease {lease} CUDA_VISIBLE_DEVICES={seen.get('CUDA_VISIBLE_DEVICES')} resumed={resumed}", flush=True
    )

    def on_term(signum: int, _frame: object) -> None:
        (ckpt / "checkpoint").write_text(f"lease {lease} at {time.time()}")
        print(
            f"lease {lease}: SIGTERM, checkpoint written; ignoring the rest of the grace period", flush=True
        )
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    signal.signal(signal.SIGTERM, on_term)
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        x = 0
        for i in range(200_000):  # computing: the simulated GPUs read this process's CPU time as busy
            x += i * i
        step += 1
        if step % 20 == 0:
            print(f"lease {lease} step {step}", flush=True)
    (ckpt / f"done-{lease}").write_text("done")
    print(f"lease {lease} done", flush=True)


if __name__ == "__main__":
    main()
