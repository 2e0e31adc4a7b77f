"""Log-likelihood and greedy-generation scoring of a CausalLM, and the zero-shot metrics.

:class:`LMScorer` is the text-in, numbers-out interface lm-evaluation-harness
calls an ``LM`` (``loglikelihood``, ``loglikelihood_rolling``,
``generate_until``), implemented the way lm-eval's HF model does it:

- a (context, continuation) pair is encoded as ``enc(context + continuation)``
  and the continuation is what follows ``enc(context)`` (so BPE merges across
  the boundary match training), with trailing spaces of the context moved to
  the continuation;
- the score is the sum of the continuation tokens' log-probabilities, and
  ``is_greedy`` says whether argmax decoding would have produced them;
- inputs longer than the model's context keep their last tokens.

One deliberate difference: every context starts with the EOS token by default
(``prepend_eos``), because our models were trained on documents that each
follow an EOS (:mod:`curation.lm.packing`); lm-eval adds it only to empty contexts.

Metrics (lm-eval 0.4 definitions): ``acc`` = argmax of the log-likelihoods is
the gold choice; ``acc_norm`` = argmax of log-likelihood divided by the
choice's length in characters; beside them DataDecide's continuous metrics
(:data:`CONTINUOUS_METRICS`: the correct answer's probability, its margin over
the best wrong answer, its share of the choices' mass, the mass itself, raw /
per token / per character); ``exact_match`` = the greedy answer, cut at the
first stop string, equals one of the gold answers after SQuAD normalisation
(lowercase, no punctuation, no articles a/an/the, single spaces).
"""

from __future__ import annotations

import re
import string
from typing import Optional, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer

from curation.evaluation.tasks import GenerationItem, MultipleChoiceItem
from curation.lm.model import CausalLM
from curation.lm.tokenizer import eos_id


