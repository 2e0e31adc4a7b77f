"""metarater: scores -> proxy sweep -> LightGBM -> w* -> selection, comparisons and figures (seeds/004 Alg. 1)."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.metarater import (
    compare_selections,
    draw_proxy_weights,
    evaluate_num_proxies,
    fit_loss_regressor,
    plot_metarater,
    prepare_metarater_data,
    search_optimal_weights,
    select_with_optimal_weights,
    train_proxies,
)


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(prepare_metarater_data, inputs=["documents@frame", "scores@frame", "params:metarater", "params:scoring"],
                 outputs=["metarater_rater_scores", "metarater_validation_ids", "metarater_data_metrics"],
                 name="prepare_metarater_data_node"),
            Node(draw_proxy_weights, inputs=["metarater_rater_scores", "params:metarater"],
                 outputs="metarater_weights", name="draw_proxy_weights_node"),
            Node(train_proxies,
                 inputs=["documents@frame", "metarater_rater_scores", "metarater_validation_ids", "metarater_weights",
                         "params:metarater", "metarater_work_dir"],
                 outputs=["metarater_proxy_results", "metarater_sweep_metrics", "metarater_proxy_loss_history"],
                 name="train_proxies_node"),
            Node(fit_loss_regressor, inputs=["metarater_proxy_results", "params:metarater"],
                 outputs=["metarater_regressor", "metarater_regression_metrics"], name="fit_loss_regressor_node"),
            Node(search_optimal_weights, inputs=["metarater_regressor", "metarater_rater_scores", "params:metarater"],
                 outputs=["metarater_weights_table", "metarater_top_candidates", "metarater_search_metrics"],
                 name="search_optimal_weights_node"),
            Node(select_with_optimal_weights,
                 inputs=["metarater_weights_table", "metarater_rater_scores", "documents@frame",
                         "metarater_validation_ids", "params:metarater", "metarater_work_dir"],
                 outputs=["metarater_selected_ids", "metarater_selection_metrics"],
                 name="select_with_optimal_weights_node"),
            Node(compare_selections,
                 inputs=["documents@frame", "metarater_rater_scores", "metarater_validation_ids", "metarater_weights_table",
                         "params:metarater", "metarater_work_dir"],
                 outputs=["metarater_comparisons_table", "metarater_comparison_summary_table",
                          "metarater_comparison_metrics"],
                 name="compare_selections_node"),
            Node(evaluate_num_proxies,
                 inputs=["documents@frame", "metarater_proxy_results", "metarater_rater_scores", "metarater_validation_ids",
                         "metarater_weights_table", "params:metarater", "metarater_work_dir"],
                 outputs=["metarater_num_proxies_table", "metarater_num_proxies_metrics"],
                 name="evaluate_num_proxies_node"),
            Node(plot_metarater,
                 inputs=["metarater_proxy_results", "metarater_weights_table", "metarater_num_proxies_table",
                         "metarater_comparison_summary_table"],
                 outputs=["metarater_landscape_plot", "metarater_num_proxies_plot", "metarater_comparisons_plot",
                          "metarater_weights_plot"],
                 name="plot_metarater_node"),
        ]
    )
