"""DataMask's final mask (issue #53 item 6): ``final`` = sample (Algorithm 1), topk or best."""

import numpy as np
import pytest
import torch

from curation.selection import select
from curation.selection.config import DataMaskConfig, parse_selection_config
from curation.selection.datamask import run_block, topk_indices
from curation.selection.synthetic import clustered_unit_vectors

CFG = {"steps": 60, "history_every": 5, "batch_ratio": 0.25, "group_size": 16, "lam": 0.3}


@pytest.fixture(scope="module")
def problem():
    emb, quality, _ = clustered_unit_vectors(400, 16, n_clusters=8, seed=0)
    return emb, quality


def _returned(sel):
    return sel.history[sel.history["mask"] == "returned"].iloc[-1]


def test_the_final_setting_does_not_change_the_training_and_best_returns_the_best_recorded_mask(problem):
    emb, q = problem
    runs = {f: select("datamask", quality=q, embeddings=emb, budget=40, config={**CFG, "final": f}, seed=2)
            for f in ("sample", "topk", "best")}
    topk_rows = {f: r.history[r.history["mask"] == "topk"].reset_index(drop=True) for f, r in runs.items()}
    for f in ("topk", "best"):  # the same run up to the last step: final acts only after it
        np.testing.assert_array_equal(topk_rows[f]["joint"], topk_rows["sample"]["joint"])
    rows = topk_rows["sample"]
    best_row = rows.loc[rows["joint"].idxmax()]
    assert _returned(runs["best"])["joint"] == pytest.approx(best_row["joint"], rel=1e-12)
    assert _returned(runs["topk"])["joint"] == pytest.approx(rows["joint"].iloc[-1], rel=1e-12)
    block = runs["best"].info["blocks"][0]
    assert block["returned_step"] == best_row["step"] and block["returned_shortfall"] == 0.0
    assert block["below_topk"] == 0.0 and runs["best"].info["blocks_warned"] == 0.0
    assert "returned_step" not in runs["sample"].info["blocks"][0]  # the key only where final=best
    # best is never below the last top-S (the last recorded row is a candidate), nor below the sampled mask's
    # best possible row; on this problem the sample is below both
    assert _returned(runs["best"])["joint"] >= _returned(runs["topk"])["joint"]
    assert len(runs["best"].indices) == 40 == len(np.unique(runs["best"].indices))


def test_best_is_the_first_of_equal_rows_and_its_full_order_starts_with_the_returned_mask(problem):
    emb, q = problem
    cfg = parse_selection_config("datamask", {**CFG, "final": "best"})
    result = run_block(torch.from_numpy(emb), torch.as_tensor(q), 40, cfg, seed=1, full_order=True)
    rows = result.history[result.history["mask"] == "topk"]
    first_best = int(rows["step"].iloc[int(np.argmax(rows["joint"].to_numpy()))])  # argmax: the first maximum
    assert result.info["returned_step"] == first_best
    assert sorted(result.order[:40].tolist()) == result.indices.tolist()
    assert len(np.unique(result.order)) == 400


def test_final_best_is_what_the_history_every_rows_saw(problem):
    # final=best picks among the recorded rows, so history_every is part of the optimisation there (the resume
    # fingerprint keeps it) and only there
    from curation.selection.datamask import _fingerprint

    for final, kept in (("best", True), ("sample", False), ("topk", False)):
        fp = _fingerprint(400, 40, 0, 0, DataMaskConfig(final=final, history_every=7))
        assert ("history_every" in fp) is kept, final


def test_a_resumed_best_run_returns_the_uninterrupted_runs_mask(problem, tmp_path):
    emb, q = problem
    cfg = {**CFG, "final": "best", "checkpoint_every": 20, "checkpoint_dir": str(tmp_path / "ckpt")}
    whole = select("datamask", quality=q, embeddings=emb, budget=40, config={**CFG, "final": "best"}, seed=5)

    class Stop(Exception):
        pass

    def stop_after_30(done, total):
        if done > 30:
            raise Stop

    with pytest.raises(Stop):  # killed after the step-20 checkpoint (which holds the best row so far)
        select("datamask", quality=q, embeddings=emb, budget=40, config=cfg, seed=5, progress=stop_after_30)
    state = torch.load(tmp_path / "ckpt" / "block_00000.pt", weights_only=True)
    assert state["step"] == 20 and {"best_joint", "best_step", "best_logits"} <= set(state)
    resumed = select("datamask", quality=q, embeddings=emb, budget=40, config={**cfg, "resume": True}, seed=5)
    np.testing.assert_array_equal(resumed.indices, whole.indices)
    assert resumed.info["blocks"][0]["returned_step"] == whole.info["blocks"][0]["returned_step"]


def test_best_with_zero_steps_returns_the_initial_top_s():
    q = np.linspace(0.0, 15.0, 50)
    emb, _, _ = clustered_unit_vectors(50, 8, n_clusters=4, seed=0)
    sel = select("datamask", quality=q, embeddings=emb, budget=5,
                 config={"steps": 0, "init": "quality", "final": "best"}, seed=0)
    expected = np.sort(topk_indices(torch.as_tensor(q), 5).numpy())
    np.testing.assert_array_equal(sel.indices, expected)


def test_final_names_its_three_values():
    with pytest.raises(ValueError, match="final.*'sample', 'topk' or 'best'"):
        parse_selection_config("datamask", {"final": "argmax"})


def test_the_health_message_names_the_setting_that_fixes_the_final_mask_it_was_given():
    from curation.selection.datamask import health_message

    info = {"below_topk": 1.0, "returned_shortfall": 0.0234}
    sampled = health_message(info, DataMaskConfig(final="sample"))
    assert "returned (sampled) mask's objective is 2.3% below" in sampled and "selection.final=topk" in sampled
    late = health_message(info, DataMaskConfig(final="topk"))
    assert "the top-S of the last logits) is 2.3% below the best top-S mask recorded" in late
    assert "Fix: for the mask, selection.final=best returns the best top-S mask recorded during the run" in late
    assert "selection.final=topk" not in late


def test_a_token_budgets_pilot_warns_as_a_note_only(problem, caplog):
    # issue #53: the pilot (a tenth of the steps) only sets the mask size; its mask is never returned, so its
    # health warning (every one in decide's logs was a pilot's) is an INFO note; the full run still warns
    from curation.selection.tokens import select_tokens

    emb, q = problem
    n_tokens = np.full(len(q), 10.0)
    cfg = {"steps": 500, "lr": 0.01, "final": "sample", "batch_ratio": 0.25, "group_size": 16, "history_every": 10}
    with caplog.at_level("INFO", logger="curation.selection.datamask"):
        select_tokens("datamask", quality=q, embeddings=emb, n_tokens=n_tokens, budget_tokens=400.0, config=cfg,
                      seed=0)
    records = [r for r in caplog.records if r.name == "curation.selection.datamask"]
    notes = [r for r in records if r.getMessage().startswith("token-budget pilot")]
    warnings = [r for r in records if r.levelname == "WARNING"]
    assert len(notes) == 1 and notes[0].levelname == "INFO" and "returned (sampled)" in notes[0].getMessage()
    assert len(warnings) == 1 and "returned (sampled)" in warnings[0].getMessage()  # the full run's own
