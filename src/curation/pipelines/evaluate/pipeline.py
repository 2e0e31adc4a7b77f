"""evaluate: the latest pre-trained checkpoint -> zero-shot task metrics and a per-task table."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.evaluate import evaluate_checkpoint


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                evaluate_checkpoint,
                inputs=["lm_checkpoint", "params:eval", "params:cache"],
                outputs=["eval_metrics", "eval_table"],
                name="evaluate_checkpoint_node",
            ),
        ]
    )
