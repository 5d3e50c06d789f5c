"""The job to submit, from a TOML or YAML job file and the command line's flags (flags win).

    name = "resnet"
    command = "python train.py --epochs 10"
    gpus = 2
    max_hours = 3
    grace_seconds = 60     # time to write a checkpoint when preempted (SIGTERM, then SIGKILL)
    cpus_per_gpu = "4"     # the job's cgroup: CPU cores and memory (GB) per GPU; the policy's defaults if left out
    memory_gb_per_gpu = "32"
    [bids]                 # credits per GPU-hour, in order of preference
    H100 = "4.5"
    A100 = "2"

A key the API does not take is refused here, naming it, rather than dropped: a job file with `max_hour` or
`cpus` must hear about it (CPU and memory are asked per GPU: `cpus_per_gpu`, `memory_gb_per_gpu`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpumarket_client.errors import ClientError

KEYS = ("name", "command", "gpus", "max_hours", "bids", "grace_seconds", "cpus_per_gpu", "memory_gb_per_gpu")
NOT_IN_API = {
    "cpus": "CPU cores are asked per GPU: cpus_per_gpu",
    "memory": "memory is asked per GPU, in GB: memory_gb_per_gpu",
    "checkpoint_dir": "the job always finds its checkpoint directory in $GPUMARKET_CHECKPOINT_DIR; "
    "set grace_seconds for the time it has to write one when preempted",
}


class JobFileError(ClientError):
    exit_code = 2


def read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise JobFileError(f"{path}: {exc.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            import tomllib

            data = tomllib.loads(text)
    except Exception as exc:  # tomllib.TOMLDecodeError, yaml.YAMLError: the parser's own message
        raise JobFileError(
            f"{path}: not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'TOML'}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise JobFileError(f"{path}: expected a table of name, command, gpus, max_hours, bids")
    return check(data, str(path))


def check(data: dict[str, Any], where: str) -> dict[str, Any]:
    for key in data:
        if key in NOT_IN_API:
            raise JobFileError(f"{where}: {key}: {NOT_IN_API[key]}")
        if key not in KEYS:
            raise JobFileError(f"{where}: {key}: not a job field (the fields: {', '.join(KEYS)})")
    if "bids" in data:
        data["bids"] = bids(data["bids"], where)
    return data


def bids(value: Any, where: str) -> list[tuple[str, str]]:
    """{"H100": "4.5"} or [{"gpu_type": "H100", "limit": "4.5"}] as [("H100", "4.5")]."""
    if isinstance(value, dict):
        return [(str(k), str(v)) for k, v in value.items()]
    if isinstance(value, list) and all(
        isinstance(e, dict) and {"gpu_type", "limit"} <= set(e) for e in value
    ):
        return [(str(e["gpu_type"]), str(e["limit"])) for e in value]
    raise JobFileError(f"{where}: bids: a table of GPU type = limit, or a list of {{gpu_type, limit}}")


def bid_flag(text: str) -> tuple[str, str]:
    """--bid H100=4.5"""
    gpu_type, sep, limit = text.partition("=")
    if not sep or not gpu_type.strip() or not limit.strip():
        raise JobFileError(f"--bid {text!r}: expected TYPE=LIMIT, e.g. --bid H100=4.5")
    return gpu_type.strip(), limit.strip()


def merge(path: Path | None, flags: dict[str, Any]) -> dict[str, Any]:
    job = read(path) if path is not None else {}
    job.update({k: v for k, v in flags.items() if v not in (None, (), [])})
    missing = [k for k in ("name", "command", "bids") if k not in job]
    if missing:
        raise JobFileError(
            f"{missing[0]}: required (a flag such as --{missing[0].replace('_', '-')}"
            f"{' TYPE=LIMIT' if missing[0] == 'bids' else ''}, or a job file)"
        )
    job.setdefault("gpus", 1)
    job.setdefault("max_hours", "1")
    return job
