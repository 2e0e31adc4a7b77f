"""The set-up rebuilds the prebuilt static embedder, reference raters and decontamination index only when what they
are built from changes (issue #39, item 1): ``scripts/prebuilt_stamp.sh`` digests the primary config, the scoring,
embedding, scale, data and eval groups, the bundled corpus's files and the builders' code, nothing else."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CORPUS_DIR, REPO

BUILDERS = ["embedding/static.py", "scoring/reference.py", "scoring/training_sets.py", "scoring/fasttext_rater.py",
            "scoring/embedding_raters.py", "scoring/dsir.py", "dedup/contamination.py"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """What the stamp reads, copied (the corpus linked, as large as it is)."""
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "prebuilt_stamp.sh", tmp_path / "scripts")
    for name in BUILDERS:
        (tmp_path / "src" / "curation" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "src" / "curation" / name, tmp_path / "src" / "curation" / name)
    (tmp_path / "data" / "01_raw").mkdir(parents=True)
    (tmp_path / "data" / "01_raw" / "corpus").symlink_to(CORPUS_DIR, target_is_directory=True)
    return tmp_path


def _stamp(root: Path, install: str = "install-digest") -> str:
    done = subprocess.run(["bash", "scripts/prebuilt_stamp.sh", install], cwd=root, capture_output=True, text=True,
                          check=True)
    stamp = done.stdout.strip()
    assert len(stamp) == 64 and not done.stderr, done.stderr
    return stamp


def _append(path: Path, text: str = "\n# edited\n") -> None:
    path.write_text(path.read_text() + text)


def test_the_stamp_ignores_config_groups_the_builders_do_not_read(tree):
    before = _stamp(tree)
    for other in ("selection/datamask.yaml", "budget/default.yaml", "pretrain/tiny.yaml", "run/default.yaml"):
        _append(tree / "conf" / other)
    (tree / "conf" / "experiment" / "mine.yaml").write_text("# @package _global_\nrun:\n  namespace: mine\n")
    assert _stamp(tree) == before


@pytest.mark.parametrize("changed", ["conf/config.yaml", "conf/scoring/default.yaml", "conf/embedding/static.yaml",
                                     "conf/scale/reduced.yaml", "conf/data/corpus.yaml", "conf/eval/default.yaml",
                                     *[f"src/curation/{name}" for name in BUILDERS]])
def test_the_stamp_changes_with_what_the_builders_read(tree, changed):
    before = _stamp(tree)
    _append(tree / changed)
    assert _stamp(tree) != before


def test_the_stamp_changes_with_the_install_and_the_corpus_files(tree):
    before = _stamp(tree)
    assert _stamp(tree, "another-install") != before
    (tree / "data" / "01_raw" / "corpus").unlink()
    corpus = tree / "data" / "01_raw" / "corpus"
    corpus.mkdir()
    for shard in sorted(CORPUS_DIR.iterdir()):  # the same files, linked one by one: the same stamp
        (corpus / shard.name).symlink_to(shard)
    assert _stamp(tree) == before
    (corpus / "corpus-0000.parquet").unlink()  # one file fewer
    assert _stamp(tree) != before


def test_the_set_up_builds_the_decontamination_index_where_ingest_reads_it(project, monkeypatch):
    """``scripts/setup.sh`` builds the index ingest's decontamination reads, so a fresh clone's first run does not
    (~5 s); nothing when decontamination is off."""
    from curation.paths import decontamination_index_dir
    from curation.setup_raters import build_configured_decontamination_index

    path = build_configured_decontamination_index()
    assert path is not None and Path(path).is_file() and Path(path).parent == decontamination_index_dir()
    assert build_configured_decontamination_index(["data.decontaminate=off"]) is None
    # without the tests' shared folder: the project's own data/06_models/decontamination
    monkeypatch.delenv("CURATION_DECONTAMINATION_INDEX", raising=False)
    assert decontamination_index_dir() == project / "data" / "06_models" / "decontamination"
