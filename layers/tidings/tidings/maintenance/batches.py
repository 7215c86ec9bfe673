"""Work done in bounded batches, each batch its own short transaction.

A scheduled job that deletes or changes many rows never holds their locks for long nor builds one
huge transaction: it repeats one bounded statement until a batch comes back short, or until it has
run ``max_batches`` of them (the rest is left to the next run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tidings.dal.connection import Cursor, Database

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BatchRun(Generic[T]):
    """What each batch returned, and whether the work ran out before ``max_batches``."""

    results: tuple[T, ...]
    complete: bool


def in_batches(
    db: Database,
    batch: Callable[[Cursor], T],
    *,
    size: Callable[[T], int],
    batch_size: int,
    max_batches: int,
) -> BatchRun[T]:
    """Run ``batch`` until one handles fewer than ``batch_size`` rows (``size`` of its result)."""
    results: list[T] = []
    for _ in range(max_batches):
        result = db.run(batch)
        results.append(result)
        if size(result) < batch_size:
            return BatchRun(tuple(results), complete=True)
    return BatchRun(tuple(results), complete=False)
