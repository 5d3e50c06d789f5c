"""`gpumarket-agent` (or `python -m nodeagent.agent`): flags, environment, start-up errors in one line."""

from __future__ import annotations

import argparse
import logging
import os
import pwd
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from nodeagent.agent import VERSION, gang
from nodeagent.agent.backend import GpuBackend
from nodeagent.agent.client import Client
from nodeagent.agent.daemon import Agent, Settings, StartupError
from nodeagent.agent.sandbox import MODES, Sandbox, SandboxUnavailable
from nodeagent.agent.sandbox_cgroups import Cgroups
from nodeagent.agent.sim import DEFAULT_MODEL, SimBackend
from nodeagent.agent.state import StateDir, StateLocked

PROG = "gpumarket-agent"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not argparse's usage block: the operator reads it in a journal."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0.05 and 3600 seconds")
    return value


def _gpu_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number from 1 to 64")
    return int(text)


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{text!r} must start with http:// or https://")
    return text


def _uid_range(text: str) -> range:
    first, _, last = text.partition("-")
    if not (first.isdigit() and last.isdigit() and 1000 <= int(first) <= int(last) < 2**31):
        raise argparse.ArgumentTypeError(f"{text!r} must be FIRST-LAST, two uids from 1000 up, FIRST <= LAST")
    return range(int(first), int(last) + 1)


def _bytes(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number of bytes (0: no cap)")
    if 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or at least 65536")
    return int(text)


def _address(text: str) -> str:
    try:
        return gang.check_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "gpumarket-agent")


def parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = _Parser(
        prog=PROG,
        description="Run the jobs the gpumarket platform binds to this machine's GPUs and report their usage. "
        "Each flag falls back to the environment variable named in its help.",
    )
    p.add_argument(
        "--server",
        type=_url,
        default=env("GPUMARKET_SERVER", "http://127.0.0.1:8000"),
        help="the platform's base URL (GPUMARKET_SERVER; default %(default)s)",
    )
    p.add_argument(
        "--bootstrap-token-file",
        type=Path,
        default=env("GPUMARKET_BOOTSTRAP_TOKEN_FILE"),
        help="file holding the one-time bootstrap token for the first registration "
        "(GPUMARKET_BOOTSTRAP_TOKEN_FILE; or the token itself in GPUMARKET_BOOTSTRAP_TOKEN)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=env("GPUMARKET_STATE_DIR", _default_state_dir()),
        help="credential, job records and usage spool (GPUMARKET_STATE_DIR; default %(default)s)",
    )
    p.add_argument(
        "--backend",
        choices=("nvml", "sim"),
        default=env("GPUMARKET_BACKEND", "nvml"),
        help="real GPUs through NVML, or simulated ones (GPUMARKET_BACKEND; default %(default)s)",
    )
    p.add_argument(
        "--sim-gpus",
        type=_gpu_count,
        default=env("GPUMARKET_SIM_GPUS", "8"),
        help="simulated GPUs (GPUMARKET_SIM_GPUS; default %(default)s)",
    )
    p.add_argument(
        "--sim-model",
        default=env("GPUMARKET_SIM_MODEL", DEFAULT_MODEL),
        help="simulated GPU model (GPUMARKET_SIM_MODEL; default %(default)r)",
    )
    p.add_argument(
        "--interval",
        type=_positive,
        default=env("GPUMARKET_INTERVAL", "10"),
        help="seconds between usage samples (GPUMARKET_INTERVAL; default %(default)s)",
    )
    p.add_argument(
        "--checkpoint-root",
        type=Path,
        default=env("GPUMARKET_CHECKPOINT_ROOT"),
        help="jobs' checkpoint directories live under it, one per job "
        "(GPUMARKET_CHECKPOINT_ROOT; default STATE_DIR/checkpoints)",
    )
    p.add_argument(
        "--name",
        default=env("GPUMARKET_NODE_NAME") or socket.gethostname(),
        help="node name at registration (GPUMARKET_NODE_NAME; default the host name)",
    )
    p.add_argument(
        "--address",
        type=_address,
        default=env("GPUMARKET_NODE_ADDRESS"),
        help="where the other nodes of a gang reach this one: an IP address or a host name "
        "(GPUMARKET_NODE_ADDRESS; default the local address of the route to the server)",
    )
    p.add_argument(
        "--job-user",
        default=env("GPUMARKET_JOB_USER"),
        help="run jobs as this Unix user, not the agent's (needs the agent to run as root; GPUMARKET_JOB_USER)",
    )
    p.add_argument(
        "--sandbox",
        choices=MODES,
        default=env("GPUMARKET_SANDBOX", "off"),
        help="run each job in its own sandbox with cgroup limits (docs/agent.md §The sandbox): on (refuse to "
        "start without it), auto (where the node allows it; said at registration) or off (GPUMARKET_SANDBOX; "
        "default %(default)s)",
    )
    p.add_argument(
        "--device-root",
        type=Path,
        default=env("GPUMARKET_DEVICE_ROOT", "/dev"),
        help="where the GPUs' device nodes (nvidiaN, nvidiactl...) are (GPUMARKET_DEVICE_ROOT; default %(default)s)",
    )
    p.add_argument(
        "--tenant-uids",
        type=_uid_range,
        default=env("GPUMARKET_TENANT_UIDS"),
        help="run each tenant's jobs as its own user gm-<slug>, made on first use with a uid from FIRST-LAST "
        "(needs root; GPUMARKET_TENANT_UIDS)",
    )
    p.add_argument(
        "--log-max-bytes",
        type=_bytes,
        default=env("GPUMARKET_LOG_MAX_BYTES", str(256 * 1024 * 1024)),
        help="cap on a job's log: past it the oldest part is dropped, said in the log "
        "(GPUMARKET_LOG_MAX_BYTES; 0: no cap; default %(default)s)",
    )
    p.add_argument(
        "--kill-foreign-after",
        type=float,
        default=env("GPUMARKET_KILL_FOREIGN_AFTER", "0"),
        help="kill a process on a GPU that no lease holds once seen this many seconds, and tell the server "
        "(GPUMARKET_KILL_FOREIGN_AFTER; default 0: report it only)",
    )
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=env("GPUMARKET_LOG_LEVEL", "info"),
        help="(GPUMARKET_LOG_LEVEL; default %(default)s)",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    return p


