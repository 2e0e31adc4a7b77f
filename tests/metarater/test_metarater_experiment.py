"""The Meta-rater experiment core without Kedro: rater columns, scaling, and a sweep where one proxy fails."""

from __future__ import annotations

import numpy as np
import pytest

from curation.metarater.config import parse_metarater_config
from curation.metarater.experiment import draw_proxy_weights, prepare_metarater_data, rater_columns, train_proxies
from curation.metarater.proxy import ProxyBench


def _config(**overrides):
    return parse_metarater_config(
        {"num_proxies": 4, "keep_frac": 0.2, "validation": {"max_tokens": 3000},
         "proxy": {"max_tokens": 1024, "batch_size": 4, "vocab_size": 512, "tokenizer_docs": 200, "num_threads": 1},
         **overrides})


def test_raters_are_the_scores_without_merge_copies_scaled_to_0_5(documents, scores, tmp_path):
    raters = rater_columns(scores, None)
    assert len(raters) == 11 and "quality" not in raters and "doc_word_count_0_5" not in raters
    with pytest.raises(KeyError, match="fasttext_dclm"):
        rater_columns(scores, ["fasttext_dclm"])
    cfg = _config(invert=["doc_frac_no_alph_words"])
    rater_scores, validation_ids, metrics = prepare_metarater_data(documents, scores, cfg)
    values = rater_scores[raters].to_numpy()
    assert np.isclose(values.min(axis=0), 0).all() and np.isclose(values.max(axis=0), 5).all()
    assert metrics["candidates"] + metrics["validation_docs"] + metrics["test_docs"] == len(documents) \
        == len(rater_scores) + len(validation_ids)
    assert set(validation_ids["set"]) == {"validation", "test"} and metrics["validation_docs"] > 0
    assert not set(rater_scores["id"]) & set(validation_ids["id"])
    assert (documents["id"].to_numpy()[rater_scores["doc_row"]] == rater_scores["id"].to_numpy()).all()
    # Inverted: the document with the most non-alphabetic words scores 0.
    raw = scores.set_index("id").loc[rater_scores["id"], "doc_frac_no_alph_words"].to_numpy()
    assert rater_scores["doc_frac_no_alph_words"].to_numpy()[np.nanargmax(raw)] == 0.0
    with pytest.raises(ValueError, match="not aligned"):
        prepare_metarater_data(documents, scores.iloc[::-1], cfg)


def test_a_failing_proxy_is_reported_and_the_others_are_kept(documents, scores, tmp_path, monkeypatch):
    cfg = _config()
    rater_scores, validation_ids, _ = prepare_metarater_data(documents, scores, cfg)
    weights = draw_proxy_weights(rater_scores, cfg)
    original, calls = ProxyBench.evaluate, []

    def out_of_memory_on_second(self, rows, seed=None, on_step=None):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory (proxy 1)")
        return original(self, rows, seed, on_step)

    monkeypatch.setattr(ProxyBench, "evaluate", out_of_memory_on_second)
    logged = []
    table, metrics, history = train_proxies(documents, rater_scores, validation_ids, weights, cfg, tmp_path,
                                            on_result=lambda *call: logged.append(call))
    assert table["status"].tolist() == ["ok", "failed", "ok", "ok"]
    assert "out of memory" in table.loc[1, "error"] and np.isnan(table.loc[1, "val_loss"])
    assert (metrics["proxies_ok"], metrics["proxies_failed"]) == (3, 1)
    assert history["step"].tolist() == [0, 2, 3]  # the loss series skips the failed proxy
    # The callback hears of every proxy, the failed one included (MLflow child runs log these).
    assert [(name, kind, result["status"]) for name, kind, result, _, _ in logged] == [
        ("proxy 000", "proxy", "ok"), ("proxy 001", "proxy", "failed"), ("proxy 002", "proxy", "ok"),
        ("proxy 003", "proxy", "ok")]
    assert logged[0][3] == {"proxy_id": 0} and set(logged[0][4]) == {f"w_{r}" for r in rater_columns(scores, None)}

    # A re-run keeps the failure by default; retry_failed trains only proxy 1 again.
    monkeypatch.setattr(ProxyBench, "evaluate", original)
    again, metrics, _ = train_proxies(documents, rater_scores, validation_ids, weights, cfg, tmp_path)
    assert again["status"].tolist() == ["ok", "failed", "ok", "ok"] and metrics["proxies_trained"] == 0
    retried, metrics, _ = train_proxies(documents, rater_scores, validation_ids, weights,
                                        _config(retry_failed=True), tmp_path)
    assert retried["status"].tolist() == ["ok"] * 4 and metrics["proxies_trained"] == 1
    assert retried.loc[[0, 2, 3], "val_loss"].tolist() == table.loc[[0, 2, 3], "val_loss"].tolist()


def test_the_final_selection_keeps_the_token_budget_and_the_domain_mix(documents, scores, tmp_path):
    """select_with_optimal_weights (the pipeline's final selection) under the default rule: keep_frac of the
    candidates' proxy-tokenizer tokens, each category at its share of the candidates' tokens."""
    import pandas as pd

    from curation.metarater.experiment import select_with_optimal_weights

    cfg = _config(keep_frac=0.5)
    rater_scores, validation_ids, _ = prepare_metarater_data(documents, scores, cfg)
    raters = rater_columns(scores, None)
    weights = pd.DataFrame({"rank": range(1, len(raters) + 1), "rater": raters,
                            "weight_pct": 100.0 * np.arange(1, len(raters) + 1) / sum(range(1, len(raters) + 1))})
    selected, metrics = select_with_optimal_weights(weights, rater_scores, documents, validation_ids, cfg, tmp_path)
    assert abs(metrics["budget_error"]) < 0.01 and metrics["domain_share_max_gap"] < 0.01
    assert metrics["selected_docs"] == len(selected) and not set(selected["id"]) & set(validation_ids["id"])
    top = _config(keep_frac=0.5, selection_rule="top_frac")
    selected_top, _ = select_with_optimal_weights(weights, rater_scores, documents, validation_ids, top, tmp_path)
    assert len(selected_top) == round(0.5 * len(rater_scores))  # the global top-k stays an option


def test_proxies_that_would_train_over_their_selection_more_than_once_are_refused_first(documents, scores,
                                                                                         tmp_path, monkeypatch):
    # issue #44: on a small corpus the defaults meant ~90 passes over each proxy's selection, for 64 proxies
    from curation.metarater.experiment import ProxyBudgetError

    cfg = _config(keep_frac=0.01, proxy={"max_tokens": 1_000_000, "batch_size": 4, "vocab_size": 512,
                                         "tokenizer_docs": 200, "num_threads": 1})
    rater_scores, validation_ids, _ = prepare_metarater_data(documents, scores, cfg)
    weights = draw_proxy_weights(rater_scores, cfg)
    monkeypatch.setattr(ProxyBench, "evaluate", lambda *a, **k: pytest.fail("a proxy trained"))
    with pytest.raises(ProxyBudgetError, match=r"^metarater\.proxy\.max_tokens=1000000: each proxy trains on "
                                               r"1,000,000 tokens, but its selection \(metarater\.keep_frac=0\.01 of "
                                               r"the [\d,]+ candidates' [\d,]+ tokens\) holds about [\d,]+: [\d,.]+ "
                                               r"passes over it, .*Fix: set metarater\.proxy\.max_tokens to at most"):
        train_proxies(documents, rater_scores, validation_ids, weights, cfg, tmp_path)
