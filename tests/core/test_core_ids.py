"""Identifiers (the artifact storage's contract is in tests/storage/)."""

from __future__ import annotations

import time

from core.ids import is_id, new_id


def test_ids_are_unique_well_formed_and_sort_by_creation() -> None:
    first = [new_id() for _ in range(1000)]
    time.sleep(0.002)
    later = new_id()

    assert len(set(first)) == 1000
    assert all(is_id(i) and len(i) == 26 for i in first)
    assert all(i < later for i in first)
    assert not is_id("01J-not-an-id") and not is_id("u" * 26)
