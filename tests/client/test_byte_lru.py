"""The cache class itself: least recently used first out, bytes bound, TTL, counts."""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3.runtime.cached import ByteLRU


def _item(kib: int) -> dict:
    return {"a": np.zeros(kib * 1024, np.uint8)}


def test_least_recently_used_goes_first_and_the_bound_holds():
    cache = ByteLRU(max_bytes=3 * 1024, ttl_s=60)
    for key in "abc":
        cache.put(key, _item(1))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", _item(1))
    assert cache.get("b") is None and cache.get("a") is not None
    cache.put("e", _item(2))  # needs two slots: c and d go
    assert sorted(k for k in "abcde" if cache.holds(k)) == ["a", "e"]
    info = cache.info()
    assert info["bytes"] == 3 * 1024 and info["evictions"] == 3
    assert not cache.put("huge", _item(4)) and not cache.holds("huge")  # never fits: not stored


class _Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_entries_expire_after_the_ttl_since_their_last_use():
    clock = _Clock()
    cache = ByteLRU(max_bytes=10 * 1024, ttl_s=60, clock=clock)
    cache.put("old", _item(1))
    cache.put("used", _item(1))
    clock.now += 40
    assert cache.get("used") is not None  # a use restarts its clock
    clock.now += 20  # "old": 60 s unused, not more than the TTL yet
    assert cache.holds("old") and cache.info()["expired"] == 0
    clock.now += 1
    assert cache.get("old") is None and cache.get("used") is not None
    assert cache.info()["expired"] == 1 and cache.info()["bytes"] == 1024
    clock.now += 60.5  # "used": 60.5 s since its last use
    assert not cache.holds("used") and cache.info()["expired"] == 2
    assert cache.info()["bytes"] == 0


def test_a_bound_below_one_entry_is_refused_with_both_sizes():
    with pytest.raises(ValueError, match=r"cache bound 100 bytes holds no image: one needs 2048"):
        ByteLRU(max_bytes=100, ttl_s=1, item_bytes=2048, what="image")
