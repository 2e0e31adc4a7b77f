"""decide: which selection trains the better model on this corpus (issue #38).

ingest -> scoring -> pruning (the default job's stages, on ``data.path``) -> every candidate of
``decide.candidates`` at one token budget -> K seeds of a small LM per candidate and model size ->
the decisions table, heat map and recommendation (conf/experiment/decide.yaml).
"""

from kedro.pipeline import Node, Pipeline

from curation.nodes.decide import report_decisions, run_decide_cells
from curation.pipelines.ingest import create_pipeline as ingest_pipeline
from curation.pipelines.pruning import create_pipeline as pruning_pipeline
from curation.pipelines.scoring import create_pipeline as scoring_pipeline


def create_pipeline(**kwargs) -> Pipeline:
    decide = Pipeline(
        [
            Node(
                run_decide_cells,
                inputs=["documents@frame", "scores@frame", "embeddings@frame", "pruned_scores@frame",
                        "pruned_embeddings@frame", "params:decide", "params:budget", "params:pretrain", "params:eval",
                        "params:run", "params:cache"],
                outputs=["decide_cells_table", "decide_items", "decide_run_metrics"],
                name="run_decide_cells_node",
            ),
            Node(
                report_decisions,
                inputs=["decide_cells_table", "decide_items", "params:decide", "params:eval", "params:data"],
                outputs=["decisions_table", "decide_size_agreement_table", "decide_item_vs_seed_table",
                         "decide_heatmap_plot", "decide_recommendation_markdown", "decide_metrics"],
                name="report_decisions_node",
            ),
        ]
    )
    return ingest_pipeline() + scoring_pipeline() + pruning_pipeline() + decide