def _bootstrap_token(args: argparse.Namespace) -> str:
    if args.bootstrap_token_file is None:
        return os.environ.get("GPUMARKET_BOOTSTRAP_TOKEN", "").strip()
    try:
        return Path(args.bootstrap_token_file).read_text().strip()
    except OSError as exc:
        raise StartupError(f"cannot read the bootstrap token file: {exc}") from None


def _job_user(name: str | None) -> tuple[int, int] | None:
    """The uid and gid jobs run as. Without it a job runs as the agent's user and could read the credential."""
    if not name:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise StartupError(f"--job-user: no user {name!r}") from None
    if os.geteuid() != 0:
        raise StartupError("--job-user needs the agent to run as root (it switches user for each job)")
    if entry.pw_uid == 0:
        raise StartupError("--job-user must not be root")
    return entry.pw_uid, entry.pw_gid


def _sandbox(args: argparse.Namespace, checkpoint_root: Path) -> tuple[Sandbox | None, str]:
    """The sandbox, or None and why not. `on` without one is a start-up error: the operator asked for it."""
    if args.sandbox == "off":
        return None, "off (--sandbox off)"
    hidden = [str(Path(args.state_dir).resolve()), str(checkpoint_root.resolve())]
    try:
        return Sandbox.probe(device_root=args.device_root, hidden=hidden), ""
    except SandboxUnavailable as exc:
        if args.sandbox == "on":
            raise StartupError(f"--sandbox on: {exc}") from None
        logging.getLogger("gpumarket.agent").warning("jobs run without the sandbox: %s", exc)
        return None, f"unavailable: {exc}"


def _backend(args: argparse.Namespace) -> GpuBackend:
    if args.backend == "sim":
        return SimBackend(name=args.name, count=args.sim_gpus, model=args.sim_model, state_dir=args.state_dir)
    from nodeagent.agent.nvml import NvmlBackend, NvmlUnavailable  # pynvml only where it is used

    try:
        return NvmlBackend()
    except NvmlUnavailable as exc:
        raise StartupError(
            f"NVML is not available ({exc}); on a machine without a GPU use --backend sim"
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        state = StateDir(args.state_dir)
    except (StateLocked, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    backend = None
    try:
        backend = _backend(args)
        checkpoint_root = args.checkpoint_root or args.state_dir / "checkpoints"
        if (
            args.sandbox != "off"
        ):  # hidden under an empty tmpfs in each sandbox: it must exist to be mounted over
            checkpoint_root.mkdir(parents=True, exist_ok=True)
        sandbox, sandbox_off = _sandbox(args, checkpoint_root)
        if args.tenant_uids is not None and os.geteuid() != 0:
            raise StartupError("--tenant-uids needs the agent to run as root (it makes and switches users)")
        settings = Settings(
            server=args.server,
            name=args.name,
            bootstrap_token=_bootstrap_token(args),
            interval=args.interval,
            checkpoint_root=checkpoint_root,
            job_user=_job_user(args.job_user),
            sandbox=sandbox,
            sandbox_off=sandbox_off,
            cgroups=Cgroups.detect() if sandbox is not None else None,
            tenant_uids=args.tenant_uids,
            log_max_bytes=args.log_max_bytes,
            kill_foreign_after=max(0.0, args.kill_foreign_after),
            address=args.address or gang.default_address(args.server),
        )
        agent = Agent(settings=settings, backend=backend, state=state, client=Client(args.server))
        agent.install_signals()
        agent.start()
        agent.run()
    except StartupError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if backend is not None:
            backend.close()
        state.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
