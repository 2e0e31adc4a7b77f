"""Issue #52: a large file is read in pieces (bounded memory) with the same documents, counts and rejected rows
as read whole; a folder is read whole (every suffix and codec the readers know) or refused naming what it would
leave out; invalid UTF-8 in parquet, unreadable ``extra``, a struct ``extra`` next to shards without one, a
memory limit and a disk that fills while a dataset is published each end counted or in one line with the fix.

Inputs are real documents of the bundled corpus; pieces are made small (``piece_mb``) so that a file of a few
hundred documents is several pieces, the same code path as a 2 GB file cut into 64 MB pieces.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from curation.data.ingest import ingest_corpus
from curation.data.pieces import PIECE
from curation.datasets import CorpusShardsDataset
from curation.datasets.corpus import CorpusFormatError
from curation.errors import user_message
from tests.conftest import CORPUS_SHARDS

PARAMS = {"id_column": "id", "text_column": "text", "max_chars": 1_000_000, "max_docs": None,
          "keep_columns": ["source", "extra"], "workers": 1}


@pytest.fixture(scope="module")
def docs() -> pd.DataFrame:
    """300 real documents, with a few rows that validation drops (missing id, blank text, a repeated id)."""
    frame = pd.read_parquet(CORPUS_SHARDS[0], columns=["id", "text", "source", "extra"]).head(300)
    frame = frame.astype(object).reset_index(drop=True)
    frame.loc[17, "id"] = None
    frame.loc[101, "text"] = "   "
    frame.loc[250, "id"] = frame.loc[3, "id"]
    return frame


def _jsonl_bytes(frame: pd.DataFrame, blank_every: int = 40) -> bytes:
    lines = []
    for i, row in enumerate(frame.to_dict("records")):
        if i and i % blank_every == 0:
            lines.append(b"")  # blank lines: a row's line and its row number then differ
        lines.append(json.dumps(row).encode())
    return b"\n".join(lines) + b"\n"


COMPRESS = {"": lambda b: b, ".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
            ".zst": lambda b: zstandard.ZstdCompressor().compress(b)}


def _ingest(path: Path, work: Path, piece_mb: float) -> tuple[pd.DataFrame, pd.DataFrame, dict, list[str]]:
    shards = CorpusShardsDataset(path=str(path), piece_mb=piece_mb).load()
    result = ingest_corpus(shards, PARAMS, work_root=work)
    return result.documents.to_frame(), result.rejected.to_frame(), result.metrics, list(shards)


@pytest.mark.parametrize("suffix", ["", ".gz", ".bz2", ".xz", ".zst"])
def test_a_jsonl_file_in_pieces_gives_what_it_gives_whole(docs, tmp_path, suffix):
    path = tmp_path / f"big.jsonl{suffix}"
    path.write_bytes(COMPRESS[suffix](_jsonl_bytes(docs)))
    whole = _ingest(path, tmp_path / "w1", piece_mb=64)
    pieces = _ingest(path, tmp_path / "w2", piece_mb=0.1)  # ~1 MB of text: 8+ pieces
    assert whole[3] == ["big.jsonl" + suffix]
    assert len(pieces[3]) >= 5 and all(s.startswith(f"big.jsonl{suffix}{PIECE}") for s in pieces[3])
    pd.testing.assert_frame_equal(whole[0], pieces[0])
    # every rejected row names the file, and its row and line in the file, not in its piece
    pd.testing.assert_frame_equal(whole[1], pieces[1])
    assert set(pieces[1]["source_file"]) == {f"big.jsonl{suffix}"}
    assert dict(zip(pieces[1]["reason"], pieces[1]["row"])) == {"missing_id": 17, "empty_text": 101,
                                                                 "duplicate_id": 250}
    assert dict(zip(pieces[1]["reason"], pieces[1]["line"])) == {"missing_id": 18, "empty_text": 104,
                                                                 "duplicate_id": 257}
    assert {k: v for k, v in pieces[2].items() if not k.startswith("shards_")} == \
           {k: v for k, v in whole[2].items() if not k.startswith("shards_")}
    assert pieces[2]["rows_read"] == 300 and pieces[2]["shards_read"] == len(pieces[3])


@pytest.mark.parametrize("groups", [1, 7])
def test_a_parquet_file_in_pieces_gives_what_it_gives_whole(docs, tmp_path, groups):
    """One row group (pandas' default for a file under 1M rows: pieces cut inside it) or several."""
    path = tmp_path / "big.parquet"
    pq.write_table(pa.Table.from_pandas(docs, preserve_index=False), path, row_group_size=-(-len(docs) // groups))
    whole = _ingest(path, tmp_path / "w1", piece_mb=64)
    pieces = _ingest(path, tmp_path / "w2", piece_mb=0.1)
    assert whole[3] == ["big.parquet"] and len(pieces[3]) >= 5
    pd.testing.assert_frame_equal(whole[0], pieces[0])
    pd.testing.assert_frame_equal(whole[1], pieces[1])
    assert dict(zip(pieces[1]["reason"], pieces[1]["row"])) == {"missing_id": 17, "empty_text": 101,
                                                                 "duplicate_id": 250}


def test_a_bundled_shard_is_one_piece_read_as_pandas_reads_it():
    """The bundled corpus's files are far under a piece: each is one shard under its own name, and the frame is
    pandas' (so the ingest outputs and digests are those from before pieces)."""
    shards = CorpusShardsDataset(path=str(CORPUS_SHARDS[0].parent)).load()
    assert list(shards) == [p.name for p in CORPUS_SHARDS]  # README.md, provenance.json, stats.json: not data
    pd.testing.assert_frame_equal(shards[CORPUS_SHARDS[0].name](), pd.read_parquet(CORPUS_SHARDS[0]))


def _every_format(folder: Path, docs: pd.DataFrame) -> int:
    """A folder of parquet, .pq, .parquet.snappy, JSON Lines named .json, .jsonl, .jsonl.bz2 and .jsonl.xz (and
    a README and a metadata .json, which are not documents); returns the documents."""
    folder.mkdir()
    parts = [docs.iloc[i * 40:(i + 1) * 40][["id", "text"]].reset_index(drop=True) for i in range(7)]
    parts[0].to_parquet(folder / "a.parquet")
    parts[1].to_parquet(folder / "b.pq")
    parts[2].to_parquet(folder / "c.parquet.snappy", compression="snappy")
    (folder / "d.json").write_bytes(_jsonl_bytes(parts[3]))
    (folder / "e.jsonl").write_bytes(_jsonl_bytes(parts[4]))
    (folder / "f.jsonl.bz2").write_bytes(bz2.compress(_jsonl_bytes(parts[5])))
    (folder / "sub").mkdir()
    (folder / "sub" / "g.jsonl.xz").write_bytes(lzma.compress(_jsonl_bytes(parts[6])))
    (folder / "README.md").write_text("# a corpus\n")
    (folder / "stats.json").write_text(json.dumps({"docs": 280}, indent=1))
    return sum(len(p) for p in parts)


def test_a_folder_of_every_format_is_read_whole(docs, tmp_path):
    n = _every_format(tmp_path / "corpus", docs)
    documents, rejected, metrics, shards = _ingest(tmp_path / "corpus", tmp_path / "w", piece_mb=64)
    assert shards == ["a.parquet", "b.pq", "c.parquet.snappy", "d.json", "e.jsonl", "f.jsonl.bz2", "sub/g.jsonl.xz"]
    assert metrics["rows_read"] == n == 280 and metrics["shards_read"] == metrics["shards_total"] == 7
    assert metrics["rows_kept"] + metrics["rows_dropped"] == 280
    assert len(documents) == metrics["rows_kept"]


@pytest.mark.parametrize("stray", ["table.csv", "notes.txt", "part-3.jsonl.lz4", "dump.arrow"])
def test_a_folder_with_a_file_no_reader_knows_is_refused_naming_it(docs, tmp_path, stray):
    _every_format(tmp_path / "corpus", docs)
    (tmp_path / "corpus" / stray).write_text("id,text\na,b\n")
    with pytest.raises(Exception) as err:  # Kedro's DatasetError around it, as in a run
        CorpusShardsDataset(path=str(tmp_path / "corpus")).load()
    assert any(isinstance(e, CorpusFormatError) for e in (err.value, err.value.__cause__))
    message = user_message(err.value)
    assert "\n" not in message and len(message) < 700
    assert f"1 of its 8 files is in no format the corpus reader knows and would be left out: {stray}." in message
    assert "Fix: convert them to parquet or JSON Lines, move them out of data.path, or point data.path at a glob" \
        in message


def _parquet_with_bad_utf8(path: Path, texts: list[bytes], sources: list[bytes]) -> None:
    """A parquet file whose string columns hold bytes that are not UTF-8 (Arrow checks nothing when a string
    array is made from raw buffers, nor does parquet when it is written: such files exist)."""
    def strings(values: list[bytes]) -> pa.Array:
        raw = pa.array(values, pa.binary())
        return pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())

    ids = pa.array([f"doc-{i}" for i in range(len(texts))])
    pq.write_table(pa.table({"id": ids, "text": strings(texts), "source": strings(sources)}), path)


def test_invalid_utf8_in_a_parquet_text_is_counted_not_a_crash(docs, tmp_path):
    texts = [t.encode() for t in docs["text"].head(6)]
    texts[2] = texts[2][:50] + b"\xff\xfe" + texts[2][50:]
    texts[4] = b"\xc3\x28 broken start"
    sources = [b"web"] * 6
    sources[1] = b"w\xffb"
    _parquet_with_bad_utf8(tmp_path / "latin.parquet", texts, sources)
    documents, rejected, metrics, _ = _ingest(tmp_path / "latin.parquet", tmp_path / "w", piece_mb=64)
    assert metrics["dropped_invalid_utf8"] == 2 and metrics["rows_kept"] == 4
    assert list(zip(rejected["reason"], rejected["row"], rejected["source_file"])) == \
           [("invalid_utf8", 2, "latin.parquet"), ("invalid_utf8", 4, "latin.parquet")]
    assert documents["source"].tolist() == ["web", "w\ufffdb", "web", "web"]  # another column: repaired


def test_unreadable_extra_is_counted(docs, tmp_path):
    frame = docs.head(20)[["id", "text", "extra"]].copy()
    frame.loc[3, "extra"] = "{not json"
    frame.loc[5, "extra"] = "[1, 2]"
    frame.to_parquet(tmp_path / "x.parquet")
    documents, _, metrics, _ = _ingest(tmp_path / "x.parquet", tmp_path / "w", piece_mb=64)
    assert metrics["extra_unreadable"] == 2
    assert documents["category"].isna().sum() == 2


def test_a_struct_extra_in_one_shard_and_none_in_another(docs, tmp_path):
    """Regression (issue #52): the shard without ``extra`` got a null column of the struct's Arrow type, which
    pandas cannot read back ("data type 'struct<...>[pyarrow]' not understood" in document statistics)."""
    from curation.data.stats import document_statistics_shards
    from curation.shards import EngineConfig

    (tmp_path / "c").mkdir()
    first = docs.iloc[40:60][["id", "text"]].assign(extra=[{"category": "web", "n": i} for i in range(20)])
    first.to_parquet(tmp_path / "c" / "a.parquet")
    docs.iloc[60:80][["id", "text"]].to_parquet(tmp_path / "c" / "b.parquet")
    shards = CorpusShardsDataset(path=str(tmp_path / "c")).load()
    result = ingest_corpus(shards, PARAMS, work_root=tmp_path / "w")
    stats = document_statistics_shards(result.documents, EngineConfig())  # reads each shard back, as the node
    assert len(stats) == 40 and stats["n_chars"].gt(0).all()
    documents = result.documents.to_frame()
    assert documents["category"].head(20).tolist() == ["web"] * 20 and documents["category"].iloc[20:].isna().all()
    assert json.loads(documents["extra"].iloc[0]) == {"category": "web", "n": 0}  # carried as its JSON text


def test_a_damaged_piece_names_the_file_its_rows_and_the_fix(docs, tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.Table.from_pandas(docs, preserve_index=False), path, row_group_size=50, compression="snappy")
    raw = bytearray(path.read_bytes())
    text_pages = pq.ParquetFile(path).metadata.row_group(3).column(1)  # the text of rows 150-199
    start = text_pages.data_page_offset + 100
    raw[start:start + 4096] = bytes((i * 151 + 7) % 256 for i in range(4096))  # scrambled bytes, as on a bad disk
    path.write_bytes(bytes(raw))
    shards = CorpusShardsDataset(path=str(path), piece_mb=0.1).load()
    failing = []
    for name, load in shards.items():
        try:
            load()
        except Exception as err:  # noqa: BLE001 - the message is what is tested
            failing.append(user_message(err))
    # the two pieces of the damaged row group (rows 150-199) fail, each naming its rows; the others are read
    assert len(failing) == 2 and all(m is not None for m in failing), failing
    for message, rows in zip(failing, ("150-174", "175-199")):
        assert message.startswith(f"big.parquet (rows {rows}, from 0): cannot be read as parquet ("), message
        assert "Fix: replace the file with a complete copy" in message and message.isprintable()


MEMORY_LIMIT = r"""
import resource, sys
from curation.datasets import CorpusShardsDataset
from curation.errors import user_message
shards = CorpusShardsDataset(path=sys.argv[1]).load()
with open('/proc/self/status') as f:
    size = next(int(line.split()[1]) for line in f if line.startswith('VmSize:')) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (96 << 20), size + (96 << 20)))  # 96 MB more than now
try:
    for load in shards.values():
        load()
except BaseException as err:
    print(user_message(err))
"""


def test_a_memory_limit_names_the_file_and_the_fix(tmp_path):
    """A real memory limit (RLIMIT_AS, as ``ulimit -v`` or a container sets it): one 40 MB document parsed by
    pandas needs far more than the 96 MB left, and the reader says which file and what to do."""
    text = ("All work and no play makes Jack a dull boy. " * 1_000_000)[:40_000_000]
    (tmp_path / "huge.jsonl").write_text(json.dumps({"id": "one", "text": text}) + "\n")
    done = subprocess.run([sys.executable, "-c", MEMORY_LIMIT, str(tmp_path / "huge.jsonl")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert line.startswith("huge.jsonl: ran out of memory (") and "MemoryError" in line, line
    assert "Fix: give the run more memory, or lower data.workers" in line


def test_a_disk_that_fills_while_a_dataset_is_published_leaves_nothing_half_copied(tmp_path):
    """Published across file systems, a sharded dataset is copied; a full disk used to leave a partial shard beside
    a copied manifest.json in the dataset's folder, and end in an "unexpected error" (shutil.Error, no errno)."""
    from curation.datasets import ShardedDataset
    from curation.shards import ShardWriter

    target = tmp_path / "mnt"
    target.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(target)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a full disk needs a small tmpfs, and this machine does not let the test mount one: "
                    f"{mounted.stderr.strip()}")
    try:
        staging = tmp_path / "staging"
        writer = ShardWriter(staging)
        frame = pd.read_parquet(CORPUS_SHARDS[0], columns=["id", "text"]).head(200)
        writer.mark_complete(writer.write("part-00000", frame))
        writer.finalize(["part-00000"], stage="test")
        from curation.shards import ShardedDataset as Shards

        with pytest.raises(Exception) as err:  # Kedro's DatasetError around the OSError, as in a run
            ShardedDataset(path=str(target / "documents")).save(Shards(staging))
        message = user_message(err.value)
        assert message is not None and message.startswith(f"the disk is full while writing {target / 'documents'} ")
        assert "Fix: free space" in message
        assert list(target.iterdir()) == []  # no partial dataset, no hidden copy
    finally:
        subprocess.run(["umount", str(target)], check=True)
