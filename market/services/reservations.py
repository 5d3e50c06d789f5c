"""Reservations and fragmentation as a round commits them (docs/rounds.md §Reservations and backfill).

The allocator holds nodes for a blocked gang (Result.reserved_node/_job/_start, step 5); the commit keeps them
as market.Reservation rows, one per node, so the job page can say what a waiting gang waits for and the
console can show the reservations now. It also keeps, per GPU type, the GPUs left free by count and the nodes
left wholly free after the round's placements (RoundPrice.free_gpus/free_nodes): the gap between the two is
the fragmentation that keeps large gangs waiting.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from allocator import Book, Result
from inventory.models import Node
from market import bulk
from market.models import Reservation, Round, RoundPrice


def record_reservations(rnd: Round, result: Result) -> None:
    """One Reservation per node the result holds for a gang, with the gang's GPU type and expected start."""
    names = [result.node_names[n] for n in result.reserved_node.tolist()]
    if not names:
        return
    nodes = {
        name: (pk, type_id)
        for name, pk, type_id in Node.objects.filter(name__in=bulk.any_of(names, "text")).values_list(
            "name", "pk", "gpu_type_id"
        )
    }
    Reservation.objects.bulk_create(
        Reservation(
            round=rnd,
            node_id=nodes[name][0],
            job_id=job,
            gpu_type_id=nodes[name][1],
            expected_start=None if start < 0 else datetime.fromtimestamp(start, tz=UTC),  # -1: unknown
        )
        for name, job, start in zip(
            names, result.reserved_job.tolist(), result.reserved_start.tolist(), strict=True
        )
        if name in nodes
    )


def record_fragmentation(rnd: Round, book: Book, result: Result, type_ids: list[int]) -> None:
    """Per GPU type: GPUs free by count and nodes wholly free, after the round's winners took theirs (GPUs of
    preempted leases are not counted free: they pass to the winners or stay bound while the jobs stop)."""
    nodes = book.nodes
    free = np.array(nodes.free, dtype=np.bool_, copy=True)
    w = result.winners
    free[w.slot_node, w.slot_idx] = False
    moves = result.moves
    if len(moves):
        free[moves.slot_node, moves.slot_idx] = False
    count = free.sum(axis=1)
    whole = count == nodes.capacity
    for k, type_id in enumerate(type_ids):
        of_type = nodes.gpu_type == k
        RoundPrice.objects.filter(round=rnd, gpu_type_id=type_id).update(
            free_gpus=int(count[of_type].sum()), free_nodes=int(whole[of_type].sum())
        )
