"""Write the bytecode (.pyc) of what this project imports, once per install (``scripts/setup.sh``).

uv writes no bytecode, and where ``PYTHONDONTWRITEBYTECODE`` is set (this project's machines) no process writes any:
every process then compiles all it imports again (a ``kedro run`` of ingest took 38 s, 23 s with bytecode, on 2
cores; the test suite starts hundreds of such processes). ``compileall`` over all of site-packages compiled 28,091
files in 69 CPU-seconds, most of them never imported (transformers' hundreds of model families, Ray's and sympy's
unused parts, test folders). Importing what the project imports, with writing switched on in this process only,
compiles the ~8,000 files that are used in ~20 CPU-seconds (``benchmarks/results/setup_time.csv``). A module that
only some path imports lazily and is not below is compiled in memory where it is used, as before.

    .venv/bin/python scripts/bytecode.py
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

sys.dont_write_bytecode = False  # this process only: the point of the script

# What curation's modules import lazily (inside functions), the test suite's helpers, and the parts of the large
# packages a run reaches (MLflow's SQLite store, Kedro's session and CLI, scikit-learn's estimators we use).
MODULES = """
numpy pandas pyarrow pyarrow.parquet pyarrow.dataset scipy scipy.stats scipy.sparse torch torch.nn.functional
mlflow mlflow.store.tracking.sqlalchemy_store mlflow.store.db.utils mlflow.tracking alembic sqlalchemy
kedro.framework.session kedro.framework.cli kedro.runner kedro_datasets kedro_viz hydra hydra.core.global_hydra
omegaconf yaml rich tqdm joblib fsspec zstandard matplotlib matplotlib.pyplot
sklearn sklearn.cluster sklearn.linear_model sklearn.feature_extraction sklearn.metrics sklearn.decomposition
lightgbm fasttext tokenizers sentence_transformers transformers model2vec model2vec.distill skeletoken
onnx onnxruntime lightning megatron.core lm_eval ray ray.data datasets datasketch datatrove nbformat nbclient pytest
""".split()


def main() -> int:
    failed = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as err:  # an optional extra not installed: nothing to compile
            failed.append(f"{name} ({type(err).__name__})")
    import curation

    for info in pkgutil.walk_packages(curation.__path__, "curation."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # `python -m curation` runs the default job on import
        try:
            importlib.import_module(info.name)
        except Exception as err:
            failed.append(f"{info.name} ({type(err).__name__})")
    if failed:
        print("[setup] bytecode: not importable here (compiled where used instead):", ", ".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
