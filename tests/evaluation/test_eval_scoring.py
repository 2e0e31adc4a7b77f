"""Scoring: a hand-made 3-item task with a bigram model whose answers are known; consistency on real text."""

from __future__ import annotations

import math

import pytest
import torch

from curation.evaluation import (
    GenerationItem,
    LMScorer,
    MultipleChoiceItem,
    cut_at_stop,
    normalize_answer,
    score_generation,
    score_multiple_choice,
)
from curation.lm import CausalLM, ModelConfig

# Bigram logits (all others 0). Row "is" has logits 4 (blue), 3 (very), 3.5 (hot) and 13 zeros.
LOGITS = {
    ("is", "blue"): 4.0,
    ("is", "very"): 3.0,
    ("very", "very"): 3.0,
    ("very", "cold"): 3.0,
    ("is", "hot"): 3.5,
    ("water", "is"): 2.0,
}
V = 16  # words in the conftest vocabulary
LSE_IS = math.log(math.exp(4) + math.exp(3) + math.exp(3.5) + (V - 3))
LSE_VERY = math.log(2 * math.exp(3) + (V - 2))
LSE_WATER = math.log(math.exp(2) + (V - 1))
LSE_FLAT = math.log(V)


def mc(context, choices, label):
    return MultipleChoiceItem((context,) * len(choices), tuple(" " + c for c in choices), label,
                              tuple(len(c) for c in choices))


ITEMS = [
    # 1. "blue" is the likely continuation: acc and acc_norm both right.
    mc("the sky is", ["blue", "green"], 0),
    # 2. The long gold answer has the lower total log-likelihood (-3.77 vs -1.29) but the
    #    higher per character (-0.27 vs -0.43): acc wrong, acc_norm right.
    mc("the water is", ["very very cold", "hot"], 0),
    # 3. WinoGrande-style partial scoring: the contexts differ, the continuation is shared.
    MultipleChoiceItem(("the water", "the sky"), (" is wet", " is wet"), 0, (9, 7)),
]


@pytest.fixture(scope="module")
def scorer(word_tokenizer, bigram_model, words):
    assert len(words) == V
    return LMScorer(bigram_model(LOGITS), word_tokenizer, batch_size=2)


def test_log_likelihoods_are_the_hand_computed_values(scorer):
    lls = scorer.loglikelihood([
        ("the sky is", " blue"),
        ("the water is", " very very cold"),
        ("the water is", " hot"),
        ("the water", " is wet"),
        ("the sky", " is wet"),
    ])
    expected = [
        4 - LSE_IS,
        (3 - LSE_IS) + 2 * (3 - LSE_VERY),
        3.5 - LSE_IS,
        (2 - LSE_WATER) + (0 - LSE_IS),
        (0 - LSE_FLAT) + (0 - LSE_IS),
    ]
    assert [ll for ll, _ in lls] == pytest.approx(expected, abs=1e-4)
    assert [g for _, g in lls] == [True, False, False, False, False]  # only "blue" is every-token argmax


def test_three_item_task_gives_the_known_accuracies(scorer):
    metrics = score_multiple_choice(scorer, ITEMS)
    assert metrics["acc"] == pytest.approx(2 / 3)  # item 2 is missed without length normalisation
    assert metrics["acc_norm"] == pytest.approx(1.0)
    assert metrics["chance"] == pytest.approx(0.5)


def test_continuous_metrics_are_datadecides_on_hand_computed_values(scorer):
    """Item 2 (float32 model, hence rel=1e-4): gold "very very cold" (3 tokens, 14 chars) vs "hot" (1 token, 3 chars); the bigram model's
    log-likelihoods are known in closed form, so every continuous metric is too."""
    gold, wrong = (3 - LSE_IS) + 2 * (3 - LSE_VERY), 3.5 - LSE_IS
    per_item: list = []
    metrics = score_multiple_choice(scorer, [ITEMS[1]], per_item=per_item)
    for suffix, (g, w) in {"": (gold, wrong), "_per_token": (gold / 3, wrong), "_per_char": (gold / 14, wrong / 3)}.items():
        assert metrics[f"correct_prob{suffix}"] == pytest.approx(math.exp(g), rel=1e-4)
        assert metrics[f"margin{suffix}"] == pytest.approx(math.exp(g) - math.exp(w), rel=1e-4)
        assert metrics[f"total_prob{suffix}"] == pytest.approx(math.exp(g) + math.exp(w), rel=1e-4)
        assert metrics[f"norm_correct_prob{suffix}"] == pytest.approx(math.exp(g) / (math.exp(g) + math.exp(w)), rel=1e-4)
        assert metrics[f"correct_logprob{suffix}"] == pytest.approx(g, abs=1e-4)
    # raw: the gold answer is less likely (margin < 0); per char it is the more likely one (margin > 0),
    # as acc and acc_norm disagree on this item.
    assert metrics["margin"] < 0 < metrics["margin_per_char"]
    assert per_item[0]["acc"] == 0.0 and per_item[0]["acc_norm"] == 1.0
    # Over the three items: means of the per-item values.
    rows: list = []
    three = score_multiple_choice(scorer, ITEMS, per_item=rows)
    assert three["norm_correct_prob_per_char"] == pytest.approx(sum(r["norm_correct_prob_per_char"] for r in rows) / 3)
    assert all(0 < r["norm_correct_prob"] < 1 and -1 < r["margin"] < 1 for r in rows)


