"""Bad input, all of it (issue #39, item 3): one table of bad inputs across ``curate``, ``kedro run`` and
``curate-megatron``.

Each case gets either

- **a refusal**: a non-zero exit, one short line that names the file, row or key and the fix (matched by the
  case's ``expect``), no Python trace, and nothing new in the namespace (every ``data/<layer>/<namespace>``
  folder, which holds a file of an earlier run, is byte for byte as before; for ``curate-megatron``, its
  output folder), or
- **the documented counted handling**: the run succeeds and the row is dropped with its reason in the
  namespace's ``rejected_documents`` (``id, reason, source_file, row, line``), as ingest does.

Inputs are made from the bundled corpus (a few real documents), with garbage bytes or cut files for
corruption. How a case runs: the test process imports what the three commands import once (Hydra's schemas,
Kedro, MLflow, pyarrow, megatron-core: about 10 s), then each case is one invocation of the command's entry
point (the function its console script calls: ``curation.hydra_app:main``, ``kedro.framework.cli:main``,
``curation.pretraining.launch:main``) in a process forked from it, with its own argv, environment, working
directory, stdout and stderr; its exit status is the process's. So a case costs its own work (0.2-3 s), not the
~10 s of imports a fresh ``curate`` pays before it composes; that the console scripts themselves print the same
lines is checked on real subprocesses by test_user_errors.py, test_namespace_lock.py and
test_plain_corpus_pipelines.py.

A full disk and a read-only file system are real: a 96 KiB tmpfs (read-only for the second) mounted over the
data layer the run writes; where the machine does not let the test mount one (not root, no CAP_SYS_ADMIN),
those cases are skipped with that reason.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from tests.conftest import CORPUS_SHARDS, make_project

pytestmark = pytest.mark.slow  # runs the three commands on real inputs

DOCS = 12
EARLIER = "earlier-run.txt"  # a file an earlier run left in every layer of the namespace


# --- the inputs ---------------------------------------------------------------------------------------------


def _make_inputs(folder: Path) -> Path:
    """Every bad input of the table, from the first documents of the bundled corpus."""
    folder.mkdir(parents=True)
    docs = pd.read_parquet(CORPUS_SHARDS[0], columns=["id", "text"]).head(200)
    head = docs.head(DOCS).reset_index(drop=True)
    head.to_parquet(folder / "good.parquet")
    docs.to_parquet(folder / "big.parquet")  # ~0.6 MB: more than the full disk's 96 KiB
    good = (folder / "good.parquet").read_bytes()
    (folder / "zero.parquet").write_bytes(b"")
    (folder / "garbage.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 2)
    (folder / "trunc.parquet").write_bytes(good[: len(good) // 2])  # a copy interrupted half-way
    head.head(0).to_parquet(folder / "zerorows.parquet")
    head.head(1).to_parquet(folder / "one.parquet")
    head.assign(text=[None, "", " \n "] * (DOCS // 3)).to_parquet(folder / "allblank.parquet")
    head.rename(columns={"text": "body"}).to_parquet(folder / "notext.parquet")
    head.assign(text=range(DOCS)).to_parquet(folder / "inttext.parquet")
    head.assign(id=[[i, i] for i in range(DOCS)]).to_parquet(folder / "listid.parquet")
    head.assign(text=[t.encode("utf-16") for t in head["text"]]).to_parquet(folder / "utf16.parquet")
    head.assign(id=[None, ""] + list(head["id"][2:]),
                text=list(head["text"][:2]) + ["   ", None] + list(head["text"][4:])).to_parquet(
        folder / "blanks.parquet")
    (folder / "dup").mkdir()  # two shards that share ids 4..7
    head.head(8).to_parquet(folder / "dup" / "a.parquet")
    head.iloc[4:].to_parquet(folder / "dup" / "b.parquet")
    lines = [json.dumps({"id": r.id, "text": r.text}) for r in head.itertuples()]
    (folder / "empty.jsonl").write_bytes(b"")
    (folder / "cut.jsonl").write_text("\n".join(lines[:6]) + "\n" + lines[6][: len(lines[6]) // 2])  # killed writer
    raw = [line.encode() for line in lines[:6]]
    at = raw[2].index(b'"text": "') + 20
    raw[2] = raw[2][:at] + b"\xff\xfe" + raw[2][at:]  # line 3: bytes in its text that are not UTF-8
    (folder / "latin.jsonl").write_bytes(b"\n".join(raw) + b"\n")
    (folder / "array.jsonl").write_text("[1, 2]\n\"a string\"\n")
    (folder / "mixed" / "sub").mkdir(parents=True)  # half parquet in a subfolder, half JSON Lines (one line cut)
    head.head(6).to_parquet(folder / "mixed" / "sub" / "half.parquet")
    (folder / "mixed" / "half.jsonl").write_text("\n".join(lines[6:]) + "\n" + lines[6][:30])
    rows = [{"id": r.id, "text": r.text} for r in head.itertuples()]
    rows[3]["text"], rows[7]["text"] = {"body": rows[3]["text"]}, [rows[7]["text"]]  # an object, an array
    (folder / "objtext.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "alltextobj.jsonl").write_text("".join(json.dumps({"id": r["id"], "text": {"body": str(r["text"])}})
                                                     + "\n" for r in rows))
    (folder / "bad.jsonl.gz").write_bytes(b"\x1f\x8b" + bytes(range(100)))
    (folder / "table.csv").write_text("id,text\na,b\n")
    (folder / "emptydir").mkdir()
    (folder / "badtok.json").write_text('{"not": "a tokenizer"')
    for ext in (".bin", ".idx"):  # an earlier conversion's prefix
        (folder / f"done{ext}").write_bytes(b"an earlier selection")
    gnupg = pd.read_json(Path(__file__).resolve().parents[1] / "fixtures" / "languages" / "gnupg_help.jsonl",
                         lines=True)  # GnuPG's help texts, real translations (tests/fixtures/languages)
    other = pd.concat([gnupg[gnupg["language"] == "de"].head(3), gnupg[gnupg["language"] == "ru"].head(2)])
    (folder / "languages.jsonl").write_text("".join(json.dumps({"id": r.id, "text": r.text}) + "\n" for r in
                                                    pd.concat([head.head(8), other[["id", "text"]]]).itertuples()))
    _make_issue52_inputs(folder, docs)
    from curation.lm import train_tokenizer

    train_tokenizer(docs["text"].head(40).tolist(), vocab_size=600).save(str(folder / "tokenizer.json"))
    return folder


def _make_issue52_inputs(folder: Path, docs: pd.DataFrame) -> None:
    """Issue #52's classes: a folder of every format the readers know (and one with a csv beside them), a damaged
    parquet shard of four, invalid UTF-8 inside parquet text values, a struct ``extra`` in one shard and none in
    the other, and one 60 MB document for a memory limit."""
    import bz2
    import lzma

    import pyarrow as pa
    import pyarrow.parquet as pq

    def lines(frame: pd.DataFrame) -> bytes:
        return "".join(json.dumps({"id": r.id, "text": r.text}) + "\n" for r in frame.itertuples()).encode()

    parts = [docs.iloc[12 + 6 * i:18 + 6 * i][["id", "text"]].reset_index(drop=True) for i in range(7)]
    (folder / "dangling").mkdir()  # a link whose target was moved away
    parts[0].to_parquet(folder / "dangling" / "a.parquet")
    (folder / "dangling" / "b.parquet").symlink_to(folder / "moved-away.parquet")
    for name in ("formats", "formats_csv"):
        (folder / name / "sub").mkdir(parents=True)
        parts[0].to_parquet(folder / name / "a.parquet")
        parts[1].to_parquet(folder / name / "b.pq")
        parts[2].to_parquet(folder / name / "c.parquet.snappy")
        (folder / name / "d.json").write_bytes(lines(parts[3]))  # JSON Lines named .json
        (folder / name / "e.jsonl").write_bytes(lines(parts[4]))
        (folder / name / "f.jsonl.bz2").write_bytes(bz2.compress(lines(parts[5])))
        (folder / name / "sub" / "g.jsonl.xz").write_bytes(lzma.compress(lines(parts[6])))
    (folder / "formats_csv" / "table.csv").write_text("id,text\na,b\n")
    (folder / "damaged").mkdir()  # four shards, scrambled bytes in the text pages of the third
    for i in range(4):
        docs.iloc[50 * i:50 * (i + 1)].to_parquet(folder / "damaged" / f"part-{i}.parquet", compression="snappy")
    third = folder / "damaged" / "part-2.parquet"
    raw = bytearray(third.read_bytes())
    at = pq.ParquetFile(third).metadata.row_group(0).column(1).data_page_offset + 100
    raw[at:at + 256] = bytes((i * 151 + 7) % 256 for i in range(256))  # a page header: "Couldn't deserialize thrift"
    third.write_bytes(bytes(raw))
    texts = [t.encode() for t in docs["text"].head(DOCS)]  # two texts with bytes that are not UTF-8
    texts[2], texts[5] = texts[2][:40] + b"\xff\xfe" + texts[2][40:], b"\xc3\x28" + texts[5]
    raw_texts = pa.array(texts, pa.binary())
    pq.write_table(pa.table({"id": pa.array(list(docs["id"].head(DOCS))),
                             "text": pa.Array.from_buffers(pa.string(), DOCS, raw_texts.buffers())}),
                   folder / "latin.parquet")
    (folder / "struct").mkdir()  # extra a struct in one shard, absent from the other
    docs.iloc[:20][["id", "text"]].assign(extra=[{"category": "web", "n": i} for i in range(20)]).to_parquet(
        folder / "struct" / "a.parquet")
    docs.iloc[20:40][["id", "text"]].to_parquet(folder / "struct" / "b.parquet")
    (folder / "huge.jsonl").write_text(json.dumps({"id": "huge", "text": "All work and no play. " * 2_800_000}) + "\n")


# --- the table ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    cli: str  # curate | kedro | megatron
    args: Callable[[Path, Path], list[str]]  # (inputs, project) -> the arguments after the command
    expect: str  # regex: the one-line message (a refusal) or the drop reason (counted)
    exit: int = 2  # 0: counted handling
    drops: dict[str, int] = field(default_factory=dict)  # counted: reason -> rows in rejected_documents
    source_file: str | None = None  # counted: the file the drops name
    setup: str | None = None  # held | full_disk | full_namespace | read_only | bug (ingest's validation raises a RuntimeError)
    # refused by a check that needs the ingested corpus (its token counts): ingest's own outputs, complete and
    # reused by the next run, may be new in 02_intermediate; nothing else, and the earlier files stay as they were
    after_ingest: bool = False
    summary: str | None = None  # counted: a line the run's summary must print
    env: dict[str, str] = field(default_factory=dict)  # more environment ({tmp}: the case's own temporary folder)
    memory_mb: int = 0  # > 0: the command runs under a memory limit (RLIMIT_AS) this many MB above its size now


# the cheapest run that reads the corpus: ingest alone, in the driver, without MLflow and the text dedup
CURATE = ["pipeline=ingest", "tracking.enabled=false", "data.workers=1", "data.decontaminate=off",
          "data.dedup.exact=false", "data.dedup.fuzzy=false"]
KEDRO_PARAMS = "tracking.enabled=false,data.workers=1,data.dedup.exact=false,data.dedup.fuzzy=false"
FIX = r".*Fix"
DECIDE = ("experiment=decide_smoke", "pipeline=decide")  # its fit check resolves the token budget after ingest


def curate(*extra: str) -> Callable[[Path, Path], list[str]]:
    return lambda inp, root: [*CURATE, *(e.format(inp=inp, root=root) for e in extra)]


def kedro(pipeline: str, params: str, *extra: str) -> Callable[[Path, Path], list[str]]:
    return lambda inp, root: ["run", "--pipelines", pipeline, "--params",
                              ",".join(p for p in (KEDRO_PARAMS, params.format(inp=inp)) if p), *extra]


def megatron(*args: str) -> Callable[[Path, Path], list[str]]:
    return lambda inp, root: [a.format(inp=inp, out=root / "megatron") for a in args]


CONVERT = ("convert", "--output-prefix", "{out}/sel")
TOKENIZER = ("--tokenizer", "{inp}/tokenizer.json")

CASES = [
    # curate: files
    Case("missing_path", "curate", curate("data.path={inp}/nope.parquet"),
         r"data\.path does not exist: \S*nope\.parquet\. Fix: give data\.path"),
    Case("glob_matches_nothing", "curate", curate("data.path={inp}/*.nomatch.parquet"),
         r"data\.path matches no parquet .* files: \[\]\. Fix: point data\.path at"),
    Case("empty_folder", "curate", curate("data.path={inp}/emptydir"), r"data\.path matches no parquet" + FIX),
    Case("csv_file", "curate", curate("data.path={inp}/table.csv"),
         r"data\.path matches no parquet .*table\.csv'\]\. Fix: point data\.path at"),
    Case("format_forced_wrong", "curate", curate("data.path={inp}/cut.jsonl", "data.format=parquet"),
         r"no parquet shards under data\.path=\S*cut\.jsonl\. Fix: .*data\.format"),
    Case("zero_byte_parquet", "curate", curate("data.path={inp}/zero.parquet"),
         r"zero\.parquet: cannot be read as parquet \(.*0 bytes\)\. Fix: replace the file"),
    Case("garbage_parquet", "curate", curate("data.path={inp}/garbage.parquet"),
         r"garbage\.parquet: cannot be read as parquet \(.*magic bytes.*\)\. Fix: replace the file"),
    Case("truncated_parquet", "curate", curate("data.path={inp}/trunc.parquet"),
         r"trunc\.parquet: cannot be read as parquet .*Fix: replace the file with a complete copy"),
    Case("corrupt_gzip_jsonl", "curate", curate("data.path={inp}/bad.jsonl.gz"),
         r"bad\.jsonl\.gz: cannot be read as jsonl \(.*\)\. Fix: replace the file"),
    Case("zero_byte_jsonl", "curate", curate("data.path={inp}/empty.jsonl"),
         r"empty\.jsonl: the file is empty \(no row, no column\)\. Fix: remove it from data\.path"),
    Case("parquet_of_zero_rows", "curate", curate("data.path={inp}/zerorows.parquet"),
         r"zerorows\.parquet: no document to select from: .* 0 rows\. Fix: point data\.path at files with rows"),
    Case("jsonl_lines_not_objects", "curate", curate("data.path={inp}/array.jsonl"),
         r"array\.jsonl: required column 'id' is missing \(columns present: \['0', '1'.*Set data\.id_column"),
    # curate: columns and types
    Case("text_column_missing", "curate", curate("data.path={inp}/notext.parquet"),
         r"notext\.parquet: required column 'text' is missing .*Set data\.text_column"),
    Case("id_column_misnamed", "curate", curate("data.path={inp}/good.parquet", "data.id_column=doc_id"),
         r"good\.parquet: required column 'doc_id' is missing .*Set data\.id_column"),
    Case("text_column_of_numbers", "curate", curate("data.path={inp}/inttext.parquet"),
         r"inttext\.parquet: the text column 'text' holds int64 values, not text .*Fix: set data\.text_column"),
    Case("text_column_of_json_objects", "curate", curate("data.path={inp}/alltextobj.jsonl"),
         r"alltextobj\.jsonl: the text column 'text' holds JSON objects \(dict\), not text \(row 0.*Fix: set "
         r"data\.text_column"),
    Case("id_that_is_a_list", "curate", curate("data.path={inp}/listid.parquet"),
         r"listid\.parquet: row 0 \(counted from 0\): the id \('id'\) is a list.*Fix: set data\.id_column"),
    Case("every_text_not_utf8", "curate", curate("data.path={inp}/utf16.parquet"),
         r"utf16\.parquet: no document survived ingestion: 12 rows .*\(invalid_utf8 12\)\. Fix: check that the text "
         r"is UTF-8"),
    Case("every_document_too_long", "curate", curate("data.path={inp}/good.parquet", "data.max_chars=10"),
         r"good\.parquet: no document survived .*\(too_long 12\)\. Fix: check that data\.max_chars"),
    # curate: config
    Case("unknown_key", "curate", curate("data.bogus=1"),
         r"Could not override 'data\.bogus': Key 'bogus' not in 'DataConfig'\. Fix: check the key's spelling"),
    Case("unknown_top_level_key", "curate", curate("bogus=1"),
         r"Could not override 'bogus': Key 'bogus' is not in struct\. Fix: check the key's spelling"),
    Case("wrong_type", "curate", curate("data.max_docs=five"),
         r"override data\.max_docs=five: Value 'five' of type 'str' could not be converted to Integer\. Fix: give "
         r"the key a value of its type"),
    Case("out_of_range", "curate", curate("data.max_docs=-5"), r"data\.max_docs=-5: must be >= 1 or null"),
    Case("not_an_option_value", "curate", curate("data.format=xml"),
         r"data\.format='xml': must be one of 'auto', 'parquet', 'jsonl'"),
    Case("unknown_group_option", "curate", curate("selection=nope"),
         r"Could not find 'selection/nope'\. Fix: pick one of the options: datamask, .*topk_quality"),
    Case("unknown_experiment", "curate", curate("experiment=nope"),
         r"Could not find 'experiment/nope'\. Fix: pick one of the options: decide, .*table2"),
    Case("unknown_pipeline", "curate", curate("pipeline=nope"),
         r"pipeline=nope: no such pipeline\. Fix: name one of __default__, .*ingest"),
    Case("override_without_value", "curate", curate("data.max_docs"),
         r"Error parsing override 'data\.max_docs': .*Fix: write each override as key=value"),
    Case("budget_docs_and_tokens", "curate", curate("data.path={inp}/good.parquet", "budget.docs=5",
                                                    "budget.tokens=1000"),
         r"budget\.docs=5: must be null when budget\.tokens is set .*Fix: keep one of budget\.docs and budget\.tokens"),
    Case("kedro_budget_docs_and_token_ratio", "kedro", kedro("ingest", "budget.docs=5,budget.token_ratio=0.1"),
         r"budget\.docs=5: must be null when budget\.token_ratio is set .*Fix: keep one of budget\.docs"),
    # token budgets the corpus cannot meet: refused where the budget is first resolved (decide: right after ingest)
    Case("token_budget_above_the_corpus", "curate",
         curate("data.path={inp}/good.parquet", *DECIDE, "budget.token_ratio=null", "budget.tokens=100000000"),
         r"budget\.tokens=100000000: a budget of 100,000,000 tokens is not below the [\d,]+ tokens of the ingested "
         r"corpus \(12 documents\), so there is nothing to select\. Fix: lower it below", after_ingest=True),
    Case("token_budget_below_the_smallest_document", "curate",
         curate("data.path={inp}/good.parquet", *DECIDE, "budget.token_ratio=0.0001"),
         r"budget\.token_ratio=0\.0001: a budget of \d+ tokens is smaller than the smallest document of the "
         r"ingested corpus \([\d,]+ of its [\d,]+ tokens\), so no selection can hold it\. Fix: raise it to at "
         r"least", after_ingest=True),
    Case("sweep_with_one_invalid_value", "curate",
         curate("data.path={inp}/good.parquet", "-m", "pruning.threshold=3,nan"),
         r"sweep job #1 of 2 \(pruning\.threshold=nan\): pruning\.threshold=nan: must be a finite number "
         r"\(checked before any job ran: nothing ran\)"),
    Case("sweep_with_one_value_of_the_wrong_type", "curate",
         curate("data.path={inp}/good.parquet", "-m", "data.max_docs=5,many"),
         r"sweep job #1 of 2 \(data\.max_docs=many\): Error merging override data\.max_docs=many: Value 'many' of type 'str' "
         r"could not be converted to Integer\. Fix: give the key a value of its type"),
    Case("language_mode_unknown", "curate", curate("data.path={inp}/good.parquet", "data.language=fr"),
         r"data\.language='fr': must be one of 'keep', 'drop', 'off'"),
    Case("kedro_language_mode_unknown", "kedro", kedro("ingest", "data.language=fr"),
         r"data\.language='fr': must be one of 'keep', 'drop', 'off'"),
    Case("ray_address_where_no_cluster_answers", "curate",
         curate("data.path={inp}/good.parquet", "data.engine=ray", "data.ray_address=auto"),
         r"data\.ray_address='auto': no Ray cluster answered there \(ConnectionError: .*\)\. Fix: start one "
         r"\(`ray start --head` on the head node\)", env={"RAY_TMPDIR": "{tmp}", "RAY_ADDRESS": ""}),
    Case("override_with_a_non_ascii_letter", "curate", curate("run.namespace=ü_ns"),
         r"run\.namespace=ü_ns: Hydra reads a value outside quotes as ASCII letters, digits and .* this one holds "
         r"'ü'\. Fix: quote the value inside the shell's quotes: 'run\.namespace=\"ü_ns\"'"),
    Case("dangling_symlink_in_a_folder", "curate", curate("data.path={inp}/dangling"),
         r"b\.parquet: is a symbolic link to \S+moved-away\.parquet, which does not exist\. Fix: restore the file "
         r"it points to"),
    Case("decide_candidate_with_an_unknown_score_column", "curate",
         curate("data.path={inp}/good.parquet", *DECIDE,
                "+decide.candidates.bad={{method: topk_quality, pool: raw, score: edu_score, config: {{}}}}"),
         r"decide\.candidates\.bad\.score='edu_score': 'edu_score' is not a column the scoring stage writes .*"
         r"Fix: name one of them"),
    Case("namespace_outside_data", "curate", curate("data.path={inp}/good.parquet", "run.namespace=../../escape"),
         r"run\.namespace='\.\./\.\./escape': must be a folder name inside each data layer"),
    # curate: the namespace and the disk
    Case("held_namespace", "curate", curate("data.path={inp}/good.parquet"),
         r"namespace '\w+' is in use by the run pid \d+ .*run\.wait_for_lock=true", setup="held"),
    Case("inputs_not_made_yet", "curate", curate("pipeline=pruning"),
         r"pipeline=pruning reads scores and embeddings from namespace '\w+', which has no ingested documents yet: "
         r"run the default job there first"),
    Case("full_disk", "curate", curate("data.path={inp}/big.parquet"),
         r"the disk is full while writing \S+ \(No space left on device\)\. Fix: free space", setup="full_disk"),
    Case("read_only_disk", "curate", curate("data.path={inp}/good.parquet"),
         r"the file system is read-only while writing \S+ .*Fix: make the project's data/ folder writable",
         setup="read_only"),
    # curate: counted handling (the run goes on, each drop with its reason, file, row and line)
    Case("non_utf8_line", "curate", curate("data.path={inp}/latin.jsonl"), r"invalid_utf8", exit=0,
         drops={"invalid_utf8": 1}, source_file="latin.jsonl"),
    Case("jsonl_cut_by_a_killed_writer", "curate", curate("data.path={inp}/cut.jsonl"), r"invalid_json", exit=0,
         drops={"invalid_json": 1}, source_file="cut.jsonl"),
    Case("huge_documents", "curate", curate("data.path={inp}/good.parquet", "data.max_chars=3000"), r"too_long",
         exit=0, drops={"too_long": None}, source_file="good.parquet"),
    Case("duplicate_ids_across_shards", "curate", curate("data.path={inp}/dup"),
         r"duplicate_id", exit=0, drops={"duplicate_id": 4}, source_file="b.parquet"),
    Case("blank_text_and_missing_ids", "curate", curate("data.path={inp}/blanks.parquet"),
         r"missing_id|empty_text", exit=0, drops={"missing_id": 2, "empty_text": 2}, source_file="blanks.parquet"),
    Case("text_that_is_a_json_object_in_some_rows", "curate", curate("data.path={inp}/objtext.jsonl"), r"not_text",
         exit=0, drops={"not_text": 2}, source_file="objtext.jsonl"),
    Case("folder_of_parquet_and_jsonl", "curate", curate("data.path={inp}/mixed"), r"invalid_json", exit=0,
         drops={"invalid_json": 1}, source_file="half.jsonl"),  # the JSON Lines half is read (format auto)
    Case("corpus_in_other_languages_dropped", "curate", curate("data.path={inp}/languages.jsonl", "data.language=drop"),
         r"outside_language", exit=0, drops={"outside_language": 5}, source_file="languages.jsonl",
         summary=r"language +5 \(38\.5%\) not English, the raters' language: dropped \(data\.language=drop\)"),
    Case("corpus_in_other_languages_kept", "curate", curate("data.path={inp}/languages.jsonl"), r"kept +13 ", exit=0,
         summary=r"language +5 \(38\.5%\) not English, the raters' language: kept \(data\.language=drop drops them\)"),
    # a failure nothing foresaw (here a fault put into ingest's validation): one line and the file of its trace
    Case("unexpected_failure", "curate", curate("data.path={inp}/good.parquet"),
         r"^curate: unexpected error: RuntimeError: a fault no check foresaw \(the full trace is in (\S+\.trace); "
         r"please report it with that file\)$", exit=1, setup="bug"),
    Case("kedro_unexpected_failure", "kedro", kedro("ingest", "data.path={inp}/good.parquet"),
         r"^kedro run: unexpected error: RuntimeError: a fault no check foresaw \(the full trace is in (\S+\.trace); ",
         exit=1, setup="bug"),
    # issue #52: every file of a folder read, or a refusal naming what would be left out; damaged shards, invalid
    # UTF-8, full disks, memory limits and a struct column end counted or in one line with the file and the fix
    Case("folder_of_every_format", "curate", curate("data.path={inp}/formats"), r"kept +42 ", exit=0,
         summary=r"read +42 rows from 7 of 7 files"),
    Case("folder_of_every_format_and_a_csv", "curate", curate("data.path={inp}/formats_csv"),
         r"formats_csv: 1 of its 8 files is in no format the corpus reader knows and would be left out: table\.csv\. "
         r"Fix: convert them to parquet or JSON Lines, move them out of data\.path, or point data\.path at a glob"),
    Case("damaged_parquet_shard_of_four", "curate", curate("data.path={inp}/damaged"),
         r"part-2\.parquet: cannot be read as parquet \(.+\)\. Fix: replace the file with a complete copy"),
    Case("parquet_text_not_utf8", "curate", curate("data.path={inp}/latin.parquet"), r"invalid_utf8", exit=0,
         drops={"invalid_utf8": 2}, source_file="latin.parquet"),
    Case("struct_extra_in_one_shard_of_two", "curate", curate("data.path={inp}/struct"), r"kept +40 ", exit=0,
         summary=r"read +40 rows from 2 of 2 files"),
    Case("disk_fills_while_publishing", "curate", curate("data.path={inp}/big.parquet"),
         r"the disk is full while writing \S+/documents \(No space left on device\)\. Fix: free space",
         setup="full_namespace"),
    Case("memory_limit", "curate", curate("data.path={inp}/huge.jsonl", "data.max_chars=null"),
         r"huge\.jsonl: ran out of memory \(.*MemoryError.*\)\. Fix: give the run more memory, or lower data\.workers",
         memory_mb=300),
    Case("corpus_of_one_document", "curate", curate("data.path={inp}/one.parquet"), r"kept +1 ", exit=0),
    # kedro run
    Case("kedro_unknown_key", "kedro", kedro("ingest", "data.bogus=1"),
         r"Could not override 'data\.bogus': Key 'bogus' not in 'DataConfig'\. Fix"),
    Case("kedro_wrong_type", "kedro", kedro("ingest", "data.max_docs=five"),
         r"data\.max_docs=five: Value 'five' of type 'str' could not be converted to Integer\. Fix"),
    Case("kedro_out_of_range", "kedro", kedro("ingest", "data.max_docs=-3"), r"data\.max_docs=-3: must be >= 1"),
    Case("kedro_unknown_group_option", "kedro", kedro("ingest", "selection=nope"),
         r"Could not find 'selection/nope'\. Fix: pick one of the options"),
    Case("kedro_params_without_value", "kedro", kedro("ingest", "data.max_docs"),
         r"Item `data\.max_docs` must contain a key and a value separated by `=`"),
    Case("kedro_unknown_option", "kedro", kedro("ingest", "", "--bogus-option"), r"No such option '--bogus-option'"),
    Case("kedro_unknown_pipeline", "kedro", kedro("nope", ""),
         r"pipeline=nope: no such pipeline\. Fix: name one of __default__, .*ingest"),
    Case("kedro_missing_path", "kedro", kedro("ingest", "data.path={inp}/nope.parquet"),
         r"data\.path does not exist: \S*nope\.parquet\. Fix"),
    Case("kedro_garbage_parquet", "kedro", kedro("ingest", "data.path={inp}/garbage.parquet"),
         r"garbage\.parquet: cannot be read as parquet .*Fix"),
    Case("kedro_held_namespace", "kedro", kedro("ingest", "data.path={inp}/good.parquet"),
         r"namespace '\w+' is in use by the run pid \d+", setup="held"),
    Case("kedro_inputs_not_made_yet", "kedro", kedro("pruning", ""),
         r"pipeline=pruning reads scores and embeddings from namespace '\w+'"),
    Case("kedro_duplicate_ids_across_shards", "kedro",
         kedro("ingest", "data.path={inp}/dup"), r"duplicate_id",
         exit=0, drops={"duplicate_id": 4}, source_file="b.parquet"),
    # curate-megatron
    Case("megatron_missing_input", "megatron", megatron(*CONVERT, "--input", "{inp}/nope.parquet", *TOKENIZER),
         r"--input \S*nope\.parquet: no such file or folder\. Fix: give a parquet file"),
    Case("megatron_garbage_parquet", "megatron", megatron(*CONVERT, "--input", "{inp}/garbage.parquet", *TOKENIZER),
         r"--input \S*garbage\.parquet: cannot be read as parquet .*Fix"),
    Case("megatron_truncated_parquet", "megatron", megatron(*CONVERT, "--input", "{inp}/trunc.parquet", *TOKENIZER),
         r"--input \S*trunc\.parquet: cannot be read as parquet .*copied again"),
    Case("megatron_folder_not_a_dataset", "megatron", megatron(*CONVERT, "--input", "{inp}/emptydir"),
         r"--input \S*emptydir: a folder without manifest\.json or index\.json\. Fix"),
    Case("megatron_no_tokenizer", "megatron", megatron(*CONVERT, "--input", "{inp}/good.parquet"),
         r"--input \S*good\.parquet holds documents .* needs --tokenizer\. Fix: add --tokenizer"),
    Case("megatron_missing_tokenizer", "megatron",
         megatron(*CONVERT, "--input", "{inp}/good.parquet", "--tokenizer", "{inp}/nope.json"),
         r"--tokenizer \S*nope\.json: no such file\. Fix"),
    Case("megatron_corrupt_tokenizer", "megatron",
         megatron(*CONVERT, "--input", "{inp}/good.parquet", "--tokenizer", "{inp}/badtok.json"),
         r"--tokenizer \S*badtok\.json: cannot be read as a tokenizer\.json .*Fix"),
    Case("megatron_text_column_missing", "megatron",
         megatron(*CONVERT, "--input", "{inp}/notext.parquet", *TOKENIZER),
         r"--input \S*notext\.parquet has no column 'text' \(columns: .*\)\. Fix: .*--text-column"),
    Case("megatron_text_column_of_numbers", "megatron",
         megatron(*CONVERT, "--input", "{inp}/inttext.parquet", *TOKENIZER),
         r"--input \S*inttext\.parquet: column 'text' holds int64 values, not text\. Fix"),
    Case("megatron_existing_prefix", "megatron",
         lambda inp, root: ["convert", "--input", f"{inp}/good.parquet", "--tokenizer", f"{inp}/tokenizer.json",
                            "--output-prefix", f"{inp}/done"],
         r"--output-prefix \S*done: \S*done\.bin and \S*done\.idx already exist .*Fix: pass --force"),
    Case("megatron_every_text_blank", "megatron",
         megatron(*CONVERT, "--input", "{inp}/allblank.parquet", *TOKENIZER),
         r"--input \S*allblank\.parquet has no documents \(12 rows, all blank\)\. Fix"),
    Case("megatron_zero_rows", "megatron", megatron(*CONVERT, "--input", "{inp}/zerorows.parquet", *TOKENIZER),
         r"--input \S*zerorows\.parquet has no documents .*Fix"),
    Case("megatron_unknown_model", "megatron", megatron("train", "--model", "nope", "--dry-run"),
         r"argument --model: invalid choice: 'nope' \(choose from .*tiny_dense"),
    Case("megatron_wrong_type", "megatron",
         megatron("train", "--model", "tiny_dense", "--dry-run", "--global-batch-size", "abc"),
         r"argument --global-batch-size: invalid int value: 'abc'"),
    Case("megatron_no_indexed_dataset", "megatron",
         megatron("train", "--model", "tiny_dense", "--dry-run", "--train-iters", "1", "--seq-length", "64",
                  "--data-prefix", "{out}/none"),
         r"no indexed dataset at \S*none\(\.bin/\.idx\): run `curate-megatron convert`", exit=1),
    Case("megatron_not_a_checkpoint", "megatron", megatron("export", "--load", "{inp}/emptydir", "--output", "{out}/m"),
         r"no latest\.json in \S*emptydir: not a curate-megatron checkpoint folder", exit=1),
    Case("megatron_full_disk", "megatron", megatron(*CONVERT, "--input", "{inp}/big.parquet", *TOKENIZER),
         r"the disk is full while writing \S+ \(No space left on device\)\. Fix: free space", setup="full_disk"),
]


# --- running one case ---------------------------------------------------------------------------------------

ENTRY = {"curate": ("curate", "curation.hydra_app"), "kedro": ("kedro", "kedro.framework.cli"),
         "megatron": ("curate-megatron", "curation.pretraining.launch")}


def _entry_point(cli: str, argv: list[str], cwd: str, env: dict[str, str], out: str, err: str,
                 memory_mb: int = 0) -> None:
    """The forked process: the command's console-script function with ``argv``, its streams in files; with
    ``memory_mb``, under a real memory limit (RLIMIT_AS, as ``ulimit -v`` or a container sets) that many MB above
    what the process maps now."""
    if memory_mb:
        import resource

        with open("/proc/self/status") as status:
            size = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (memory_mb << 20), size + (memory_mb << 20)))
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdout = open(1, "w", closefd=False, buffering=1)
    sys.stderr = open(2, "w", closefd=False, buffering=1)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    prog, module = ENTRY[cli]
    sys.argv = [prog, *argv]
    import importlib

    code = importlib.import_module(module).main()
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)  # multiprocessing makes it the exit status, and prints a trace for anything else


@dataclass
class Result:
    exit: int
    stdout: str
    stderr: str
    seconds: float


def invoke(cli: str, argv: list[str], root: Path, logs: Path, env: dict[str, str], memory_mb: int = 0) -> Result:
    out, err = logs / "stdout.txt", logs / "stderr.txt"
    process = multiprocessing.get_context("fork").Process(
        target=_entry_point, args=(cli, argv, str(root), env, str(out), str(err), memory_mb))
    started = time.monotonic()
    process.start()
    process.join(300)
    if process.exitcode is None:
        process.kill()
        process.join()
        pytest.fail(f"{cli} {argv} did not end in 300 s")
    return Result(process.exitcode, out.read_text(errors="replace"), err.read_text(errors="replace"),
                  time.monotonic() - started)


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[Path, Path]:
    """(inputs, project), and what the three commands import, imported once."""
    import importlib
    import pkgutil

    from curation.config_schema import register_configs

    register_configs()
    import curation.pipelines

    for module in ("curation.hydra_app", "curation.cli", "curation.settings", "curation.runtime_hooks",
                   "curation.tracking.hooks", "curation.tracking.hydra_callbacks", "curation.datasets",
                   "kedro.framework.cli", "kedro.framework.session", "kedro_datasets.pandas",
                   "kedro_datasets.partitions", "mlflow", "curation.pretraining.launch",
                   "megatron.core.datasets.indexed_dataset", "curation.lm", "curation.data.ingest",
                   *(f"curation.pipelines.{m.name}" for m in pkgutil.iter_modules(curation.pipelines.__path__))):
        importlib.import_module(module)
    base = tmp_path_factory.mktemp("bad_inputs")
    return _make_inputs(base / "inputs"), make_project(base / "project")


LAYERS = ("02_intermediate", "03_primary", "04_feature", "05_model_input", "06_models", "07_model_output",
          "08_reporting")


def _snapshot(folders: list[Path]) -> dict[str, tuple[int, int]]:
    files = {}
    for folder in folders:
        for path in folder.rglob("*") if folder.exists() else ():
            if path.is_file() or path.is_symlink():
                st = path.lstat()
                files[str(path)] = (st.st_size, st.st_mtime_ns)
        if folder.exists():
            files[str(folder)] = (0, 0)
    return files


def _mount_tmpfs(where: Path, read_only: bool) -> None:
    where.mkdir(parents=True, exist_ok=True)
    options = "size=96k,ro" if read_only else "size=96k"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"a full disk needs a small tmpfs, and this machine does not let the test mount one: "
                    f"{done.stderr.strip()}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, bench, tmp_path, monkeypatch):
    inputs, root = bench
    namespace = f"bad_{case.name}"[:60]
    argv = case.args(inputs, root)
    if case.cli == "kedro":
        argv[argv.index("--params") + 1] += f",run.namespace={namespace}"
    elif case.cli == "curate" and not any(a.startswith("run.namespace=") for a in argv):
        argv.append(f"run.namespace={namespace}")
    outputs = [root / "data" / layer / namespace for layer in LAYERS]
    if case.cli == "megatron":
        outputs = [root / "megatron"]
    for folder in outputs:  # an earlier run's file in each: a failed run must leave it, and add nothing
        folder.mkdir(parents=True, exist_ok=True)
        (folder / EARLIER).write_text("from an earlier run\n")
    before = _snapshot(outputs)
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(root), "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "200"}
    env.pop("HYDRA_FULL_ERROR", None)
    for key, value in case.env.items():
        if value:
            env[key] = value.format(tmp=tmp_path)
        else:
            env.pop(key, None)
    holder = mounted = None
    if case.setup == "bug":  # in this process: the case's forked process inherits it
        import curation.data.ingest

        def fault(*args, **kwargs):
            raise RuntimeError("a fault no check foresaw")

        monkeypatch.setattr(curation.data.ingest, "validate_documents", fault)
    try:
        if case.setup == "held":  # another run holds the namespace
            code = ("import sys, time\nfrom curation.namespace_lock import NamespaceLock\n"
                    f"NamespaceLock({str(root)!r}, {namespace!r}).acquire()\nprint('held', flush=True)\n"
                    "time.sleep(300)\n")
            holder = subprocess.Popen([sys.executable, "-c", code, "curate", "pipeline=ingest"],
                                      stdout=subprocess.PIPE, text=True)
            assert holder.stdout.readline().strip() == "held"
        elif case.setup in ("full_disk", "read_only", "full_namespace"):
            layer = root / "megatron" if case.cli == "megatron" else root / "data" / "02_intermediate"
            if case.setup == "full_namespace":  # the namespace's folder only: the staging folder has room
                layer = layer / namespace
            before = _snapshot(outputs)  # the mount hides what was there; it is back once unmounted
            _mount_tmpfs(layer, read_only=case.setup == "read_only")
            mounted = layer
        result = invoke(case.cli, argv, root, tmp_path, env, case.memory_mb)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        if mounted is not None:
            left_on_disk = _snapshot([mounted])
            subprocess.run(["umount", str(mounted)], check=True)
    shown = result.stdout + result.stderr
    assert "Traceback" not in shown, shown[-4000:]
    if case.exit == 0:
        _check_counted(case, result, root, namespace)
        return
    assert result.exit == case.exit, f"exit {result.exit}\n{shown[-4000:]}"
    matching = [line for line in result.stderr.splitlines() if re.search(case.expect, line)]
    assert matching, f"no line of stderr matches {case.expect!r}:\n{result.stderr[-4000:]}"
    assert len(matching[0]) < 700, matching[0]  # short: one line
    if case.setup == "bug":  # the trace is where the line says, whole
        trace = Path(re.search(case.expect, matching[0]).group(1)).read_text()
        assert "Traceback" in trace and "a fault no check foresaw" in trace and "fault" in trace.splitlines()[-2]
    after = _snapshot(outputs)
    if case.after_ingest:
        ingested = root / "data" / "02_intermediate" / namespace
        new = {p for p in set(after) - set(before) if not Path(p).is_relative_to(ingested)}
        assert not new, f"the failed run left more than ingest's outputs in the namespace: {sorted(new)}"
        after = {p: v for p, v in after.items() if p in before}
    assert after == before, "the failed run left something in the namespace"
    if mounted is not None:  # what the run had written on the full disk before it failed was removed
        scope = mounted if case.cli == "megatron" or case.setup == "full_namespace" else mounted / namespace
        assert not [p for p in left_on_disk if p != str(mounted) and Path(p).is_relative_to(scope)], left_on_disk
    if case.name == "namespace_outside_data":
        assert not (root / "escape").exists() and not (root.parent / "escape").exists()


def _check_counted(case: Case, result: Result, root: Path, namespace: str) -> None:
    shown = result.stdout + result.stderr
    assert result.exit == 0, f"exit {result.exit}\n{shown[-4000:]}"
    documents = pd.read_parquet(root / "data" / "02_intermediate" / namespace / "documents" / "shards")
    assert len(documents) >= 1
    if case.summary is not None:
        assert re.search(case.summary, result.stdout), result.stdout[-3000:]
    if not case.drops:  # nothing to drop: the summary counts what was kept
        assert re.search(case.expect, result.stdout), result.stdout[-3000:]
        assert len(documents) == (1 if case.summary is None else len(documents))
        return
    rejected = pd.read_parquet(root / "data" / "02_intermediate" / namespace / "rejected_documents" / "shards")
    counts = rejected["reason"].value_counts().to_dict()
    for reason, n in case.drops.items():
        assert counts.get(reason, 0) == n if n is not None else counts.get(reason, 0) >= 1, counts
        assert re.search(case.expect, " ".join(counts))
    assert set(rejected["source_file"].map(lambda s: Path(s).name)) == {case.source_file}, rejected
    assert rejected["row"].notna().all()
    if case.source_file.endswith(".jsonl"):  # a line of a JSON Lines file is named by its line
        assert rejected["line"].notna().all(), rejected
    # the summary says so too: the reason and its count
    for reason in case.drops:
        assert re.search(rf"{reason} {counts[reason]}", result.stdout), result.stdout[-3000:]


def test_the_table_covers_every_kind_the_issue_lists():
    names = {c.name for c in CASES}
    assert len(CASES) >= 40 and len(names) == len(CASES)
    by_cli = {cli: sum(c.cli == cli for c in CASES) for cli in ENTRY}
    assert all(n >= 5 for n in by_cli.values()), by_cli
    for kind in ("garbage_parquet", "zero_byte_parquet", "zero_byte_jsonl", "text_column_of_numbers", "unknown_key",
                 "missing_path", "held_namespace", "full_disk", "jsonl_cut_by_a_killed_writer", "non_utf8_line",
                 "huge_documents", "corpus_of_one_document", "duplicate_ids_across_shards",
                 # issue #52
                 "folder_of_every_format", "folder_of_every_format_and_a_csv", "damaged_parquet_shard_of_four",
                 "parquet_text_not_utf8", "struct_extra_in_one_shard_of_two", "disk_fills_while_publishing",
                 "memory_limit", "override_with_a_non_ascii_letter", "dangling_symlink_in_a_folder", "decide_candidate_with_an_unknown_score_column"):
        assert kind in names, kind
