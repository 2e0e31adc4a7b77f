"""verification: Ultra-FineWeb efficient verification (seeds/002 Sec. 2.2) of candidate corpora.

candidates + default mix -> tokenizer -> packed corpora -> WSD base model ->
annealing per (candidate, ratio) and on the default mix alone -> evaluations ->
the Table 8 analogue (per-task delta vs the default-only annealing).
"""

from kedro.pipeline import Node, Pipeline

from curation.pipelines.tokenizer import tokenizer_node
from curation.nodes.verification import (
    anneal_candidates,
    select_verification_candidates,
    tabulate_verification,
    tokenize_verification_corpora,
    train_verification_base,
)


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                select_verification_candidates,
                inputs=["documents@frame", "scores@frame", "embeddings@frame", "pruned_scores@frame", "pruned_embeddings@frame",
                        "selected_documents@frame", "params:verification", "params:budget", "params:run", "params:cache"],
                outputs=["verification_candidates", "verification_candidates_table"],
                name="select_verification_candidates_node",
            ),
            tokenizer_node("verification_tokenizer", "verification_tokenizer_metrics",
                           "train_verification_tokenizer_node"),
            Node(
                tokenize_verification_corpora,
                inputs=["documents@frame", "verification_candidates", "verification_tokenizer", "params:pretrain",
                        "params:verification"],
                outputs=["verification_tokens", "verification_tokens_metrics"],
                name="tokenize_verification_corpora_node",
            ),
            Node(
                train_verification_base,
                inputs=["verification_tokens", "verification_tokenizer", "params:pretrain", "params:verification",
                        "params:cache"],
                outputs=["verification_base", "verification_base_history", "verification_base_metrics"],
                name="train_verification_base_node",
            ),
            Node(
                anneal_candidates,
                inputs=["verification_base", "verification_tokens", "params:pretrain", "params:verification",
                        "params:eval", "params:cache"],
                outputs=["verification_results", "verification_anneal_history", "verification_anneal_metrics"],
                name="anneal_candidates_node",
            ),
            Node(
                tabulate_verification,
                inputs=["verification_results"],
                outputs=["verification_table", "verification_metrics", "verification_plot"],
                name="tabulate_verification_node",
            ),
        ]
    )