def test_gold_text_loss_is_the_rolling_loglikelihood_per_token_and_per_byte(scorer):
    from curation.evaluation.scoring import gold_text_loss

    texts = ["the sky is blue", "the water is very very cold"]  # the gold texts of ITEMS[0] and ITEMS[1]
    lls = scorer.loglikelihood_rolling(texts)
    got = gold_text_loss(scorer, ITEMS[:2])
    assert got["ref_nats_per_token"] == pytest.approx(-sum(lls) / (4 + 6))  # one token per word
    assert got["ref_bits_per_byte"] == pytest.approx(-sum(lls) / math.log(2) / sum(len(t) for t in texts))


def test_results_do_not_depend_on_batch_size(word_tokenizer, bigram_model):
    model = bigram_model(LOGITS)
    a = score_multiple_choice(LMScorer(model, word_tokenizer, batch_size=1), ITEMS)
    b = score_multiple_choice(LMScorer(model, word_tokenizer, batch_size=64), ITEMS)
    assert a == b


def test_greedy_generation_and_exact_match(scorer):
    # After "is" the argmax is "blue"; after "blue" every logit is 0 so argmax is id 0 = EOS: stop.
    assert scorer.generate_until(["the sky is"], until=["\n"], max_new_tokens=5) == ["blue"]
    items = [GenerationItem("the sky is", ("Blue!",)), GenerationItem("the sky is", ("dry",))]
    assert score_generation(scorer, items)["exact_match"] == pytest.approx(0.5)


def test_answer_normalisation_and_stop_strings():
    assert normalize_answer("  The Sunset  Boulevard. ") == "sunset boulevard"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert cut_at_stop(" Paris, France.\nNext", ["\n", ".", ","]) == " Paris"


# --- consistency with a direct forward pass, real byte-level tokenizer and real text ---


@pytest.fixture(scope="module")
def real_scorer(corpus_sample):
    from curation.lm import train_tokenizer

    tok = train_tokenizer(corpus_sample["text"].head(200).tolist(), vocab_size=512)
    torch.manual_seed(0)
    model = CausalLM(ModelConfig(vocab_size=512, max_seq_len=128, n_layer=2, d_model=32, n_head=2, n_kv_head=1,
                                 d_ff=64)).eval()
    return LMScorer(model, tok, batch_size=3, max_length=48)  # short window: truncation is exercised


def test_pair_encoding_moves_trailing_space_and_prepends_eos(real_scorer):
    ctx, cont = real_scorer.encode_pair("The capital of France is ", "Paris")
    assert ctx[0] == real_scorer.eos_id
    assert real_scorer.tokenizer.decode(ctx[1:]) == "The capital of France is"
    assert real_scorer.tokenizer.decode(cont) == " Paris"


def test_loglikelihood_equals_a_direct_forward_pass(real_scorer, corpus_sample):
    text = corpus_sample["text"].iloc[3][:70]
    context, continuation = text[:40], text[40:]
    (ll, _), = real_scorer.loglikelihood([(context, continuation)])
    ctx, cont = real_scorer.encode_pair(context, continuation)
    assert len(ctx) + len(cont) <= 49  # fits the 48-token window: nothing truncated
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = real_scorer.model(ids[:, :-1]).logits.log_softmax(-1)[0]
    direct = sum(float(logp[len(ctx) - 1 + j, t]) for j, t in enumerate(cont))
    assert ll == pytest.approx(direct, abs=1e-4)


def test_long_inputs_keep_their_last_tokens(real_scorer, corpus_sample):
    text = corpus_sample["text"].iloc[0]  # 7,962 characters, far beyond the 48-token window
    context, continuation = text[:2000], text[2000:2030]
    (ll, _), = real_scorer.loglikelihood([(context, continuation)])
    ctx, cont = real_scorer.encode_pair(context, continuation)
    ids = torch.tensor([(ctx + cont)[-49:]])  # the last 48 inputs + 1 target, as scored
    with torch.no_grad():
        logp = real_scorer.model(ids[:, :-1]).logits.log_softmax(-1)[0]
    direct = sum(float(logp[48 - len(cont) + j, t]) for j, t in enumerate(cont))
    assert ll == pytest.approx(direct, abs=1e-4)


def test_empty_continuation_scores_zero(real_scorer):
    assert real_scorer.loglikelihood([("some context", "")]) == [(0.0, True)]


def test_rolling_loglikelihood_scores_each_token_once(word_tokenizer, bigram_model, words):
    # A unigram model (same logits after every token): windowing cannot change the total,
    # which must then equal the sum over tokens of log p(token).
    model = bigram_model({(prev, "blue"): 2.0 for prev in words})
    text = " ".join(["the sky is blue"] * 12)  # 48 tokens, more than max_seq_len = 32
    per_token = {"blue": 2 - math.log(math.exp(2) + V - 1)}
    expected = sum(per_token.get(w, -math.log(math.exp(2) + V - 1)) for w in text.split())
    got = LMScorer(model, word_tokenizer, batch_size=4).loglikelihood_rolling([text])[0]
    assert got == pytest.approx(expected, abs=1e-3)
