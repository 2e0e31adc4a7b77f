"""pretrain: ingested corpus -> tokenizer; selection -> packed tokens -> a trained tiny LM checkpoint."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.pretrain import pretrain_model, tokenize_selection
from curation.pipelines.tokenizer import tokenizer_node


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            tokenizer_node("lm_tokenizer", "tokenizer_metrics", "train_tokenizer_node"),
            Node(
                tokenize_selection,
                inputs=["selected_documents@frame", "lm_tokenizer", "params:pretrain"],
                outputs=["lm_tokens", "tokens_metrics"],
                name="tokenize_node",
            ),
            Node(
                pretrain_model,
                inputs=["lm_tokens", "lm_tokenizer", "params:pretrain", "params:cache"],
                outputs=["lm_checkpoint", "pretrain_history", "pretrain_metrics"],
                name="pretrain_model_node",
            ),
        ]
    )
