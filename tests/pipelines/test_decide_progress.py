"""decide's time left counts each remaining cell's own cost (issue #53: a uniform rate read the cheap first rung,
then the estimate jumped from 4,725 s to 9,682 s)."""

from __future__ import annotations

import re

import pytest

from curation.decide import cells as cells_module


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _plan(rungs, per_rung):
    return [("tiny", tokens) for tokens in rungs for _ in range(per_rung)]


@pytest.mark.parametrize("overhead", [0.0, 5.0])
def test_the_time_left_follows_the_cells_own_costs(monkeypatch, capsys, overhead):
    clock = Clock()
    monkeypatch.setattr(cells_module.time, "perf_counter", clock)
    show = cells_module.progress_printer(started=clock.now)
    rungs, per_rung = [16_384, 65_536, 262_144], 4
    plan = _plan(rungs, per_rung)
    train_per_token, eval_s = 1e-3, 10.0  # 16 s, 66 s, 262 s of training; 10 s of evaluation each
    costs = [train_per_token * tokens + eval_s + overhead for _, tokens in plan]
    etas, truth = [], []
    for i, (size, tokens) in enumerate(plan):
        clock.now += costs[i]
        row = {"size": size, "rung_tokens": tokens, "train_tokens": tokens, "train_seconds": train_per_token * tokens,
               "eval_seconds": eval_s, "pretrain_cache_hit": 0.0, "eval_cache_hit": 0.0}
        show(i + 1, len(plan), f"cell {i}", row=row, remaining=plan[i + 1:])
        etas.append(float(re.findall(r"~(\d+) s left", capsys.readouterr().out)[-1]))
        truth.append(sum(costs[i + 1:]))
    # from the second cell on, within 5% of the truth (plus rounding), rung changes included: no jump
    for eta, true in list(zip(etas, truth))[1:]:
        assert eta == pytest.approx(true, rel=0.05, abs=1.0), (etas, truth)
    # the uniform rate of before would have said a third of it after the first rung
    uniform = (sum(costs[1:per_rung]) / (per_rung - 1)) * (len(plan) - per_rung)
    assert uniform < 0.4 * truth[per_rung - 1]


def test_without_a_plan_it_keeps_the_uniform_rate(monkeypatch, capsys):
    clock = Clock()
    monkeypatch.setattr(cells_module.time, "perf_counter", clock)
    show = cells_module.progress_printer(started=clock.now)
    for i in range(3):
        clock.now += 10
        show(i + 1, 5, f"cell {i}")
    assert "~20 s left" in capsys.readouterr().out.splitlines()[-1]
