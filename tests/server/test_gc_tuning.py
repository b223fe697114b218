"""The serving process's garbage collector: startup frozen, young collections rare enough
that a burst of stream starts sets off none."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from sse_proxy.server.run import (
    MIDDLE_COLLECTION_AFTER,
    YOUNG_COLLECTION_AT,
    _freeze_startup_heap,
)


@pytest.fixture
def gc_restored() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.usefixtures("gc_restored")
def test_startup_is_frozen_and_young_collections_wait_for_ten_thousand_objects() -> None:
    gc.set_threshold(700, 10, 10)
    _freeze_startup_heap()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG_COLLECTION_AT, MIDDLE_COLLECTION_AFTER, 10)


@pytest.mark.usefixtures("gc_restored")
def test_a_burst_of_request_sized_allocations_sets_off_no_young_collection() -> None:
    """Fifty streams' worth of live objects (a few thousand) stay under the threshold;
    CPython's 700 collects several times for them."""
    _freeze_startup_heap()
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        live = [{"stream": i, "fields": [i, str(i)]} for i in range(3_000)]
        assert not collections, collections
        gc.set_threshold(700, 10, 10)
        more = [{"stream": i, "fields": [i, str(i)]} for i in range(3_000)]
        assert collections  # the negative control: the default collects for the same
    finally:
        gc.callbacks.remove(count)
    assert len(live) == len(more)
