"""table2: one cell of DATAMASK Table 2 at tiny scale (conf/experiment/table2_tiny.yaml sweeps the cells).

A named corpus (``table2.corpus`` of ``table2.corpora``) -> pretrain -> evaluate.
The corpus goes to ``table2_documents`` (not ``selected_documents``), so a cell
never overwrites the namespace's own selection.
"""

from kedro.pipeline import Node, Pipeline, pipeline

from curation.nodes.pretrain import select_named_corpus
from curation.pipelines.evaluate import create_pipeline as evaluate_pipeline
from curation.pipelines.pretrain import create_pipeline as pretrain_pipeline


def create_pipeline(**kwargs) -> Pipeline:
    corpus = Pipeline(
        [
            Node(
                select_named_corpus,
                inputs=["documents@frame", "scores@frame", "embeddings@frame", "pruned_scores@frame", "pruned_embeddings@frame", "params:table2",
                        "params:budget", "params:run", "params:cache"],
                outputs=["table2_documents", "corpus_metrics"],
                name="select_named_corpus_node",
            ),
        ]
    )
    train = pipeline(pretrain_pipeline(), inputs={"selected_documents@frame": "table2_documents"})
    return corpus + train + evaluate_pipeline()
