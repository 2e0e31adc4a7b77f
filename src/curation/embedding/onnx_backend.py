"""MiniLM on ONNX Runtime: fp32 and int8, exported offline from the packaged model.

The transformer of the sentence-transformers folder is exported with
``torch.onnx.export`` (TorchScript exporter, opset 17, dynamic batch and
sequence axes) and, for ``quantize: int8``, quantised with ONNX Runtime's
dynamic quantisation. Pooling (attention-masked mean, as the package's
``1_Pooling`` config says) and L2 normalisation are done here in numpy, so the
vectors match ``SentenceTransformer.encode`` to float noise in fp32.

Why not ``SentenceTransformer(..., backend="onnx")``: it needs ``optimum``,
whose release that installs beside transformers 5.x here is the 1.17 line
(2024), and it would pick the quantisation recipe for us. Exporting ourselves
keeps the dependencies to ``onnx`` + ``onnxruntime`` and the recipe explicit.

The int8 recipe (measured on corpus documents, docs/embeddings.md): per-tensor
int8 weights (ORT's default) move vectors by up to 0.14 in 1 - cos; per-channel
weights bring that to ~0.015; keeping the FFN output projections of the
first encoder layer in float (``INT8_RECIPE``) brings it to ~0.01.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from curation.embedding.artifacts import artifact_spec, ensure_artifact, read_manifest, resolve_model_dir
from curation.embedding.config import check_common, finish, prepare_texts

_LIBRARIES = ("torch", "transformers", "onnx", "onnxruntime")
OPSET = 17
# int8 recipe: per-channel symmetric int8 weights, dynamic per-tensor uint8 activations,
# MatMul only (the word-embedding Gather stays float); every MatMul of the first encoder
# layer stays float: measured on 200 corpus documents vs PyTorch (1 - cos max / mean):
# per-tensor 0.144 / 0.059, per-channel 0.015 / 0.006, per-channel + layer 0 float
# 0.0105 / 0.0046 at 1.49x the CPU throughput of PyTorch (excluding the FFN output
# projections too: 0.006 / 0.0025 at 1.18x). docs/embeddings.md has the table.
INT8_RECIPE = {"per_channel": True, "reduce_range": False, "op_types": ["MatMul"],
               "float_scopes": ["/encoder/layer.0/"]}
_SESSIONS: dict[tuple[str, int], object] = {}


def _export_fp32(model_dir: Path, out: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()

    class Encoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    sample = tok(["a short one", "and a somewhat longer second example"], padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    import warnings

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # TorchScript exporter deprecation notice
        torch.onnx.export(Encoder(model), tuple(sample[k] for k in names), str(out / "model.onnx"),
                          input_names=names, output_names=["last_hidden_state"], opset_version=OPSET,
                          dynamic_axes={k: {0: "batch", 1: "seq"} for k in names + ["last_hidden_state"]},
                          dynamo=False)


def _quantize_int8(fp32: Path, out: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.preprocess import quant_pre_process

    pre = out / "pre.onnx"
    quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)
    matmuls = [n.name for n in onnx.load(str(pre)).graph.node if n.op_type == "MatMul"]
    exclude = sorted(n for n in matmuls if any(scope in n for scope in INT8_RECIPE["float_scopes"]))
    if not exclude or len(exclude) == len(matmuls):
        raise RuntimeError(f"int8 recipe: scopes {INT8_RECIPE['float_scopes']} match {len(exclude)} of "
                           f"{len(matmuls)} MatMul nodes; the export's node names changed")
    quantize_dynamic(str(pre), str(out / "model.onnx"), weight_type=QuantType.QInt8,
                     per_channel=INT8_RECIPE["per_channel"], reduce_range=INT8_RECIPE["reduce_range"],
                     op_types_to_quantize=INT8_RECIPE["op_types"], nodes_to_exclude=exclude)
    pre.unlink()


def onnx_spec(model_name: str, quantize: str = "none") -> dict:
    """What the ONNX model is made from (source files, opset, int8 recipe, library versions)."""
    if quantize not in ("none", "int8"):
        raise ValueError(f"quantize must be none or int8, got {quantize!r}")
    params = {"opset": OPSET, "quantize": quantize, **({"int8": INT8_RECIPE} if quantize == "int8" else {})}
    return artifact_spec("onnx", resolve_model_dir(model_name), params, _LIBRARIES)


def build_onnx_model(model_name: str, quantize: str = "none", root: Path | None = None) -> Path:
    """Folder with ``model.onnx`` (fp32 or int8) and the tokenizer files (built if not cached)."""
    model_dir = resolve_model_dir(model_name)
    spec = onnx_spec(model_name, quantize)

    def build(out: Path) -> None:
        import shutil

        if quantize == "none":
            _export_fp32(model_dir, out)
        else:
            fp32 = build_onnx_model(model_name, "none", root)
            _quantize_int8(fp32 / "model.onnx", out)
        for name in ("tokenizer.json", "1_Pooling/config.json", "sentence_bert_config.json"):
            if (model_dir / name).is_file():
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(model_dir / name, out / name)

    return ensure_artifact(spec, build, root)


def _session(path: Path, threads: int):
    key = (str(path), threads)
    if key not in _SESSIONS:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        _SESSIONS[key] = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return _SESSIONS[key]


class OnnxEmbedder:
    """``EmbedderConfig`` contract on ONNX Runtime (CPU execution provider)."""

    def __init__(self, cfg, folder: Path | None = None):
        from tokenizers import Tokenizer

        check_common(cfg)
        if cfg.device not in ("cpu", "auto"):
            raise ValueError(f"backend=onnx runs on the CPU execution provider; device={cfg.device!r} "
                             "(use backend=torch for a GPU)")
        self.cfg = cfg
        root = Path(cfg.artifact_dir) if cfg.artifact_dir else None
        self.folder = Path(folder) if folder is not None else build_onnx_model(cfg.model_name, cfg.quantize, root)
        self.manifest = read_manifest(self.folder) if (self.folder / "manifest.json").is_file() else {}
        pooling = self.folder / "1_Pooling" / "config.json"
        if pooling.is_file() and not json.loads(pooling.read_text()).get("pooling_mode_mean_tokens", False):
            raise ValueError(f"{cfg.model_name}: only mean pooling is implemented for backend=onnx")
        limit = 512
        sbert = self.folder / "sentence_bert_config.json"
        if sbert.is_file():
            limit = int(json.loads(sbert.read_text()).get("max_seq_length", limit))
        self.max_seq_length = cfg.max_seq_length or limit
        self.tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_seq_length)
        self.tokenizer.no_padding()
        self.session = _session(self.folder / "model.onnx", cfg.num_threads)
        width = self.session.get_outputs()[0].shape[-1]
        if isinstance(width, int) and width != cfg.dim:
            raise ValueError(f"{cfg.model_name} gives {width}-d vectors, config says dim={cfg.dim}")
        self._inputs = {i.name for i in self.session.get_inputs()}

    @property
    def dim(self) -> int:
        return self.cfg.dim

    @property
    def artifact(self) -> str:
        return self.manifest.get("artifact", self.folder.name)

    def encode(self, texts: Sequence[str]):
        from tqdm.auto import tqdm

        t0 = time.perf_counter()
        n = len(texts)
        n_empty = sum(1 for t in texts if not t.strip())
        prepared = prepare_texts(texts, self.cfg)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n:
            encs = self.tokenizer.encode_batch(prepared)
            lengths = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=n)
            order = np.argsort(-lengths, kind="stable") if self.cfg.sort_by_length else np.arange(n)
            bs = self.cfg.batch_size
            for s in tqdm(range(0, n, bs), desc="embed (onnx)", unit="batch", disable=not self.cfg.show_progress):
                idx = order[s : s + bs]
                width = int(lengths[idx].max())
                ids = np.zeros((len(idx), width), dtype=np.int64)
                mask = np.zeros((len(idx), width), dtype=np.int64)
                for row, i in enumerate(idx):
                    ids[row, : lengths[i]] = encs[i].ids
                    mask[row, : lengths[i]] = 1
                feed = {"input_ids": ids, "attention_mask": mask}
                if "token_type_ids" in self._inputs:
                    feed["token_type_ids"] = np.zeros_like(ids)
                hidden = self.session.run(None, feed)[0]
                m = mask[..., None].astype(np.float32)
                out[idx] = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return finish(out, self.cfg, n, n_empty, t0)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts).embeddings
