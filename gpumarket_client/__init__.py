"""gpumarket's Python client and command line, for teams: it talks to the REST API only and imports no server
code (an import contract in pyproject.toml says so), so it installs on a laptop with a few small packages.

    from gpumarket_client import Client
    client = Client.from_profile()            # or Client("https://gpu.example.org", token, tenant="vision")
    job = client.jobs.submit(name="resnet", command="python train.py", gpus=2, max_hours="3",
                             bids={"H100": "4.5", "A100": "2"})
    job.wait()                                # polls until it ends; job.logs(), job.cancel()

Names are loaded on first use so that `gpumarket --help` does not pay for the HTTP stack (bench/cli.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumarket_client.client import Client
    from gpumarket_client.errors import ApiError, ClientError, ConnectionFailed, NotSignedIn
    from gpumarket_client.models import Estimate, Job

__all__ = ["ApiError", "Client", "ClientError", "ConnectionFailed", "Estimate", "Job", "NotSignedIn"]

_WHERE = {
    "Client": "gpumarket_client.client",
    "ApiError": "gpumarket_client.errors",
    "ClientError": "gpumarket_client.errors",
    "ConnectionFailed": "gpumarket_client.errors",
    "NotSignedIn": "gpumarket_client.errors",
    "Estimate": "gpumarket_client.models",
    "Job": "gpumarket_client.models",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
