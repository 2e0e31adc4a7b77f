"""``run_tasks``: the shard engines for tasks whose result is a value (issue #51: decide's cells). The local pool
returns the values in task order, runs them in other processes with their share of the CPUs, and calls
``on_result`` in the driver; ``workers=1`` runs them here, in order."""

from __future__ import annotations

import os

import pytest

from curation.shards.executor import EngineConfig, cpus_available, run_tasks, task_cpus


def where(x: int) -> tuple[int, int, int | None]:
    """Module level: a pool worker imports it by name."""
    return x * x, os.getpid(), task_cpus()


def fails(x: int) -> int:
    if x == 2:
        raise ValueError(f"task {x} is bad")
    return x


def test_a_pool_returns_the_values_in_task_order_and_calls_back_in_the_driver():
    seen: list[tuple[int, int]] = []
    results = run_tasks(where, list(range(5)), EngineConfig(workers=2),
                        on_result=lambda i, r: seen.append((i, os.getpid())))
    assert [r[0] for r in results] == [0, 1, 4, 9, 16]
    assert all(pid != os.getpid() for _, pid, _ in results)  # each in a worker process
    assert {cpus for _, _, cpus in results} == {max(1, cpus_available() // 2)}  # its share of the CPUs
    assert sorted(i for i, _ in seen) == list(range(5)) and {pid for _, pid in seen} == {os.getpid()}


def test_one_worker_runs_the_tasks_here_in_order_with_no_cpu_share():
    seen: list[int] = []
    results = run_tasks(where, [3, 1, 2], EngineConfig(workers=1), on_result=lambda i, r: seen.append(i))
    assert [r[0] for r in results] == [9, 1, 4] and seen == [0, 1, 2]
    assert {pid for _, pid, _ in results} == {os.getpid()} and {c for _, _, c in results} == {None}


def test_an_error_in_a_pool_task_is_raised_with_its_type():
    with pytest.raises(ValueError, match="task 2 is bad"):
        run_tasks(fails, [0, 1, 2, 3], EngineConfig(workers=2), names=["a", "b", "c", "d"], what="cell")
