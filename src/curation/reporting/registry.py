"""Every report builder by name: the DATAMASK and DiSF artefacts of :mod:`curation.reporting.artefacts`
and those its siblings declare (:mod:`~curation.reporting.table2`, :mod:`~curation.reporting.metarater_artefacts`,
:mod:`~curation.reporting.ufw_artefacts`). The siblings import ``artefacts`` for its types; this module imports
them all, so the package's imports run one way: registry -> siblings -> artefacts."""

from __future__ import annotations

import pandas as pd

from curation.reporting import metarater_artefacts, table2, ufw_artefacts
from curation.reporting.artefacts import ARTEFACTS, Artefact, Histories, Report, Tables, documents_covered


def registry() -> dict[str, Artefact]:
    """Every known artefact, by name: each report module declares its builders in an ``ARTEFACTS`` dict
    (DATAMASK and DiSF here; Meta-rater, Ultra-FineWeb Table 8 and DATAMASK Table 2 beside it)."""
    known = dict(ARTEFACTS)
    for module in (table2, metarater_artefacts, ufw_artefacts):
        clash = set(known) & set(module.ARTEFACTS)
        if clash:
            raise ValueError(f"{module.__name__} redefines the artefact(s) {sorted(clash)}")
        known.update(module.ARTEFACTS)
    return known


def build_report(name: str, runs: pd.DataFrame, histories: Histories, tables: Tables) -> Report:
    known = registry()
    if name not in known:
        raise ValueError(f"report.experiment={name!r} has no report builder; known: {sorted(known)}")
    if runs.empty:
        raise ValueError(f"no finished runs to report for {name!r}: run `curate -m experiment={name}` first")
    runs = runs.reset_index(drop=True)
    report = known[name].build(runs, histories, tables)
    if report.documents is None:  # every report says how many documents it covers (issue #53)
        report.documents = documents_covered(runs)
    return report
