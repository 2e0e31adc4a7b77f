"""metarater_proxy: one Meta-rater proxy per run, for `curate -m experiment=metarater_proxy metarater.proxy_id=...`.

Its result lands where `pipeline=metarater` looks for finished proxies, which it then reuses.
"""

from kedro.pipeline import Node, Pipeline

from curation.nodes.metarater import train_one_proxy


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(train_one_proxy, inputs=["documents@frame", "scores@frame", "params:metarater", "params:scoring",
                         "metarater_work_dir"],
                 outputs=["metarater_proxy_metrics", "metarater_proxy_history"], name="train_one_proxy_node"),
        ]
    )
