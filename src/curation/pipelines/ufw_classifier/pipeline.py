"""ufw_classifier: Ultra-FineWeb's verified-seed fastText classifier (seeds/002 Fig. 1(c), Sec. 2.2-2.5, 3.2).

ingest -> candidate seed pools -> tokenizer -> efficient verification of each pool over seeds (WSD base,
annealing vs the default-only control) -> the pools that help are the positives, negatives from every raw
source -> fastText (Sec. 2.5 recipe), optionally a second round on its own predictions -> the corpus
scored -> the P >= 0.5 filter. Ingest is part of the pipeline so that a fresh clone runs it alone
(`curate pipeline=ufw_classifier`); its finished shards are reused on a re-run.
"""

from kedro.pipeline import Node, Pipeline

from curation.pipelines.tokenizer import tokenizer_node
from curation.nodes.ufw_classifier import filter_ufw_keep, select_seed_pools, train_ufw_classifier, verify_seed_pools
from curation.pipelines.ingest import create_pipeline as ingest_pipeline


def create_pipeline(**kwargs) -> Pipeline:
    return ingest_pipeline() + Pipeline(
        [
            Node(
                select_seed_pools,
                inputs=["documents@frame", "params:verification"],
                outputs=["ufw_seed_pools", "ufw_seed_pools_table"],
                name="select_seed_pools_node",
            ),
            tokenizer_node("ufw_tokenizer", "ufw_tokenizer_metrics", "train_ufw_tokenizer_node"),
            Node(
                verify_seed_pools,
                inputs=["documents@frame", "ufw_seed_pools", "ufw_tokenizer", "params:pretrain",
                        "params:verification", "params:eval", "params:cache"],
                outputs=["ufw_pool_gains", "ufw_pool_results", "ufw_pool_verification_table", "ufw_pool_metrics"],
                name="verify_seed_pools_node",
            ),
            Node(
                train_ufw_classifier,
                inputs=["documents@frame", "ufw_seed_pools", "ufw_pool_verification_table", "params:verification",
                        "params:scoring"],
                outputs=["ufw_training_set", "ufw_scores", "ufw_keep_rates_table", "ufw_classifier_metrics"],
                name="train_ufw_classifier_node",
            ),
            Node(
                filter_ufw_keep,
                inputs=["documents@frame", "ufw_scores"],
                outputs=["ufw_kept_documents", "ufw_filter_metrics"],
                name="filter_ufw_keep_node",
            ),
        ]
    )
