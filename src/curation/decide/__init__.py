"""``decide``: which selection trains the better model (the algorithm core: no Kedro, MLflow or Hydra).

:mod:`.cells` trains and evaluates one cell per candidate x model size x training budget x seed on
fixed selections (issue #38, #43). It sits above :mod:`curation.selection`, :mod:`curation.lm` and
:mod:`curation.evaluation`, which it combines; the decisions and the report are in
:mod:`curation.reporting.decide`.
"""
