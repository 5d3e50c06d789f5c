"""Test job: tries every way out of its sandbox and prints what it got as one JSON line (PROBE {...}).

argv: PID... (processes outside it to try to signal: the agent, another job) -- PATH... (files outside it
to try to read or list: the agent's credential, another job's work directory and log, the checkpoint root).
"""

import errno
import json
import os
import sys


def attempt(action):
    try:
        result = action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return "ok" if result is None else result


def read(path):
    if os.path.isdir(path):
        return os.listdir(path)
    with open(path) as f:
        f.read(1)
    return None


args = sys.argv[1:]
cut = args.index("--")
pids, paths = [int(p) for p in args[:cut]], args[cut + 1 :]
dev = sorted(os.listdir("/dev"))
found = {
    "uid": os.getuid(),
    "gid": os.getgid(),
    "groups": os.getgroups(),
    "dev": dev,
    "nvidia_opened": {
        f"nvidia{i}": attempt(lambda i=i: os.close(os.open(f"/dev/nvidia{i}", os.O_RDWR))) for i in range(4)
    },
    "proc": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "kill": {str(pid): attempt(lambda pid=pid: os.kill(pid, 9)) for pid in pids},
    "environ": {str(pid): attempt(lambda pid=pid: read(f"/proc/{pid}/environ")) for pid in pids},
    "read": {p: attempt(lambda p=p: read(p)) for p in paths},
    "write_etc": attempt(lambda: open("/etc/gpumarket-escape", "w").close()),
    "write_usr": attempt(lambda: open("/usr/gpumarket-escape", "w").close()),
    "write_tmp": attempt(lambda: open("/tmp/gpumarket-probe", "w").close()),
    "write_shm": attempt(lambda: open("/dev/shm/gpumarket-probe", "w").close()),
    "write_work": attempt(lambda: open("in-work", "w").close()),
    "write_checkpoint": attempt(
        lambda: open(os.path.join(os.environ["GPUMARKET_CHECKPOINT_DIR"], "ckpt"), "w").close()
    ),
    "mknod": attempt(lambda: os.mknod("/tmp/nvidia3", 0o20666, os.makedev(195, 3))),
    "setuid_root": attempt(lambda: os.setuid(0)),
}
print("PROBE " + json.dumps(found), flush=True)
