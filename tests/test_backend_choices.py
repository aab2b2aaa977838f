"""The configuration model's choices kept across processes (tilex.backend.choices, the cache's tuning/ folder)."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tilex import autoconfig as A  # noqa: E402
from tilex.backend import choices as CH  # noqa: E402
from tilex.stdlib import _launch as L  # noqa: E402

SPACE = dict(BM=(64, 128), BN=(64,), BK=(64,), STAGES=(4,))


def _choose(m=512, tuned=False):
    return A.choose(L.source("linear"), "linear.tile", "linear", dict(M=m, N=256, K=512), "sm_90a",
                    defines=dict(T="bf16"), space=SPACE, tuned=tuned)


@pytest.fixture
def fresh(tmp_cache_dir, monkeypatch):
    """An empty choice table and cache directory (autoconfig's and this module's process state restored after)."""
    monkeypatch.setattr(A, "_CHOICES", {})
    monkeypatch.setattr(CH, "_LOADED", set())
    monkeypatch.setattr(CH, "STATS", {"loaded": 0, "stored": 0})
    return tmp_cache_dir


def _forget(monkeypatch):
    """As a new process: autoconfig remembers nothing, and translating a candidate fails the test."""
    monkeypatch.setattr(A, "_CHOICES", {})
    monkeypatch.setattr(CH, "_LOADED", set())

    def no_translation(*a, **k):
        raise AssertionError("a candidate was translated: the stored choice was not used")
    monkeypatch.setattr(A, "translated", no_translation)


def test_choices_round_trip(fresh, monkeypatch):
    first = _choose()
    assert first.source == "model" and len(first.candidates) == 2
    assert CH.store() == 1 and CH.path().is_file() and CH.path().parent.name == "tuning"
    assert CH.store() == 0  # nothing new
    _forget(monkeypatch)
    assert CH.load() == 1
    again = _choose()
    assert again.defines == first.defines and again.candidates[0].estimate.time_us == first.candidates[0].estimate.time_us
    with pytest.raises(AssertionError, match="was translated"):  # another bucket: not stored, so chosen afresh
        _choose(m=4096)


def test_tuned_lookups_are_not_kept(fresh, monkeypatch):
    monkeypatch.setattr(A, "_tuned", lambda *a, **k: None)  # no `tilex tune` winner stored
    _choose(tuned=True)
    assert CH.store() == 0 and not CH.path().exists()


def test_merge_keeps_other_processes_choices(fresh, monkeypatch):
    _choose()
    CH.store()
    monkeypatch.setattr(A, "_CHOICES", {})  # another process, another shape
    monkeypatch.setattr(CH, "_LOADED", set())
    _choose(m=4096)
    assert CH.store() == 1
    _forget(monkeypatch)
    assert CH.load() == 2
    _choose()
    _choose(m=4096)


def test_damaged_file_is_a_warning_and_rebuilt(fresh, monkeypatch):
    _choose()
    CH.store()
    CH.path().write_bytes(b"not an entry")
    monkeypatch.setattr(A, "_CHOICES", {})
    monkeypatch.setattr(CH, "_LOADED", set())
    from tilex.runtime.cache import CacheWarning

    with pytest.warns(CacheWarning, match="unreadable"):
        assert CH.load() == 0
    _choose()
    with pytest.warns(CacheWarning):
        assert CH.store() == 1
    assert CH.load() == 0 and len(A._CHOICES) == 1  # readable again, nothing missing


def test_off_with_the_translation_cache(fresh, monkeypatch):
    monkeypatch.setenv("TILEX_TRANSLATION_CACHE", "0")
    _choose()
    assert CH.store() == 0 and CH.load() == 0 and not CH.path().exists()
