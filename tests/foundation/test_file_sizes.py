"""No source file under ``src/`` holds more than 600 lines (issue #45): a file holds one job, and a job
that grows past that is two jobs (docs/architecture.md says where each lives)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_LINES = 600


def long_files(root: Path, limit: int = MAX_LINES) -> list[str]:
    return sorted(f"{p.relative_to(root)}: {n} lines" for p in root.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > limit)


def test_no_source_file_over_600_lines():
    assert len(list(SRC.rglob("*.py"))) > 100  # the walk sees the package
    assert long_files(SRC) == []


def test_the_size_check_counts_lines(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n" * 601)
    (tmp_path / "b.py").write_text("x = 1\n" * 600)
    assert long_files(tmp_path) == ["a.py: 601 lines"]
