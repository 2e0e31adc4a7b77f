"""tests/conftest.py puts torch's global thread count back after each test (code under test changes it)."""

from __future__ import annotations

_seen: dict[str, int] = {}


def test_a_test_that_changes_the_thread_count():
    import torch

    _seen["before"] = torch.get_num_threads()
    torch.set_num_threads(2 if _seen["before"] == 1 else 1)  # what train(), evaluate() or a block task do


def test_the_next_test_finds_it_restored():
    import torch

    assert torch.get_num_threads() == _seen.get("before", torch.get_num_threads())
