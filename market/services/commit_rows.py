"""The round commit's typed rows (market.services.round_commit), shared with the moves it commits
(market.services.moves)."""

from __future__ import annotations

from typing import NamedTuple


class Slot(NamedTuple):
    """One GPU of a winner's gang."""

    gpu_id: int
    uuid: str
    node_id: int


class Winner(NamedTuple):
    """One winning bid with the result's names resolved to ids."""

    job_id: int
    tenant_id: int
    gpu_type_id: int
    tier: str
    price: int
    hold: int
    hold_seconds: int  # the bid's max_s in the frozen book: max hours, or a predicted p90 (selectors.holds)
    gang: tuple[Slot, ...]


class JobRow(NamedTuple):
    """What the commit reads of a winner's job (locked)."""

    id: int
    state: str
    bid_version: int
    name: str
    command: str
    grace_seconds: int
    max_seconds: int
    gpus: int


JOB_FIELDS = ("pk", "state", "bid_version", "name", "command", "grace_seconds", "max_seconds", "gpus")


class Placed(NamedTuple):
    """A winner whose hold was placed: it gets a lease."""

    winner: Winner
    job: JobRow
