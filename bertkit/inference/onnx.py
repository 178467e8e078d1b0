"""``bertkit export``: a trained checkpoint as a Hugging Face directory (the head's
``transformers`` task class, ``BertModule.save_pretrained``) and as ONNX for inference, checked
against bertkit with onnxruntime before it is kept.

The ONNX graph is ``torch.onnx.export(dynamo=True)`` of the padded encoder and the head: inputs
``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, (batch, sequence), both axes
dynamic), outputs the head's logits (``logits``; ``start_logits`` and ``end_logits`` for
question answering). ``model.onnx`` holds its weights (every BERT size stays under ONNX's 2 GB
limit for one file); a larger model's weights go to ``model.onnx.data`` beside it, written and
moved together with it. Either way the folder can be copied or moved as it is.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from bertkit.tasks.head import exported
from bertkit.training.module import BertModule
from bertkit.utils.io import replace_output

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
ONE_FILE_LIMIT = 1_800_000_000  # bytes of weights kept inside model.onnx (protobuf's limit is 2 GiB)


class _Dropped(logging.Filter):
    def __init__(self, start: str) -> None:
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.start)


@contextmanager
def _quiet_exporters() -> Iterator[None]:
    """Silence the libraries' notes that say nothing about the user's model while they run:
    torch.onnx's "torchvision is not installed. Skipping torchvision::nms" lines, the pytree
    ``LeafSpec`` deprecation, and onnxruntime's advice to pre-process before quantizing (its
    transformer optimizer, which ``quantize_onnx`` runs first, is that pre-processing)."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level, hint = registration.level, _Dropped("Please consider to run pre-processing before quantization")
    registration.setLevel(logging.ERROR)
    logging.getLogger().addFilter(hint)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
            yield
    finally:
        registration.setLevel(level)
        logging.getLogger().removeFilter(hint)


class _Logits(nn.Module):
    """Positional inputs -> the head's logits, on the padded encoder path (static control flow)."""

    def __init__(self, model: BertModule, outputs: list[str]) -> None:
        super().__init__()
        self.model, self.outputs = model, outputs

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        encoded = self.model.encoder(**batch, cls_only=self.model.head.reads_cls_only, unpad=False)
        out = self.model.head(encoded, batch)
        return tuple(out[name] for name in self.outputs)


def _sample(model: BertModule, sizes: tuple[int, int], seed: int) -> dict[str, torch.Tensor]:
    """Random token ids (B, T) with one shorter row, the shapes an exported graph must handle."""
    g = torch.Generator().manual_seed(seed)
    B, T = sizes
    ids = torch.randint(1000, model.tokenizer.vocab_size, (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[-1, T // 2 :] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def export_onnx(model: BertModule, path: str | Path, tolerance: float = 1e-4) -> float:
    """Write ``model`` as ONNX to ``path`` (atomically) after checking it with onnxruntime.

    Returns:
        The largest absolute difference between onnxruntime's and bertkit's logits (fp32) on a
        batch of another shape than the one traced, at real (non-padding) positions.

    Raises:
        ValueError: the head has no per-example or per-token logits to export (pre-training), or
            the check exceeds ``tolerance`` (nothing is written then).
        ImportError: onnxruntime or onnxscript is missing (``pip install bertkit[onnx]``).
    """
    try:
        import onnxruntime
        import onnxscript  # noqa: F401 - torch.onnx's exporter needs it
    except ImportError as err:
        raise ImportError(f"ONNX export needs the onnx extra: pip install 'bertkit[onnx]' ({err})") from None

    outputs = list(exported(model.head).onnx_outputs)
    if not outputs:
        raise ValueError(f"{type(model.head).__name__} has no logits to export to ONNX (use the Hugging Face export)")
    wrapper = _Logits(model.eval().float(), outputs).eval()
    example = _sample(model, (2, 16), seed=0)
    dynamic = {name: {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC} for name in INPUTS}
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    large = sum(p.numel() * p.element_size() for p in wrapper.parameters()) > ONE_FILE_LIMIT
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as folder:
        tmp = Path(folder) / target.name  # the final name: an external data file is named after it
        with _quiet_exporters():
            torch.onnx.export(
                wrapper, tuple(example[k] for k in INPUTS), str(tmp), input_names=list(INPUTS), output_names=outputs,
                dynamic_shapes=dynamic, dynamo=True, verbose=False, external_data=large,
            )  # fmt: skip
        check = _sample(model, (3, 24), seed=1)
        session = onnxruntime.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        got = session.run(outputs, {k: check[k].numpy() for k in INPUTS})
        with torch.no_grad():
            want = wrapper(*(check[k] for k in INPUTS))
        real = check["attention_mask"].bool()
        worst = 0.0
        for name, ours, theirs in zip(outputs, want, got, strict=True):
            diff = (torch.from_numpy(theirs) - ours).abs()
            per_token = ours.dim() == 3 or name != "logits"  # (B, T, C) tags, (B, T) span ends; else (B, C)
            worst = max(worst, float((diff[real] if per_token else diff).max()))
        if worst > tolerance:
            raise ValueError(f"{path}: ONNX logits differ from bertkit's by {worst:.2e} (> {tolerance}); not written")
        for written in sorted(Path(folder).iterdir(), key=lambda p: p == tmp):  # weights first, the graph last
            replace_output(written, target.parent / written.name)
    return worst


def quantize_onnx(source: str | Path, path: str | Path, per_channel: bool = True) -> tuple[int, int]:
    """Write an int8 copy of the ONNX model at ``source`` to ``path`` (atomically): ONNX Runtime's
    transformer graph optimizer first (``onnxruntime.transformers.optimizer``, BERT fusions:
    SkipLayerNormalization, BiasGelu; with it constants are folded, so the query/key/value
    weights that the exported graph concatenates become one initializer that can be quantized:
    without it 6 of MiniLM's 24 weight products stayed fp32), then its dynamic quantization
    (``quantize_dynamic``, ``QInt8`` weights of MatMul/Gemm; activations are quantized per batch
    at run time). ``benchmarks/onnx_int8.py`` and ``benchmarks/inference_vs_transformers.py``
    measure what it changes.

    Args:
        source: an fp32 ``model.onnx`` (``export_onnx``).
        path: where to write the int8 model (``model.int8.onnx``).
        per_channel: one scale per output channel of each weight (the default: closer to fp32 on
            CoNLL-2003 and SST-2 in ``benchmarks/onnx_int8.py``) instead of one per tensor.

    Returns:
        The sizes in bytes of ``source`` and of the int8 model.

    Raises:
        ImportError: onnxruntime or onnx is missing (``pip install 'bertkit[onnx]'``).
    """
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError as err:
        raise ImportError(f"int8 ONNX needs the onnx extra: pip install 'bertkit[onnx]' ({err})") from None
    target = Path(path)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as folder:
        optimized, tmp = Path(folder) / "optimized.onnx", Path(folder) / target.name
        large = Path(f"{source}.data").is_file()  # weights beside the graph: keep them beside it
        with _quiet_exporters():
            optimize_model(str(source), model_type="bert").save_model_to_file(
                str(optimized), use_external_data_format=large
            )
            quantize_dynamic(optimized, tmp, per_channel=per_channel, weight_type=QuantType.QInt8)
        replace_output(tmp, target)
    return Path(source).stat().st_size, target.stat().st_size
