"""An lm-evaluation-harness model wrapper, so the standard harness can run on our checkpoints.

Importing this module imports ``lm_eval`` (not a dependency of this project;
``curation.evaluation`` does not import this module). With lm-eval installed
and its datasets reachable:

    import lm_eval
    from curation.evaluation.harness import CurationLM
    lm = CurationLM(pretrained="runs/tiny", tokenizer="runs/tokenizer.json")
    lm_eval.simple_evaluate(model=lm, tasks=["hellaswag"])

or on the command line, after ``import curation.evaluation.harness`` has
registered the name (e.g. from a small script): ``model="curation"`` with
``model_args="pretrained=runs/tiny,tokenizer=runs/tokenizer.json"``.

The three request types are answered by :class:`~curation.evaluation.scoring.LMScorer`,
so the harness and our own :func:`~curation.evaluation.evaluate` score identically.
"""

from __future__ import annotations

import os
from typing import Any, Optional

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
except ImportError as exc:  # fail at import, naming the fix
    raise ImportError(
        "curation.evaluation.harness needs lm-evaluation-harness: pip install lm_eval"
    ) from exc

from curation.evaluation.scoring import LMScorer
from curation.lm.tokenizer import load_tokenizer
from curation.lm.train import load_model

DEFAULT_UNTIL = ("\n\n",)
DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's HFLM default


@register_model("curation")
class CurationLM(LM):
    """lm-eval ``LM`` over a model folder written by :func:`curation.lm.train.train`.

    pretrained: folder with model.pt + config.json (or a loaded CausalLM).
    tokenizer: path of the tokenizer.json (or a loaded ``tokenizers.Tokenizer``).
    """

    def __init__(
        self,
        pretrained: Any,
        tokenizer: Any,
        batch_size: int | str = 16,
        prepend_eos: bool | str = True,
        max_length: Optional[int] = None,
        **kwargs: Any,  # the harness passes device / max_batch_size; this model runs on CPU
    ):
        super().__init__()
        model = load_model(pretrained) if isinstance(pretrained, (str, os.PathLike)) else pretrained
        tok = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else tokenizer
        if isinstance(prepend_eos, str):
            prepend_eos = prepend_eos.lower() in ("1", "true", "yes")
        batch = int(batch_size) if str(batch_size).isdigit() else 16  # "auto" -> 16
        self.scorer = LMScorer(model, tok, batch_size=batch, prepend_eos=prepend_eos, max_length=max_length)

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self.scorer.loglikelihood([tuple(r.args) for r in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        return self.scorer.loglikelihood_rolling([r.args[0] for r in requests])

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        outputs = []
        for r in requests:
            context, gen_kwargs = r.args
            until = gen_kwargs.get("until", DEFAULT_UNTIL)
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            outputs.append(self.scorer.generate_until([context], until, max_new)[0])
        return outputs
