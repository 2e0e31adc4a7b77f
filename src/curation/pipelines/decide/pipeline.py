"""decide: which selection trains the better model on this corpus (issue #38).

ingest -> scoring -> pruning (the default job's stages, on ``data.path``) -> every candidate of
``decide.candidates`` at one token budget -> K seeds of a small LM per candidate and model size ->
the decisions table, heat map and recommendation (conf/experiment/decide.yaml).
"""

from kedro.pipeline import Node, Pipeline

from curation.nodes.decide import check_decide_fits, report_decisions, run_decide_cells
from curation.pipelines.ingest import create_pipeline as ingest_pipeline
from curation.pipelines.pruning import create_pipeline as pruning_pipeline
from curation.pipelines.scoring import create_pipeline as scoring_pipeline


def create_pipeline(**kwargs) -> Pipeline:
    # right after ingest, and before scoring (its output is an input of run_decide_cells, and Kedro runs it
    # first among the nodes that only need the documents: checked in tests/pipelines/test_decide_fits.py)
    fits = Pipeline([Node(check_decide_fits, inputs=["documents@frame", "params:decide", "params:budget",
                                                     "params:pretrain", "params:cache", "params:run"],
                          outputs="decide_fit_metrics", name="check_decide_fits_node")])
    decide = Pipeline(
        [
            Node(
                run_decide_cells,
                inputs=["documents@frame", "scores@frame", "embeddings@frame", "pruned_scores@frame",
                        "pruned_embeddings@frame", "params:decide", "params:budget", "params:pretrain", "params:eval",
                        "params:run", "params:cache", "decide_fit_metrics", "params:data"],
                outputs=["decide_cells_table", "decide_items", "decide_run_metrics"],
                name="run_decide_cells_node",
            ),
            Node(
                report_decisions,
                inputs=["decide_cells_table", "decide_items", "params:decide", "params:eval", "params:data"],
                outputs=["decisions_table", "decide_size_agreement_table", "decide_item_vs_seed_table",
                         "decide_snr_table", "decide_tasks_table", "decide_heatmap_plot", "decide_ladder_plot",
                         "decide_recommendation_markdown", "decide_metrics"],
                name="report_decisions_node",
            ),
        ]
    )
    return ingest_pipeline() + fits + scoring_pipeline() + pruning_pipeline() + decide
