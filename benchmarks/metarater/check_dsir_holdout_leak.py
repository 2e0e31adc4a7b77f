"""How much the DSIR hold-out leak of the held-out Meta-rater run (issue #27) moved DSIR's candidate scores.

The run used DSIR target counts built on all reference documents (ref-dsir-b0596855601e749f) instead of the
ones without the reserved hold-out (ref-dsir-ac5f1a7819ea75e9). This re-scores the candidates with both and
prints the rank correlation and the overlap of the top 15%. Needs both artifacts under data/06_models/shared
and the prepared inputs (run_heldout_tables.py prepare --out /tmp/meta_local_in).
"""
import numpy as np, pandas as pd
from dataclasses import replace
from curation.scoring.dsir import DSIRImportance
from curation.scoring.config import ScoringConfig
from curation.scoring.reference import load_reference_corpus
cfg = ScoringConfig()
ref = load_reference_corpus("data/01_raw/corpus").reset_index(drop=True)
rs = pd.read_parquet("/tmp/meta_local_in/rater_scores.parquet"); vi = pd.read_parquet("/tmp/meta_local_in/validation_ids.parquet")
pos = pd.Series(np.arange(len(ref)), index=ref["id"])
cand = pos.loc[rs["id"]].to_numpy(); held = pos.loc[vi["id"]].to_numpy()
texts = ref["text"].tolist()
out = {}
for target in ("books", "wikipedia"):
    m = replace(cfg.dsir.model, target=target)
    h = DSIRImportance(m)
    z = h.features(texts)
    raw = np.asarray(z.sum(axis=0)).ravel()
    old = np.load("data/06_models/shared/ref-dsir-b0596855601e749f/dsir_counts.npz")[target]
    new = np.load("data/06_models/shared/ref-dsir-ac5f1a7819ea75e9/dsir_counts.npz")[target]
    s_old = DSIRImportance(m).fit_counts(old, raw).score_features(z[cand])
    s_new = DSIRImportance(m).fit_counts(new, raw).score_features(z[cand])
    k = int(0.15 * len(cand))
    top_old, top_new = set(np.argsort(-s_old)[:k]), set(np.argsort(-s_new)[:k])
    from scipy.stats import spearmanr
    print(target, "spearman old/new over candidates", round(spearmanr(s_old, s_new).statistic, 4),
          "top-15% overlap", round(len(top_old & top_new) / k, 4))
