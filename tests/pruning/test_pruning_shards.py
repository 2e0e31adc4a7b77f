"""Pruning on shards (issue #14): equal to prune() on the concatenated frame, resumable (Ray == local:
tests/selection/test_selection_shards.py runs pruning and selection under Ray in one session)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from curation.pruning import PruningConfig, prune, prune_shards, quality_histogram
from tests.sharded_inputs import sharded_inputs

MODES = [PruningConfig(), PruningConfig(mode="bottom_pct", bottom_pct=45.0),
         PruningConfig(mode="bottom_pct", bottom_pct=12.5), PruningConfig(mode="threshold", threshold=7.0)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pruning_inputs")
    return sharded_inputs(root / "six", 6), sharded_inputs(root / "one", 1)


@pytest.mark.parametrize("config", MODES,
                         ids=lambda c: f"{c.mode}-{c.threshold if c.mode == 'threshold' else c.bottom_pct}")
def test_sharded_pruning_equals_prune_on_the_concatenated_frame(inputs, tmp_path, config):
    (documents, scores, embeddings, (docs, frame, vectors)), one = inputs
    assert frame["quality"].value_counts().max() > 100  # integer scores: many ties at any cut
    keep, report = prune(frame, config)
    out = prune_shards(scores, embeddings, config, tmp_path / "six")
    pruned = out.scores.to_frame()
    assert pruned.equals(frame.loc[keep].reset_index(drop=True))
    stacked = np.concatenate([a for _, a in out.embeddings.iter_arrays()])
    assert np.array_equal(stacked, vectors[keep])
    assert out.scores.names == scores.names and out.embeddings.names == scores.names  # documents' layout
    assert [s.rows for s in out.embeddings.manifest.shards] == [s.rows for s in out.scores.manifest.shards]
    for key in ("docs_in", "kept", "dropped_low_quality", "dropped_nan_quality", "kept_share", "cut_quality"):
        assert out.report[key] == report[key] or (np.isnan(out.report[key]) and np.isnan(report[key])), key
    assert out.report["dropped_nan_quality"] == 4
    for key in ("quality_mean_before", "quality_mean_after"):
        assert out.report[key] == pytest.approx(report[key], rel=1e-12)
    expected = quality_histogram(frame["quality"].to_numpy(), keep)
    pd.testing.assert_frame_equal(out.table, expected, check_dtype=False)
    # one shard gives the same rows
    single = prune_shards(one[1], one[2], config, tmp_path / "one")
    assert single.scores.to_frame().equals(pruned)
    # lineage: the pruned set records what it was made from
    assert out.scores.manifest.inputs == {"scores": scores.fingerprint, "embeddings": embeddings.fingerprint,
                                          "documents": documents.fingerprint}
    assert out.embeddings.manifest.aligned_with == out.scores.fingerprint


def test_bottom_pct_ties_split_across_shards_in_shard_then_row_order(tmp_path):
    from tests.sharded_inputs import write_array, write_frame

    q = np.array([5.0, 1.0, 5.0, 5.0, 2.0, 9.0, 5.0, 3.0, 5.0, 8.0, 5.0, 5.0])
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(len(q))], "quality": q})
    cuts = [np.arange(0, 1), np.arange(1, 4), np.arange(4, 4), np.arange(4, 12)]  # incl. an empty shard
    scores = write_frame(frame, tmp_path / "s", cuts, "scoring")
    emb = write_array(np.eye(len(q), dtype=np.float32), tmp_path / "e", cuts, "scoring")
    config = PruningConfig(mode="bottom_pct", bottom_pct=50.0)  # 6 dropped: 1, 2, 3 and three tied 5s
    keep, _ = prune(frame, config)
    out = prune_shards(scores, emb, config, tmp_path / "w")
    assert out.scores.to_frame()["id"].tolist() == frame["id"][keep].tolist()
    assert np.flatnonzero(~keep).tolist() == [0, 1, 2, 3, 4, 7]  # the first three tied 5s span two shards


def test_a_killed_run_resumes_and_a_finished_one_is_read_back(inputs, tmp_path):
    (documents, scores, embeddings, _), _ = inputs
    config = PruningConfig(mode="bottom_pct", bottom_pct=45.0)
    first = prune_shards(scores, embeddings, config, tmp_path / "a")
    # simulate a kill after three shards: remove the manifests, the report and the last markers
    work = tmp_path / "a"
    for path in [work / "report.json", work / "pruned_scores" / "manifest.json",
                 work / "pruned_embeddings" / "manifest.json"]:
        path.unlink()
    for name in scores.names[3:]:
        (work / "pruned_scores" / "completions" / name).unlink()
    stamp = {n: (work / "pruned_scores" / "shards" / f"{n}.parquet").stat().st_mtime_ns for n in scores.names[:3]}
    again = prune_shards(scores, embeddings, config, work)
    assert again.scores.fingerprint == first.scores.fingerprint
    assert again.embeddings.fingerprint == first.embeddings.fingerprint
    assert {n: (work / "pruned_scores" / "shards" / f"{n}.parquet").stat().st_mtime_ns
            for n in scores.names[:3]} == stamp  # finished shards were not redone
    assert json.loads((work / "report.json").read_text())["report"] == first.report


def test_misaligned_inputs_and_nan_error_are_refused(inputs, tmp_path):
    from curation.shards.lineage import LineageError

    (documents, scores, embeddings, _), (_, one_scores, one_emb, _) = inputs
    with pytest.raises(LineageError, match="not aligned"):
        prune_shards(scores, one_emb, PruningConfig(), tmp_path / "x")
    with pytest.raises(ValueError, match="4 documents have no finite 'quality'"):
        prune_shards(scores, embeddings, PruningConfig(mode="bottom_pct", nan_policy="error"), tmp_path / "y")
    with pytest.raises(ValueError, match="no finite 'quality' score"):
        prune_shards(scores, embeddings, PruningConfig(nan_policy="error"), tmp_path / "z")


# --- small hand-made shards, hand-computed results (issue #28: mutation testing) ---


def _small(tmp_path, q, sizes, column="quality", dim=2, aligned_with=None):
    """``q`` as a scores frame and an embeddings array (row i = [i, 0, ...]) in shards of ``sizes``."""
    from tests.sharded_inputs import write_array, write_frame

    q = np.asarray(q, dtype="float64")
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(len(q))], column: q})
    cuts = np.split(np.arange(len(q)), np.cumsum(sizes)[:-1]) if sizes else []
    vectors = np.zeros((len(q), dim), dtype=np.float32)
    vectors[:, 0] = np.arange(len(q))
    extra = {"aligned_with": aligned_with} if aligned_with else {}
    scores = write_frame(frame, tmp_path / "s", cuts, "scoring", **extra)
    emb = write_array(vectors, tmp_path / "e", cuts, "scoring", **extra)
    return frame, scores, emb


def _kept_ids(out):
    return out.scores.to_frame()["id"].tolist()


def test_plan_cut_of_distinct_scores(tmp_path):
    from curation.pruning import plan_cut

    # sorted: 1 2 3 4 6 7 8 9 10 11; 30% of 10 = 3 dropped (1, 2, 3): tie value 3 (one row), lowest kept 4
    q = [3.0, 7.0, 9.0, 1.0, 8.0, 11.0, 4.0, 10.0, 2.0, 6.0]
    frame, scores, emb = _small(tmp_path, q, [4, 6])
    config = PruningConfig(mode="bottom_pct", bottom_pct=30.0)
    cut = plan_cut(scores, config)
    assert (cut.mode, cut.tie_value, cut.ties_to_drop, cut.cut_quality) == ("bottom_pct", 3.0,
                                                                         {"part-00000": 1, "part-00001": 0}, 4.0)
    out = prune_shards(scores, emb, config, tmp_path / "w")
    assert _kept_ids(out) == ["d1", "d2", "d4", "d5", "d6", "d7", "d9"]
    assert out.report["cut_quality"] == 4.0


@pytest.mark.parametrize("pct, dropped, cut_quality", [(5.0, [], 1.0), (10.0, ["d3"], 2.0), (20.0, ["d3", "d8"], 3.0)])
def test_sharded_bottom_pct_drops_none_one_or_two(tmp_path, pct, dropped, cut_quality):
    from curation.pruning import plan_cut

    q = [3.0, 7.0, 9.0, 1.0, 8.0, 11.0, 4.0, 10.0, 2.0, 6.0]  # floor(10 * pct / 100) = 0, 1, 2
    frame, scores, emb = _small(tmp_path, q, [3, 3, 4])
    config = PruningConfig(mode="bottom_pct", bottom_pct=pct)
    out = prune_shards(scores, emb, config, tmp_path / "w")
    assert sorted(set(frame["id"]) - set(_kept_ids(out))) == dropped
    assert out.report["cut_quality"] == cut_quality
    assert out.report["dropped_low_quality"] == len(dropped)
    assert plan_cut(scores, config).mode == "bottom_pct"


def test_sharded_cut_quality_is_the_lowest_kept_score_of_a_permutation(tmp_path):
    # a permutation of 0..999 whose cut np.partition(values, [449])[450] alone gets wrong (489): the cut
    # needs both kth; the lowest kept score is 450 whatever the selection algorithm
    q = np.random.default_rng(220).permutation(1000).astype("float64")
    frame, scores, emb = _small(tmp_path, q, [1000])
    out = prune_shards(scores, emb, PruningConfig(mode="bottom_pct", bottom_pct=45.0), tmp_path / "w")
    assert out.report["cut_quality"] == 450.0 and out.report["kept"] == 550


def test_sharded_pruning_of_another_score_column(tmp_path):
    from curation.pruning import plan_cut, quality_column

    q = [5.0, 1.0, 3.0, 2.0]
    frame, scores, emb = _small(tmp_path, q, [2, 2], column="merged")
    config = PruningConfig(mode="bottom_pct", bottom_pct=50.0, score_column="merged")
    assert plan_cut(scores, config).cut_quality == 3.0
    assert _kept_ids(prune_shards(scores, emb, config, tmp_path / "w")) == ["d0", "d2"]
    assert quality_column(scores, "merged").tolist() == q
    with pytest.raises(KeyError, match=r"^pruning\.score_column='quality': 'quality' is not a column of the scores \(they have \['merged'\]\)\. Fix: set pruning\.score_column to one of them"):
        quality_column(scores)  # the default column
    for mode in ("threshold", "bottom_pct"):
        with pytest.raises(KeyError, match=r"^pruning\.score_column='quality': 'quality' is not a column of the scores \(they have \['merged'\]\)\. Fix: set pruning\.score_column to one of them"):
            plan_cut(scores, PruningConfig(mode=mode))


def test_a_score_column_that_is_missing_or_not_numbers_is_one_line_naming_the_key(tmp_path):
    from curation.configuration import ConfigError
    from curation.pruning import plan_cut, quality_column

    frame = pd.DataFrame({"id": ["a", "b"], "quality": [1.0, 2.0], "label": ["x", "y"]})
    with pytest.raises(ConfigError, match=r"^pruning\.score_column='nope': 'nope' is not a column of the scores "
                                          r"\(they have \['quality', 'label'\]\)\. Fix: set pruning\.score_column"):
        prune(frame, PruningConfig(score_column="nope"))
    with pytest.raises(ConfigError, match=r"^pruning\.score_column='label': the scores' column 'label' holds (str|object) "
                                          r"values, not numbers\. Fix: set pruning\.score_column to a numeric"):
        prune(frame, PruningConfig(score_column="label"))
    _, scores, _ = _small(tmp_path, [5.0, 1.0], [2], column="merged")
    with pytest.raises(ConfigError, match=r"^selection\.score='nope': 'nope' is not a column"):
        quality_column(scores, "nope", key="selection.score")
    with pytest.raises(ConfigError, match=r"^pruning\.score_column='nope'"):
        plan_cut(scores, PruningConfig(mode="threshold", score_column="nope"))


def test_quality_column_default_and_no_shards(tmp_path):
    from curation.pruning import quality_column

    frame, scores, emb = _small(tmp_path / "a", [2.0, np.nan, 4.0], [1, 2])
    column = quality_column(scores)
    assert column.dtype == np.float64 and column[0] == 2.0 and np.isnan(column[1]) and column[2] == 4.0
    frame, none, _ = _small(tmp_path / "b", [], [])
    empty = quality_column(none)
    assert empty.dtype == np.float64 and empty.shape == (0,)


def test_sharded_report_without_any_shard_or_row(tmp_path):
    # no shard: every count is 0, every mean NaN, the histogram all zeros (prune() on an empty frame agrees)
    frame, scores, emb = _small(tmp_path / "none", [], [])
    config = PruningConfig(mode="bottom_pct")
    out = prune_shards(scores, emb, config, tmp_path / "w0")
    expected = prune(frame, config)[1]
    assert {k: v for k, v in out.report.items() if not np.isnan(v)} == {
        "docs_in": 0.0, "kept": 0.0, "dropped_low_quality": 0.0, "dropped_nan_quality": 0.0, "kept_share": 0.0}
    assert all(np.isnan(out.report[k]) and np.isnan(expected[k])
               for k in ("cut_quality", "quality_mean_before", "quality_mean_after"))
    assert out.table["docs_before"].tolist() == [0] * 16 and out.table["docs_after"].tolist() == [0] * 16
    # shards, but every row unscored: NaN cut (bottom_pct), counted drops in the report it wrote; no document
    # kept, so it is refused (issue #44), naming the cause
    from curation.pruning import PruningEmptyError

    frame, scores, emb = _small(tmp_path / "nan", [np.nan, np.nan, np.nan], [1, 2])
    with pytest.raises(PruningEmptyError, match="none of the 3 documents has a finite 'quality' score"):
        prune_shards(scores, emb, config, tmp_path / "w1")
    report = json.loads((tmp_path / "w1" / "report.json").read_text())["report"]
    assert (report["docs_in"], report["kept"], report["dropped_nan_quality"]) == (3.0, 0.0, 3.0)
    assert report["kept_share"] == 0.0
    assert all(np.isnan(report[k]) for k in ("cut_quality", "quality_mean_before", "quality_mean_after"))


def test_sharded_infinite_scores_agree_with_prune(tmp_path):
    q = [np.inf, 5.0, 3.0, -np.inf, 7.0]
    frame, scores, emb = _small(tmp_path, q, [2, 3])
    keep, report = prune(frame, PruningConfig())
    out = prune_shards(scores, emb, PruningConfig(), tmp_path / "w")
    assert _kept_ids(out) == ["d1", "d4"]
    assert out.report == report and report["quality_mean_before"] == 5.0


def test_a_finished_run_is_read_back_without_a_pass(tmp_path, monkeypatch):
    import curation.pruning as pruning

    frame, scores, emb = _small(tmp_path, [3.0, 7.0, 9.0, 1.0, 8.0, 11.0, 4.0], [3, 4])
    config = PruningConfig(mode="bottom_pct", bottom_pct=30.0)
    first = prune_shards(scores, emb, config, tmp_path / "w")
    assert first.scores.keep and first.embeddings.keep  # a result-cache entry: published as links

    def no_pass(*args, **kwargs):
        raise AssertionError("a finished run was redone")

    monkeypatch.setattr(pruning, "plan_cut", no_pass)
    monkeypatch.setattr(pruning, "_check_pair", no_pass)
    again = prune_shards(scores, emb, config, tmp_path / "w")
    assert again.report == first.report and again.report["cut_quality"] == 4.0
    pd.testing.assert_frame_equal(again.table, first.table)
    assert again.scores.root == first.scores.root and again.embeddings.root == first.embeddings.root
    assert again.scores.to_frame().equals(first.scores.to_frame())
    assert again.embeddings.fingerprint == first.embeddings.fingerprint
    assert again.scores.keep and again.embeddings.keep


def test_a_run_killed_before_its_report_is_finished_again(tmp_path):
    # both manifests written, report.json not: not finished, so redone (and the report written)
    frame, scores, emb = _small(tmp_path, [3.0, 7.0, 9.0, 1.0], [2, 2])
    config = PruningConfig(mode="bottom_pct", bottom_pct=50.0)
    first = prune_shards(scores, emb, config, tmp_path / "w")
    (tmp_path / "w" / "report.json").unlink()
    again = prune_shards(scores, emb, config, tmp_path / "w")
    assert again.report == first.report and (tmp_path / "w" / "report.json").is_file()
    assert _kept_ids(again) == ["d1", "d2"]


def test_pruned_manifests_record_stage_config_and_inputs(tmp_path):
    from curation.cache import config_key
    from curation.pruning import PRUNING_VERSION
    import dataclasses

    frame, scores, emb = _small(tmp_path, [3.0, 7.0, 9.0, 1.0], [2, 2], aligned_with="docs-fp")
    config = PruningConfig(threshold=5.0)
    out = prune_shards(scores, emb, config, tmp_path / "w")
    inputs = {"scores": scores.fingerprint, "embeddings": emb.fingerprint, "documents": "docs-fp"}
    digest = config_key(PRUNING_VERSION, dataclasses.asdict(config))
    for manifest in (out.scores.manifest, out.embeddings.manifest):
        assert (manifest.stage, manifest.config_digest, manifest.remake) == (
            "pruning", digest, "curate pipeline=pruning")
    assert out.scores.manifest.kind == "frame" and out.embeddings.manifest.kind == "array"
    assert out.scores.manifest.inputs == inputs
    assert out.embeddings.manifest.inputs == {"pruned_scores": out.scores.fingerprint, **inputs}
    other = prune_shards(scores, emb, PruningConfig(threshold=6.0), tmp_path / "w2")
    assert other.scores.manifest.config_digest != digest


def test_stale_or_wrong_kind_inputs_are_refused_with_the_remedy(tmp_path):
    from curation.shards.lineage import LineageError

    _, scores, _ = _small(tmp_path / "a", [1.0, 2.0], [1, 1], aligned_with="fp-a")
    _, _, emb_b = _small(tmp_path / "b", [1.0, 2.0], [1, 1], aligned_with="fp-b")
    with pytest.raises(LineageError, match="embeddings from documents fp-b: one is stale. "
                                           r"Re-make both with `curate pipeline=scoring`"):
        prune_shards(scores, emb_b, PruningConfig(), tmp_path / "w")
    _, _, emb_one = _small(tmp_path / "c", [1.0, 2.0], [2])
    with pytest.raises(LineageError, match=r"not aligned .*; re-make both with `curate pipeline=scoring`"):
        prune_shards(scores, emb_one, PruningConfig(), tmp_path / "w")
    with pytest.raises(ValueError, match=r"pruning: embeddings \(.*\) must be an array dataset"):
        prune_shards(scores, scores, PruningConfig(), tmp_path / "w")


def test_keep_mask_nan_policy_and_ties_of_an_unlisted_shard():
    from curation.pruning import ShardCut, keep_mask

    strict = PruningConfig(nan_policy="error")
    q = np.array([5.0, 3.0, 6.0])
    assert keep_mask(q, ShardCut("threshold", threshold=4.0), "part-00000", strict).tolist() == [True, False, True]
    with pytest.raises(ValueError, match=r"shard part-00001: 2 documents have no finite 'quality' score"):
        keep_mask(np.array([np.nan, 1.0, np.nan]), ShardCut("threshold", threshold=4.0), "part-00001", strict)
    cut = ShardCut("bottom_pct", tie_value=5.0, ties_to_drop={"part-00000": 1})
    q = np.array([5.0, 5.0, 3.0, 6.0])
    assert keep_mask(q, cut, "part-00000", PruningConfig()).tolist() == [False, True, False, True]
    assert keep_mask(q, cut, "part-00001", PruningConfig()).tolist() == [True, True, False, True]  # none listed


def test_prune_shard_counts_by_hand():
    from curation.pruning import ShardCut, prune_shard

    # scores outside 0-15 are binned at the ends; an object column with None is read as floats
    q = pd.Series([-0.5, 0.5, 4.5, 16.5, None, 2.0], dtype=object)
    frame = pd.DataFrame({"id": list("abcdef"), "quality": q})
    embeddings = np.arange(12, dtype=np.float64).reshape(6, 2)
    result = prune_shard((frame, embeddings), "part-00000", config=PruningConfig(threshold=0.0),
                         cut=ShardCut("threshold", threshold=0.0))
    assert result.outputs["pruned_scores"]["id"].tolist() == ["b", "c", "d", "f"]
    pruned = result.outputs["pruned_embeddings"]
    assert pruned.dtype == np.float32 and pruned.tolist() == [[2, 3], [4, 5], [6, 7], [10, 11]]
    before = [2, 0, 1, 0, 1] + [0] * 10 + [1]
    after = [1, 0, 1, 0, 1] + [0] * 10 + [1]
    assert result.stats == {
        "docs_in": 6, "kept": 4, "dropped_low_quality": 1, "dropped_nan_quality": 1,
        "quality_sum_before": 23.0, "quality_finite": 5, "quality_sum_after": 23.5,
        **{f"hist_before_{i}": c for i, c in enumerate(before)}, **{f"hist_after_{i}": c for i, c in enumerate(after)}}
    # every shard reports all 16 bins (also when its top bins are empty); a kept negative score is bin 0
    low = pd.DataFrame({"id": ["a", "b"], "quality": [-2.0, 3.5]})
    result = prune_shard((low, None), "part-00001", config=PruningConfig(threshold=-3.0),
                         cut=ShardCut("threshold", threshold=-3.0))
    assert "pruned_embeddings" not in result.outputs
    assert [result.stats[f"hist_before_{i}"] for i in range(16)] == [1, 0, 0, 1] + [0] * 12
    assert [result.stats[f"hist_after_{i}"] for i in range(16)] == [1, 0, 0, 1] + [0] * 12
    assert len(result.stats) == 7 + 32
    with pytest.raises(ValueError, match="shard part-00003: scores have 6 rows but embeddings 5"):
        prune_shard((frame, embeddings[:5]), "part-00003", config=PruningConfig(), cut=ShardCut("threshold", 4.0))


def test_pruning_that_removes_every_document_is_one_line_with_the_fix(inputs, tmp_path):
    """Issue #44: a threshold above every score left no candidate, and selection ended in ZeroDivisionError."""
    from curation.errors import UserError, user_message

    (documents, scores, embeddings, (docs, frame, vectors)), _ = inputs
    highest = float(np.nanmax(frame["quality"].to_numpy(dtype="float64", na_value=np.nan)))
    with pytest.raises(UserError) as err:
        prune_shards(scores, embeddings, PruningConfig(threshold=99.0), tmp_path / "w")
    message = user_message(err.value)
    assert message.startswith(f"pruning removed every document (pruning.threshold=99): 0 of {len(frame):,} kept; "
                              f"the highest quality is {highest:.3g}")
    assert f"Fix: lower pruning.threshold to at most {highest:.3g}" in message and "\n" not in message
    # again from the finished work folder (the result cache): the same refusal, not an empty selection later
    assert (tmp_path / "w" / "report.json").is_file()
    with pytest.raises(UserError, match="pruning removed every document"):
        prune_shards(scores, embeddings, PruningConfig(threshold=99.0), tmp_path / "w")


def test_pruning_of_unscored_documents_says_so(tmp_path):
    from curation.pruning import empty_pruning_error

    report = {"docs_in": 3.0, "kept": 0.0}
    err = empty_pruning_error(report, PruningConfig(mode="bottom_pct"), np.array([np.nan, np.inf, np.nan]))
    assert str(err).startswith("pruning removed every document (pruning.mode=bottom_pct, pruning.bottom_pct=45): "
                               "none of the 3 documents has a finite 'quality' score")


def test_selection_from_an_empty_pruned_corpus_is_refused_not_divided_by_zero():
    from curation.errors import UserError
    from curation.selection.corpus import resolve_budget

    with pytest.raises(UserError, match=r"^no candidate to select from: the pruned corpus is empty \(0 of 200 "
                                        r"ingested documents kept by pruning\)\. Fix: prune less"):
        resolve_budget({"keep_ratio": 0.1, "ratio_of": "corpus"}, 200, 0)
