"""Cross-table checks of a Book: every index points at a row, every lease GPU is a real, busy slot."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from allocator.errors import BookError

if TYPE_CHECKING:
    from allocator.book import Book


def _index_in_range(field: str, values: np.ndarray, n: int) -> None:
    bad = (values < 0) | (values >= n)
    if bad.any():
        table, _, column = field.partition(".")
        raise BookError(f"{table}[{int(np.argmax(bad))}].{column}", f"must name one of the {n} {column}s")


def check_book(book: Book) -> None:
    """Validate references between the tables of ``book``; raise BookError naming the field."""
    n_types = len(book.types)
    _index_in_range("nodes.gpu_type", book.nodes.gpu_type, n_types)
    if book.tenants.guarantee.shape[1] != n_types or book.tenants.held.shape[2] != n_types:
        raise BookError("tenants.guarantee", f"must have one column per GPU type ({n_types})")
    if book.bids.limit.shape[1] != n_types:
        raise BookError("bids.limit", f"must have one column per GPU type ({n_types})")
    _index_in_range("bids.tenant", book.bids.tenant, len(book.tenants))
    _check_leases(book)
    if not isinstance(book.now, int | np.integer) or not isinstance(book.round, int | np.integer):
        raise BookError("now", "now and round must be integers")


def _check_leases(book: Book) -> None:
    leases, nodes = book.leases, book.nodes
    _index_in_range("leases.tenant", leases.tenant, len(book.tenants))
    _index_in_range("leases.gpu_type", leases.gpu_type, len(book.types))
    owner = leases.slot_owner
    bad_node = (leases.slot_node < 0) | (leases.slot_node >= len(nodes))
    if bad_node.any():
        raise BookError(f"leases[{int(owner[np.argmax(bad_node)])}].gpus", "names a node that does not exist")
    cap = nodes.capacity[leases.slot_node]
    bad_slot = (leases.slot_idx < 0) | (leases.slot_idx >= cap)
    if bad_slot.any():
        raise BookError(
            f"leases[{int(owner[np.argmax(bad_slot)])}].gpus", "names a GPU beyond the node's capacity"
        )
    wrong_type = nodes.gpu_type[leases.slot_node] != leases.gpu_type[owner]
    if wrong_type.any():
        raise BookError(
            f"leases[{int(owner[np.argmax(wrong_type)])}].gpus", "names a node of another GPU type"
        )
    if nodes.free.shape[1] and nodes.free[leases.slot_node, leases.slot_idx].any():
        at = int(owner[np.argmax(nodes.free[leases.slot_node, leases.slot_idx])])
        raise BookError(f"leases[{at}].gpus", "names a GPU that the nodes table lists as free")
    key = leases.slot_node.astype(np.int64) * (nodes.free.shape[1] + 1) + leases.slot_idx
    if np.unique(key).size != key.size:
        raise BookError("leases.gpus", "a GPU is held by two leases")
    held = np.zeros_like(book.tenants.held)
    np.add.at(held, (leases.tenant[owner], leases.tier[owner], leases.gpu_type[owner]), 1)
    short = (book.tenants.held < held).any(axis=(1, 2))
    if short.any():
        raise BookError(
            f"tenants[{int(np.argmax(short))}].held", "is less than the GPUs of its listed leases"
        )
