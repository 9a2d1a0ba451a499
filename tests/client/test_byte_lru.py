"""The cache class itself: least recently used first out, bytes bound, TTL, counts."""

from __future__ import annotations

import time

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


def test_entries_expire_after_the_ttl_since_their_last_use():
    cache = ByteLRU(max_bytes=10 * 1024, ttl_s=0.2)
    cache.put("old", _item(1))
    cache.put("used", _item(1))
    time.sleep(0.12)
    assert cache.get("used") is not None  # a use restarts its clock
    time.sleep(0.12)
    assert cache.get("old") is None and cache.get("used") is not None
    assert cache.info()["expired"] == 1 and cache.info()["bytes"] == 1024


def test_a_bound_below_one_entry_is_refused_with_both_sizes():
    with pytest.raises(ValueError, match=r"cache bound 100 bytes holds no image: one needs 2048"):
        ByteLRU(max_bytes=100, ttl_s=1, item_bytes=2048, what="image")
