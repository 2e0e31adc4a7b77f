"""reports: the runs of one experiment in MLflow -> the paper artefact's table, figures and Markdown."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.reports import collect_runs, write_report


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(collect_runs, inputs=["params:report", "params:tracking", "params:run"],
                 outputs=["report_runs", "report_histories", "report_tables", "report_collect_metrics"],
                 name="collect_runs_node"),
            Node(write_report, inputs=["report_runs", "report_histories", "report_tables", "params:report"],
                 outputs=["report_markdown", "report_table", "report_paper_table", "report_plots",
                          "report_runs_table", "report_decisions_table"],
                 name="write_report_node"),
        ]
    )
