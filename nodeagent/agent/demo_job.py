"""A demo job: `python -m nodeagent.agent.demo_job --seconds 60`.

It prints the GPUs it was given, computes (burns CPU, so a simulated GPU reads busy) for the given seconds of
its own work, saves a checkpoint in $GPUMARKET_CHECKPOINT_DIR every few seconds and resumes from it when
requeued after a preemption, and on SIGTERM saves and exits cleanly (code 0) within its grace period. With
--marker-every N it also prints the checkpoint marker line (`GPUMARKET_CHECKPOINT step=...`) every N seconds,
the other way a job tells its agent it saved its work (docs/agent.md §Checkpoints).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

_stop = False


def _on_term(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def _save(path: Path | None, done: float) -> None:
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"done_seconds": done}))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo_job", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of work in all (default 60)")
    parser.add_argument("--idle", action="store_true", help="sleep instead of computing (an idle GPU)")
    parser.add_argument(
        "--marker-every",
        type=float,
        default=0.0,
        metavar="N",
        help="print the checkpoint marker line every N seconds of work (default 0: never)",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    ckpt_dir = os.environ.get("GPUMARKET_CHECKPOINT_DIR")
    ckpt = Path(ckpt_dir) / "demo_job.json" if ckpt_dir else None
    done = json.loads(ckpt.read_text())["done_seconds"] if ckpt and ckpt.exists() else 0.0
    print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)
    print(
        f"resuming at {done:.1f} s of {args.seconds:.1f} s" if done else "starting from scratch", flush=True
    )
    last_save = last_mark = time.monotonic()
    while done < args.seconds and not _stop:
        step_start = time.monotonic()
        if args.idle:
            time.sleep(0.1)
        else:
            x = 0
            while time.monotonic() - step_start < 0.1:
                x += 1
        done += time.monotonic() - step_start
        if time.monotonic() - last_save >= 5:
            _save(ckpt, done)
            last_save = time.monotonic()
        if args.marker_every > 0 and time.monotonic() - last_mark >= args.marker_every:
            _save(ckpt, done)  # the marker says the work is saved: make it so
            print(f"GPUMARKET_CHECKPOINT step={done:.1f}", flush=True)
            last_mark = last_save = time.monotonic()
    _save(ckpt, done)
    if _stop:
        print(f"SIGTERM: checkpoint saved at {done:.1f} s", flush=True)
    else:
        print(f"done after {done:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
