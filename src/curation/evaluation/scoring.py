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

How the forward passes are spent (issue #51): by default (``packed=True``) the
requests that share a prompt are one *tree* — their longest common token prefix
once, then each request's remaining tokens as a branch that sees the prefix and
itself (a block attention mask, RoPE positions continuing the prefix's), the
layout of tree attention in speculative decoding (SpecInfer, Miao et al., 2024;
Medusa, Cai et al., 2024) — and logits are computed only at the positions that
predict a scored token. Every request's tokens see exactly the keys and
positions they see in its own forward pass, so the numbers are those of the
per-request path (``packed=False``, one sequence per request, kept for
comparison) up to float rounding (tests/evaluation/test_eval_packed.py).

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

import hashlib
import re
import string
from typing import Optional, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer

from curation.evaluation.tasks import GenerationItem, MultipleChoiceItem
from curation.lm.model import CausalLM
from curation.lm.tokenizer import eos_id


# text -> token ids, per tokenizer digest (LMScorer.encode); at most _ENCODED_MAX texts (the 10 decide
# tasks x 100 items are ~8,000 texts)
_ENCODED: dict[str, dict[str, tuple[int, ...]]] = {}
_ENCODED_MAX = 200_000


def _wide(logits: torch.Tensor) -> torch.Tensor:
    """Logits in float32 at least: a bf16 / fp16 model's are widened, a float64 model's kept (the equality
    test of the packed path runs one in float64)."""
    return logits if logits.dtype == torch.float64 else logits.float()


class LMScorer:
    """Scores text with a :class:`CausalLM` and its tokenizer (lm-eval's ``LM`` interface on plain tuples)."""

    def __init__(
        self,
        model: CausalLM,
        tokenizer: Tokenizer,
        batch_size: int = 16,
        prepend_eos: bool = True,
        max_length: Optional[int] = None,
        packed: bool = True,
        packed_tokens: int = 2048,
    ):
        """batch_size: sequences per forward pass (``packed=False``). packed: share each prompt's forward
        pass among its requests (the module docstring); False is the per-request path. packed_tokens: token
        slots (padding included, at least one row) per packed forward pass: with 2 torch threads on the
        2-core machine (load 8-18 from other jobs) 2,048 took the least CPU time on the decide tasks, 512 and
        1,024 ~1.3x more (smaller matmuls), and with 1 thread 4,096 took ~1.3x more than 2,048 (larger
        (B, heads, T, T) attention and more padding per batch)."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.packed = packed
        self.packed_tokens = packed_tokens
        self.prepend_eos = prepend_eos
        self.eos_id = eos_id(tokenizer)
        self.max_length = max_length or model.config.max_seq_len
        # Inputs go where the model is (a GPU-trained model is scored on its GPU; CPU by default).
        self.device = next(model.parameters()).device
        # the encodings of this tokenizer (by content: every cell loads its own copy of the same tokenizer);
        # one tokenizer's at a time, so a run that changes tokenizers does not accumulate them
        digest = hashlib.sha1(tokenizer.to_str().encode()).hexdigest()
        if digest not in _ENCODED:
            _ENCODED.clear()
        self._encoded = _ENCODED.setdefault(digest, {})

    # --- encoding ---

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, remembered per tokenizer: the decide cells score the same items with the
        same tokenizer cell after cell, and encoding them was ~1 s of every evaluation (issue #51)."""
        ids = self._encoded.get(text)
        if ids is None:
            if len(self._encoded) >= _ENCODED_MAX:
                self._encoded.clear()
            ids = self._encoded[text] = tuple(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return list(ids)

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
                logprobs = _wide(logits[row, n - k : n]).log_softmax(dim=-1)  # positions that predict cont
                target = torch.tensor(conts[row], dtype=torch.long, device=logprobs.device)
                ll = float(logprobs.gather(-1, target[:, None]).sum())
                greedy = bool((logprobs.argmax(dim=-1) == target).all())
                results[i] = (ll, greedy)
        return results  # type: ignore[return-value]

    def _scored(self, ctx: Sequence[int], cont: Sequence[int]) -> Optional[tuple[list[int], list[int]]]:
        """(input ids, the continuation ids the input's last positions predict) as :meth:`score_tokens`
        truncates them (the last ``max_length + 1`` tokens); None for an empty continuation."""
        if not cont:
            return None
        full = (list(ctx) + list(cont))[-(self.max_length + 1) :]
        return full[:-1], list(cont)[-min(len(cont), len(full) - 1) :]

    @torch.inference_mode()
    def score_groups(self, groups: Sequence[Sequence[tuple[list[int], list[int]]]]) -> list[list[tuple[float, bool]]]:
        """:meth:`score_tokens` of each group's (context ids, continuation ids) requests, a group in one row.

        A group's inputs (truncated as :meth:`score_tokens` does) are laid out as a tree: their longest
        common prefix once (positions 0..P-1), then each distinct input's remaining tokens (positions
        P, P+1, ...). Token q may attend to key k iff k is in the prefix or in q's own branch, and k's
        position <= q's: what q attends to in its own sequence. Identical inputs share one branch; a group
        whose inputs share no token is a row per input. Rows are sorted by length and batched up to
        ``packed_tokens`` token slots; logits only at the positions that predict a scored token. Padding
        attends to itself only (no empty softmax).
        """
        results: list[list[Optional[tuple[float, bool]]]] = [[None] * len(g) for g in groups]
        rows = []  # (group, tokens, positions, branch ids, {member: (row positions predicting it, continuation)})
        for g, group in enumerate(groups):
            members = {}
            for m, (ctx, cont) in enumerate(group):
                scored = self._scored(ctx, cont)
                if scored is None:  # nothing to predict: log 1 = 0, trivially greedy
                    results[g][m] = (0.0, True)
                else:
                    members[m] = scored
            if not members:
                continue
            distinct = list(dict.fromkeys(tuple(x) for x, _ in members.values()))
            prefix = len(distinct[0])
            for x in distinct[1:]:
                prefix = next((i for i, (a, b) in enumerate(zip(distinct[0][:prefix], x)) if a != b),
                              min(prefix, len(x)))
            if prefix == 0:  # nothing shared (inputs truncated by different amounts): a row per input, which
                # batches with rows of its length instead of one row as long as all of them
                for x in distinct:
                    rows.append(self._tree(g, [x], 0, {m: xc for m, xc in members.items() if tuple(xc[0]) == x}))
            else:
                rows.append(self._tree(g, distinct, prefix, members))
        rows.sort(key=lambda r: -len(r[1]))
        budget = self.packed_tokens
        batch: list = []
        for row in rows:
            if batch and (len(batch) + 1) * len(batch[0][1]) > budget:
                self._score_rows(batch, results)
                batch = []
            batch.append(row)
        if batch:
            self._score_rows(batch, results)
        return results  # type: ignore[return-value]

    @staticmethod
    def _tree(g: int, distinct: list[tuple[int, ...]], prefix: int, members: dict) -> tuple:
        """One packed row: the ``prefix`` shared tokens, then each distinct input's remaining tokens; with
        each member's row positions that predict its continuation (:meth:`score_groups`)."""
        if len(distinct) == 1:
            prefix = len(distinct[0])
        tokens, positions, branch = list(distinct[0][:prefix]), list(range(prefix)), [0] * prefix
        start = {}
        for b, x in enumerate(distinct, start=1):
            start[x] = len(tokens)
            tokens += x[prefix:]
            positions += range(prefix, len(x))
            branch += [b] * (len(x) - prefix)
        where = {}
        for m, (x, cont) in members.items():
            n, k = len(x), len(cont)
            where[m] = ([j if j < prefix else start[tuple(x)] + j - prefix for j in range(n - k, n)], cont)
        return g, tokens, positions, branch, where

    def _score_rows(self, batch: list, results: list) -> None:
        """One forward pass over packed rows (:meth:`score_groups`); fills ``results``."""
        B, T = len(batch), len(batch[0][1])  # rows come longest first
        ids = np.full((B, T), self.eos_id, dtype=np.int64)
        pos = np.zeros((B, T), dtype=np.int64)
        branch = np.full((B, T), -1, dtype=np.int64)  # -1: padding, a branch of its own
        wanted = np.zeros((B, T), dtype=bool)
        members, at, targets = [], [], []  # each scored token: its (row, position) and target id
        for r, (g, tokens, positions, branches, where) in enumerate(batch):
            n = len(tokens)
            ids[r, :n], pos[r, :n], branch[r, :n] = tokens, positions, branches
            for m, (rows_at, cont) in where.items():
                members.append((g, m, len(cont)))
                at += [r * T + j for j in rows_at]
                targets += cont
        at = np.asarray(at, dtype=np.int64)
        wanted.flat[at] = True
        flat = np.cumsum(wanted.ravel()) - 1  # (row, position) -> row of the logits
        see = (branch[:, None, :] == 0) | (branch[:, None, :] == branch[:, :, None])  # (B, query, key)
        mask = (see & (pos[:, None, :] <= pos[:, :, None]))[:, None]  # (B, 1, T, T)
        logits = self.model(torch.from_numpy(ids).to(self.device), position_ids=torch.from_numpy(pos).to(self.device),
                            attn_mask=torch.from_numpy(mask).to(self.device),
                            logits_at=torch.from_numpy(wanted).to(self.device)).logits  # (N, vocab)
        logprobs = _wide(logits).log_softmax(dim=-1)
        rows = torch.from_numpy(flat[at]).to(logprobs.device)
        target = torch.tensor(targets, dtype=torch.long, device=logprobs.device)
        token_lp = logprobs[rows, target].cpu()  # each scored token's log-probability
        hits = (logprobs.argmax(dim=-1)[rows] == target).cpu()
        start = 0
        for g, m, k in members:
            # the sum of k contiguous float32 values, as score_tokens sums its gathered (k, 1) column
            results[g][m] = (float(token_lp[start : start + k].sum()), bool(hits[start : start + k].all()))
            start += k

    def loglikelihood(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """lm-eval ``loglikelihood`` on (context, continuation) strings.

        Packed, the pairs with the same context are one group (lm-eval's HF model also groups by context).
        """
        encoded = [self.encode_pair(c, x) for c, x in pairs]
        if not self.packed:
            return self.score_tokens(encoded)
        by_context: dict[tuple[int, ...], list[int]] = {}
        for i, (ctx, _) in enumerate(encoded):
            by_context.setdefault(tuple(ctx), []).append(i)
        order = list(by_context.values())
        scored = self.score_groups([[encoded[i] for i in group] for group in order])
        out: list[tuple[float, bool]] = [(0.0, True)] * len(pairs)
        for group, values in zip(order, scored):
            for i, value in zip(group, values):
                out[i] = value
        return out

    def rolling_requests(self, tokens: list[int]) -> list[tuple[list[int], list[int]]]:
        """The windows of ``loglikelihood_rolling`` for ``tokens``, as (context ids, continuation ids)."""
        # Same windows as lm_eval.utils.get_rolling_token_windows(context_len=1):
        # the first predicts tokens[:L] from EOS + tokens[:L-1]; each later one
        # predicts the next L tokens from the L tokens just before them.
        if not tokens:
            return []
        L = self.max_length
        predicted = min(L, len(tokens))
        requests = [([self.eos_id], tokens[:predicted])]
        while predicted < len(tokens):
            end = min(len(tokens), predicted + L)
            requests.append((tokens[max(0, end - L - 1) : predicted], tokens[predicted:end]))
            predicted = end
        return requests

    def loglikelihood_rolling(self, texts: Sequence[str]) -> list[float]:
        """lm-eval ``loglikelihood_rolling``: log p(text | EOS), every token scored once, windows of max_length.

        Packed, every window of every text goes into one :meth:`score_groups` call (batched across texts).
        """
        windows = [self.rolling_requests(self.encode(text)) for text in texts]
        if self.packed:
            scored = self.score_groups([[w] for ws in windows for w in ws])
            lls, pos = [], 0
            for ws in windows:
                lls.append(sum(window[0][0] for window in scored[pos : pos + len(ws)]) if ws else 0.0)
                pos += len(ws)
            return lls
        return [sum(ll for ll, _ in self.score_tokens(ws)) if ws else 0.0 for ws in windows]

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
    Packed, an item's choices are one group (:meth:`LMScorer.score_groups`).
    """
    encoded = [[scorer.encode_pair(ctx, cont) for ctx, cont in zip(item.contexts, item.continuations)]
               for item in items]
    if scorer.packed:
        lls = [[ll for ll, _ in group] for group in scorer.score_groups(encoded)]
    else:
        flat = [ll for ll, _ in scorer.score_tokens([pair for pairs in encoded for pair in pairs])]
        lls, pos = [], 0
        for pairs in encoded:
            lls.append(flat[pos : pos + len(pairs)])
            pos += len(pairs)
    return _choice_metrics(items, encoded, lls, per_item)


def _choice_metrics(items: Sequence[MultipleChoiceItem], encoded: Sequence[Sequence[tuple[list[int], list[int]]]],
                    lls: Sequence[Sequence[float]], per_item: Optional[list]) -> dict[str, float]:
    """:func:`score_multiple_choice`'s metrics from each item's encoded choices and their log-likelihoods."""
    totals = dict.fromkeys(("acc", "acc_norm", "chance", *CONTINUOUS_METRICS), 0.0)
    for item, pairs, item_lls in zip(items, encoded, lls):
        k = len(item.continuations)
        ll = np.array(item_lls)
        n_tokens = np.array([len(cont) for _, cont in pairs], dtype=float)
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


def _gold_texts(items: Sequence[MultipleChoiceItem | GenerationItem]) -> list[str]:
    """Each item's prompt followed by its correct answer (:func:`gold_text_loss`)."""
    texts = []
    for item in items:
        if isinstance(item, MultipleChoiceItem):
            texts.append(item.contexts[item.label] + item.continuations[item.label])
        else:
            texts.append(f"{item.prompt} {item.answers[0]}" if item.answers else item.prompt)
    return texts


def gold_text_loss(scorer: LMScorer, items: Sequence[MultipleChoiceItem | GenerationItem],
                   per_item: Optional[list] = None) -> dict[str, float]:
    """Held-out loss on a task's gold text: each item's prompt followed by its correct answer.

    The texts come from the evaluation package, so they are never a selection candidate nor a rater's
    training row (the reference set of issue #21, chosen before any result: docs/pretraining.md).
    ``ref_nats_per_token`` = -sum log p / tokens (this tokenizer's units); ``ref_bits_per_byte`` =
    -sum log p / ln 2 / UTF-8 bytes, which compares models with different tokenizers.
    """
    texts = _gold_texts(items)
    lls = scorer.loglikelihood_rolling(texts)
    return _gold_metrics(texts, lls, sum(len(scorer.encode(t)) for t in texts), per_item)


def _gold_metrics(texts: Sequence[str], lls: Sequence[float], tokens: int,
                  per_item: Optional[list]) -> dict[str, float]:
    """:func:`gold_text_loss`'s metrics from each text's rolling log-likelihood and the texts' token count."""
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


def score_choices_and_gold_text(scorer: LMScorer, items: Sequence[MultipleChoiceItem],
                                per_item: Optional[list] = None,
                                ref_per_item: Optional[list] = None) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`score_multiple_choice` and :func:`gold_text_loss` of ``items`` from one
    :meth:`LMScorer.score_groups` call (the packed path).

    The gold text is the gold choice's context + continuation, so its rolling window is usually the gold
    choice's own input (``[EOS] + enc(context) + cont`` = ``[EOS] + enc(gold text)``): then it joins the
    item's group, shares its branch, and costs only the logits of the prompt's positions. A window that
    differs (the context's tokens not a prefix of the whole's, or a text longer than the window) is a
    group of its own.
    """
    encoded = [[scorer.encode_pair(ctx, cont) for ctx, cont in zip(item.contexts, item.continuations)]
               for item in items]
    texts = _gold_texts(items)
    tokens = [scorer.encode(t) for t in texts]
    groups = [list(pairs) for pairs in encoded]
    windows_at = []  # per item: (group, member) of each of its gold text's rolling windows
    for g, text_tokens in enumerate(tokens):
        inputs = {tuple(scored[0]) for scored in (scorer._scored(*pair) for pair in encoded[g]) if scored}
        at = []
        for window in scorer.rolling_requests(text_tokens):
            scored = scorer._scored(*window)
            if scored is not None and tuple(scored[0]) in inputs:
                at.append((g, len(groups[g])))
                groups[g].append(window)
            else:
                at.append((len(groups), 0))
                groups.append([window])
        windows_at.append(at)
    scored = scorer.score_groups(groups)
    lls = [[ll for ll, _ in scored[g][: len(pairs)]] for g, pairs in enumerate(encoded)]
    ref_lls = [sum(scored[g][m][0] for g, m in at) if at else 0.0 for at in windows_at]
    return (_choice_metrics(items, encoded, lls, per_item),
            _gold_metrics(texts, ref_lls, sum(len(t) for t in tokens), ref_per_item))


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