class LMScorer:
    """Scores text with a :class:`CausalLM` and its tokenizer (lm-eval's ``LM`` interface on plain tuples)."""

    def __init__(
        self,
        model: CausalLM,
        tokenizer: Tokenizer,
        batch_size: int = 16,
        prepend_eos: bool = True,
        max_length: Optional[int] = None,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.prepend_eos = prepend_eos
        self.eos_id = eos_id(tokenizer)
        self.max_length = max_length or model.config.max_seq_len
        # Inputs go where the model is (a GPU-trained model is scored on its GPU; CPU by default).
        self.device = next(model.parameters()).device

    # --- encoding ---

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation ids, split as lm-eval's ``_encode_pair`` does."""
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
        whole = self.encode(context + continuation)
        ctx = self.encode(context)
        cont = whole[len(ctx) :]
        if self.prepend_eos or not ctx:  # an empty context conditions on EOS, as in lm-eval
            ctx = [self.eos_id] + ctx
        return ctx, cont

    # --- log-likelihood ---

    @torch.inference_mode()
    def score_tokens(self, requests: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(sum log p(continuation | context), is_greedy) for each (context ids, continuation ids).

        Batches of similar length (longest first); right padding is harmless in
        a causal model because padded positions come after every scored one.
        """
        results: list[Optional[tuple[float, bool]]] = [None] * len(requests)
        order = sorted(range(len(requests)), key=lambda i: -(len(requests[i][0]) + len(requests[i][1])))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            inputs, conts = [], []
            for i in chunk:
                ctx, cont = requests[i]
                if not cont:  # nothing to predict: log 1 = 0, trivially greedy
                    results[i] = (0.0, True)
                    continue
                full = (list(ctx) + list(cont))[-(self.max_length + 1) :]  # keep the last tokens
                inputs.append(full[:-1])
                # A continuation longer than the context window: only its last tokens are scorable.
                conts.append(list(cont)[-min(len(cont), len(full) - 1) :])
            chunk = [i for i in chunk if results[i] is None]
            if not chunk:
                continue
            width = max(len(x) for x in inputs)
            batch = torch.full((len(inputs), width), self.eos_id, dtype=torch.long)
            for row, x in enumerate(inputs):
                batch[row, : len(x)] = torch.tensor(x, dtype=torch.long)
            logits = self.model(batch.to(self.device)).logits  # (B, T, vocab)
            for row, i in enumerate(chunk):
                n, k = len(inputs[row]), len(conts[row])
                logprobs = logits[row, n - k : n].float().log_softmax(dim=-1)  # positions that predict cont
                target = torch.tensor(conts[row], dtype=torch.long, device=logprobs.device)
                ll = float(logprobs.gather(-1, target[:, None]).sum())
                greedy = bool((logprobs.argmax(dim=-1) == target).all())
                results[i] = (ll, greedy)
        return results  # type: ignore[return-value]

    def loglikelihood(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """lm-eval ``loglikelihood`` on (context, continuation) strings."""
        return self.score_tokens([self.encode_pair(c, x) for c, x in pairs])

    def loglikelihood_rolling(self, texts: Sequence[str]) -> list[float]:
        """lm-eval ``loglikelihood_rolling``: log p(text | EOS), every token scored once, windows of max_length."""
        out = []
        for text in texts:
            tokens = self.encode(text)
            if not tokens:
                out.append(0.0)
                continue
            requests = []
            # Same windows as lm_eval.utils.get_rolling_token_windows(context_len=1):
            # the first predicts tokens[:L] from EOS + tokens[:L-1]; each later one
            # predicts the next L tokens from the L tokens just before them.
            L = self.max_length
            predicted = min(L, len(tokens))
            requests.append(([self.eos_id], tokens[:predicted]))
            while predicted < len(tokens):
                end = min(len(tokens), predicted + L)
                requests.append((tokens[max(0, end - L - 1) : predicted], tokens[predicted:end]))
                predicted = end
            out.append(sum(ll for ll, _ in self.score_tokens(requests)))
        return out

    # --- generation ---

    @torch.inference_mode()
    def generate_until(self, prompts: Sequence[str], until: Sequence[str], max_new_tokens: int = 16) -> list[str]:
        """Greedy continuation of each prompt, cut before the first stop string (or EOS).

        Prompts of equal token length run as one batch: they stay equal in length
        while generating, so no padding (and no attention mask) is needed.
        """
        encoded = []
        for prompt in prompts:
            ids = self.encode(prompt)
            encoded.append([self.eos_id] + ids if self.prepend_eos or not ids else ids)
        by_length: dict[int, list[int]] = {}
        for i, ids in enumerate(encoded):
            by_length.setdefault(len(ids), []).append(i)
        outputs = [""] * len(prompts)
        for group in by_length.values():
            for start in range(0, len(group), self.batch_size):
                rows = group[start : start + self.batch_size]
                texts = self._greedy_batch([encoded[i] for i in rows], until, max_new_tokens)
                for i, text in zip(rows, texts):
                    outputs[i] = text
        return outputs

    def _greedy_batch(self, prompts: list[list[int]], until: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy decoding of equal-length prompts; each row stops at EOS or a stop string."""
        ids = torch.tensor(prompts, dtype=torch.long, device=self.device)  # (B, T)
        generated: list[list[int]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        for _ in range(max_new_tokens):
            logits = self.model(ids[:, -self.max_length :], last_only=True).logits[:, -1]  # (B, vocab)
            next_ids = logits.argmax(dim=-1)
            for row, token in enumerate(next_ids.tolist()):
                if done[row]:
                    continue
                if token == self.eos_id:
                    done[row] = True
                    continue
                generated[row].append(token)
                if any(stop in self.tokenizer.decode(generated[row]) for stop in until):
                    done[row] = True
            if all(done):
                break
            ids = torch.cat([ids, next_ids[:, None]], dim=1)  # finished rows keep going, ignored
        return [cut_at_stop(self.tokenizer.decode(g), until) for g in generated]


def cut_at_stop(text: str, until: Sequence[str]) -> str:
    """text up to (not including) the earliest stop string."""
    cut = len(text)
    for stop in until:
        pos = text.find(stop)
        if pos != -1:
            cut = min(cut, pos)
    return text[:cut]


def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation: lowercase, drop punctuation and articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


# Continuous metrics of a multiple-choice item, after DataDecide (Magnusson et al., 2025, Sec. 3 "Performance
# evaluation": CORRECT PROB, MARGIN, NORM CORRECT PROB, TOTAL PROB), each in three normalisations as its public
# analysis code computes them: raw (the sum of the choice's token log-probabilities), per token (divided by the
# choice's token count) and per char (divided by its character count, the length lm-eval's acc_norm uses).
CONTINUOUS_METRICS = tuple(
    f"{name}{suffix}"
    for name in ("correct_prob", "margin", "norm_correct_prob", "total_prob", "correct_logprob")
    for suffix in ("", "_per_token", "_per_char")
)


def _logsumexp(values: np.ndarray) -> float:
    top = float(np.max(values))
    return top + float(np.log(np.sum(np.exp(values - top))))


def continuous_item_metrics(lls: np.ndarray, n_tokens: np.ndarray, n_chars: np.ndarray, label: int) -> dict[str, float]:
    """DataDecide's continuous metrics of one item from its choices' summed log-likelihoods ``lls``.

    For each normalisation ``x`` (raw ll, ll / tokens, ll / chars): ``correct_prob`` = exp(x_gold);
    ``margin`` = exp(x_gold) - max over wrong choices of exp(x_wrong); ``total_prob`` = sum_i exp(x_i);
    ``norm_correct_prob`` = exp(x_gold) / total_prob (a softmax over the choices); and, for a tiny
    model whose raw probabilities underflow, ``correct_logprob`` = x_gold itself (log space).
    """
    out: dict[str, float] = {}
    scaled = {"": lls, "_per_token": lls / np.maximum(n_tokens, 1), "_per_char": lls / np.maximum(n_chars, 1)}
    for suffix, x in scaled.items():
        gold = float(x[label])
        wrong = np.delete(x, label)
        total = _logsumexp(x)
        out[f"correct_prob{suffix}"] = float(np.exp(gold))
        out[f"margin{suffix}"] = float(np.exp(gold) - np.exp(np.max(wrong))) if wrong.size else float("nan")
        out[f"total_prob{suffix}"] = float(np.exp(total))
        out[f"norm_correct_prob{suffix}"] = float(np.exp(gold - total))
        out[f"correct_logprob{suffix}"] = gold
    return out


def score_multiple_choice(scorer: LMScorer, items: Sequence[MultipleChoiceItem],
                          per_item: Optional[list] = None) -> dict[str, float]:
    """acc, acc_norm (lm-eval definitions), the continuous metrics of :func:`continuous_item_metrics`
    (means over items) and the chance level (mean 1/choices) over ``items``.

    per_item: if given, each item's metrics are appended to it (for standard errors over items).
    """
    encoded = [scorer.encode_pair(ctx, cont) for item in items for ctx, cont in zip(item.contexts, item.continuations)]
    lls = [ll for ll, _ in scorer.score_tokens(encoded)]
    totals = dict.fromkeys(("acc", "acc_norm", "chance", *CONTINUOUS_METRICS), 0.0)
    pos = 0
    for item in items:
        k = len(item.continuations)
        ll = np.array(lls[pos : pos + k])
        n_tokens = np.array([len(cont) for _, cont in encoded[pos : pos + k]], dtype=float)
        pos += k
        chars = np.array(item.choice_lengths, dtype=float)
        row = {
            "acc": float(np.argmax(ll) == item.label),  # np.argmax: first of ties, as lm-eval
            "acc_norm": float(np.argmax(ll / chars) == item.label),
            "chance": 1.0 / k,
            **continuous_item_metrics(ll, n_tokens, chars, item.label),
        }
        for key, value in row.items():
            totals[key] += value
        if per_item is not None:
            per_item.append(row)
    n = max(len(items), 1)
    return {key: value / n for key, value in totals.items()}


def gold_text_loss(scorer: LMScorer, items: Sequence[MultipleChoiceItem | GenerationItem],
                   per_item: Optional[list] = None) -> dict[str, float]:
    """Held-out loss on a task's gold text: each item's prompt followed by its correct answer.

    The texts come from the evaluation package, so they are never a selection candidate nor a rater's
    training row (the reference set of issue #21, chosen before any result: docs/pretraining.md).
    ``ref_nats_per_token`` = -sum log p / tokens (this tokenizer's units); ``ref_bits_per_byte`` =
    -sum log p / ln 2 / UTF-8 bytes, which compares models with different tokenizers.
    """
    texts = []
    for item in items:
        if isinstance(item, MultipleChoiceItem):
            texts.append(item.contexts[item.label] + item.continuations[item.label])
        else:
            texts.append(f"{item.prompt} {item.answers[0]}" if item.answers else item.prompt)
    lls = scorer.loglikelihood_rolling(texts)
    tokens = sum(len(scorer.encode(t)) for t in texts)
    item_bytes = np.array([len(t.encode("utf-8")) for t in texts], dtype=float)
    n_bytes = float(item_bytes.sum())
    nats = -float(sum(lls))
    bpb = nats / np.log(2) / max(n_bytes, 1)
    out = {"ref_nats_per_token": nats / max(tokens, 1), "ref_bits_per_byte": bpb}
    if len(texts) > 1:
        # a ratio of sums: its standard error over items by the delta method, from each item's residual
        # bits - bpb x bytes (the item-sampling error of the reference loss, issue #38)
        z = (-np.asarray(lls, dtype=float) / np.log(2) - bpb * item_bytes) / item_bytes.mean()
        out["ref_bits_per_byte_se"] = float(z.std(ddof=1) / np.sqrt(len(z)))
    if per_item is not None:
        per_item.extend({"ref_bits": -float(ll) / np.log(2), "ref_bytes": float(b)} for ll, b in zip(lls, item_bytes))
    return out


def score_generation(
    scorer: LMScorer, items: Sequence[GenerationItem], max_new_tokens: int = 16
) -> dict[str, float]:
    """exact_match of greedy short answers (normalised; an empty answer never matches) over ``items``."""
    hits = 0.0
    answers: list[str] = [""] * len(items)
    by_until: dict[tuple[str, ...], list[int]] = {}
    for i, item in enumerate(items):
        by_until.setdefault(tuple(item.until), []).append(i)
    for until, rows in by_until.items():
        for i, text in zip(rows, scorer.generate_until([items[i].prompt for i in rows], until, max_new_tokens)):
            answers[i] = text
    for item, answer in zip(items, answers):
        predicted = normalize_answer(answer)
        hits += float(bool(predicted) and predicted in {normalize_answer(a) for a in item.answers})
    return {"exact_match": hits / max(len(items), 1), "chance": 0.0}
