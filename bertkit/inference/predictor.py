"""A trained model answering requests in memory: ``Predictor`` turns texts (or JSON records) into
the records ``bertkit predict`` writes, and texts into sentence embeddings. ``bertkit serve``
puts it behind HTTP; a notebook can call it directly."""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bertkit.data.collate import pad_batch
from bertkit.data.samplers import cut_by_tokens
from bertkit.inference.embeddings import embed_texts
from bertkit.inference.onnx import INPUTS as ONNX_INPUTS
from bertkit.model.families import family_of
from bertkit.model.prepacked import prepack_linears, unprepack_linears
from bertkit.model.quantize import quantize_linears
from bertkit.model.tokenizer import BertTokenizer
from bertkit.tasks.head import Head, exported
from bertkit.tasks.task import Batch, Task, predict_batch, renamed_source, task_from_spec
from bertkit.training.module import BertModule
from bertkit.training.trained import SERVING_FILE, load_trained, read_head_weights, serving_config
from bertkit.utils.choices import Backend, Precision
from bertkit.utils.io import read_json
from bertkit.utils.precision import native_bf16

Request = str | dict[str, Any]
"""One input: a line of the head's plain-text format (``bertkit predict`` on a ``.txt`` file), or
one JSON record of its native format (``{"question", "context"}`` for question answering)."""


ONNX_FILES = {"onnx": "model.onnx", "onnx-int8": "model.int8.onnx"}
MAX_TOKENS = 1024
"""``Predictor``'s default token budget per forward pass."""
"""Written by ``bertkit export`` beside ``config.json``: the task (``Task.spec()``) and the
``max_length`` it was trained with, what serving an export needs besides its weights."""


log = logging.getLogger(__name__)


class Predictor:
    """A trained task and head with the tokenizer, the data settings they were trained with and
    what computes the head's outputs: a ``BertModule`` in evaluation mode (``from_model``,
    ``from_checkpoint``, ``from_export``) or onnxruntime on an exported graph (``from_export``).
    It predicts the way ``bertkit predict`` does: ``Task.featurize``, ``pad_batch``, the model,
    then ``predict_batch`` and ``Task.format_predictions``.

    Args:
        task: the trained task (its readers, ``featurize``, ``predict``, ``format_predictions``).
        head: its head (``decode``: a CRF's Viterbi path on the outputs).
        tokenizer: the model's tokenizer.
        forward: a padded batch -> the head's outputs (``logits`` …).
        description: what ``info`` answers (family, head, hidden size, backend).
        max_length: tokens per window, specials included (the checkpoint's ``model.max_length``);
            longer inputs are windowed as ``bertkit predict`` windows them (NER, QA) or
            truncated where the head reads one window.
        max_tokens: tokens per forward pass, padding included (rows x longest row): windows are
            sorted by length and cut into batches within this budget (a longer window runs
            alone), so a batch holds little padding; outputs keep the inputs' order. The default
            was the fastest of 256 to 8,192 for MiniLM on a 2-core CPU, with torch and ONNX
            Runtime; a GPU wants more.
        encoder: the encoder ``embed`` runs (None: no embeddings, as with ONNX).
        device: where batches go.
    """

    def __init__(
        self,
        task: Task,
        head: Head,
        tokenizer: BertTokenizer,
        forward: Callable[[Batch], dict[str, torch.Tensor]],
        description: dict[str, Any],
        max_length: int,
        max_tokens: int = MAX_TOKENS,
        encoder: torch.nn.Module | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.task, self.head, self.tokenizer, self.forward = task, head, tokenizer, forward
        self.description = description
        self.max_length, self.max_tokens, self.encoder, self.device = max_length, max_tokens, encoder, device
        self._prepacked = False  # the encoder's linear layers pre-packed for oneDNN (``prepack``)

    @classmethod
    def from_model(cls, model: BertModule, max_length: int, max_tokens: int = MAX_TOKENS) -> Predictor:
        """A predictor of ``model`` (its head built), put in evaluation mode, reading windows of
        ``max_length`` tokens (the data module's ``max_length`` it was trained with: a model does
        not record it, so there is no default); its layers are left as they are
        (``from_checkpoint`` and ``from_export`` also pack them, ``bertkit.model.prepacked``)."""
        model.eval()
        description = _description(model.family.name, model.task, model.encoder.config.hidden_size, "torch")
        return cls(
            model.task, model.head, model.tokenizer, model, description, max_length, max_tokens, model.encoder,
            model.device,
        )  # fmt: skip

    @classmethod
    def load(
        cls, path: str | Path, max_tokens: int = MAX_TOKENS, device: str = "cpu", backend: Backend = "torch",
        prepack: bool = True,
    ) -> Predictor:  # fmt: skip
        """``from_checkpoint`` of a ``.ckpt`` file, ``from_export`` of a folder."""
        if Path(path).is_dir():
            return cls.from_export(path, max_tokens, device, backend, prepack)
        if backend != "torch":
            raise ValueError(
                f"{path}: the {backend} backend runs an export's ONNX graph; pass a `bertkit export` folder"
            )
        return cls.from_checkpoint(path, max_tokens, device, prepack)

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, max_tokens: int = MAX_TOKENS, device: str = "cpu", prepack: bool = True
    ) -> Predictor:
        """Load a ``bertkit fit`` checkpoint (read as ``BertModule.load_from_checkpoint`` reads it:
        nothing it names is imported) onto ``device`` with its ``model.max_length``; on the CPU the
        encoder's linear layers are pre-packed for oneDNN (``prepack``; ``prepack=False``: a predictor
        that pickles, to hand to another process, which packs it there).

        Raises:
            FileNotFoundError, ValueError: see ``bertkit.training.checkpoints.check_checkpoint``.
        """
        model, max_length = load_trained(path, device, BertModule)
        predictor = cls.from_model(model, max_length, max_tokens)
        return predictor.prepack() if prepack else predictor

    @classmethod
    def from_export(
        cls, folder: str | Path, max_tokens: int = MAX_TOKENS, device: str = "cpu", backend: Backend = "torch",
        prepack: bool = True,
    ) -> Predictor:  # fmt: skip
        """Load a ``bertkit export`` folder: its task from ``bertkit.json`` (registered or
        already-imported tasks only), and either its weights into a ``BertModule`` (``torch``)
        or its ONNX graph into onnxruntime (``onnx``, ``onnx-int8``; of the torch weights only the
        head's own are loaded, to decode the graph's logits, and ``embed`` is not available).

        Raises:
            FileNotFoundError: no ``bertkit.json`` (an export of the encoder alone, or not
                written by ``bertkit export``) or no ONNX file for the backend.
            ValueError: a task bertkit does not know, or one whose trained layer an export does not
                hold (the encoder alone); ImportError: onnxruntime is missing.
        """
        folder = Path(folder)
        if backend == "torch":
            return cls.from_checkpoint(folder, max_tokens, device, prepack)
        config, key = serving_config(folder)
        task = task_from_spec(config[key], f"{folder / SERVING_FILE}: {key}")
        max_length = int(config["max_length"])
        family = family_of(folder)
        tokenizer = family.tokenizer_class.from_pretrained(folder)
        head = task.build_head(family.config_class.from_pretrained(folder), tokenizer)  # it decodes the graph's logits
        read_head_weights(head, folder, family)
        hidden_size = read_json(folder / "config.json", "no config.json")["hidden_size"]
        return cls(
            task, head, tokenizer, OnnxLogits(folder / ONNX_FILES[backend], head, device),
            _description(family.name, task, hidden_size, backend), max_length, max_tokens,
        )  # fmt: skip

    def compile(self, **options: Any) -> Predictor:
        """Compile each encoder block with ``torch.compile(dynamic=True, **options)`` (as
        ``BertModule(compile=True)`` does for training; ``options``: ``backend``, ``mode`` …);
        returns the predictor. The first calls of each new batch shape are slow while
        it compiles; whether it then pays depends on the device (the Results page's speed
        table measures it on a CPU).

        Raises:
            ValueError: an ONNX backend (onnxruntime runs the graph; nothing to compile).
        """
        if self.encoder is None:
            raise ValueError(f"compile needs the torch backend (this predictor runs {self.description['backend']})")
        self._unprepack()  # torch.compile fuses the plain layers
        for block in self.encoder.blocks:
            block.compile(dynamic=True, **options)
        self.description["compiled"] = True
        return self

    def to_bfloat16(self) -> Predictor:
        """Run the torch model in bfloat16, weights and activations (torch's CPU and CUDA kernels
        accumulate LayerNorm, softmax and GELU in fp32); the head's outputs and ``embed``'s
        vectors come back as float32. Where the device computes bf16 natively
        (``bertkit.utils.precision.native_bf16``) the forward pass is faster than in fp32; elsewhere it
        is slower, and a warning says so. The Results page measures the speed and what it
        changes in accuracy; returns the predictor.

        Raises:
            ValueError: an ONNX backend (its graph is fp32 or int8), or a predictor already in int8.
        """
        if self.encoder is None:
            raise ValueError(f"bf16 needs the torch backend (this predictor runs {self.description['backend']})")
        self._check_float32("bf16")
        if not native_bf16(self.device):
            log.warning("bf16 on %s: no native bf16 there, so torch emulates it (slower than fp32)", self.device)
        self._unprepack()
        model = self.forward
        model.to(torch.bfloat16)
        self.forward = lambda batch: {k: _as_float(v) for k, v in model(batch).items()}
        self.description["precision"] = "bf16"
        return self

    def to_int8(self) -> Predictor:
        """Run the encoder's linear layers in int8 (``bertkit.model.quantize``: weights per output
        channel, inputs per call; embeddings, attention, LayerNorm and the head stay float32).
        CPU only. The Results page measures its speed and the accuracy it changes; returns the
        predictor.

        Raises:
            ValueError: an ONNX backend (``onnx-int8`` is its int8), a model not on the CPU, or a
                predictor already in bf16 or compiled (compile after ``to_int8``).
        """
        if self.encoder is None:
            raise ValueError(f"int8 needs the torch backend (this predictor runs {self.description['backend']})")
        self._check_float32("int8")
        if self.description.get("compiled"):
            raise ValueError("int8 replaces the compiled layers: call to_int8 before compile")
        self._unprepack()
        quantize_linears(self.encoder)
        self.description["precision"] = "int8"
        return self

    def in_precision(self, precision: Precision) -> Predictor:
        """The predictor in ``precision``: ``fp32`` as loaded, ``bf16`` (``to_bfloat16``) or
        ``int8`` (``to_int8``); raises what those raise."""
        return {"fp32": lambda: self, "bf16": self.to_bfloat16, "int8": self.to_int8}[precision]()

    def prepack(self) -> Predictor:
        """Pack the float32 encoder's linear layers for oneDNN on the CPU (``bertkit.model.prepacked``:
        the same float32 values, faster products); returns the predictor. ``from_checkpoint`` and
        ``from_export`` call it; call it on a predictor ``from_model`` made only where its model is
        used for nothing else (packing replaces its layers), or on one loaded with
        ``prepack=False`` once it is where it runs (a packed predictor does not pickle). A second
        call, a device other than the CPU or an ONNX backend change nothing."""
        if self.encoder is not None and not self._prepacked and torch.device(self.device).type == "cpu":
            self._prepacked = prepack_linears(self.encoder) > 0
        return self

    def _unprepack(self) -> None:
        """Undo ``prepack`` before another conversion (bf16, int8, compile) replaces the layers."""
        if self._prepacked:
            unprepack_linears(self.encoder)
            self._prepacked = False

    def _check_float32(self, precision: str) -> None:
        """Raise ValueError unless the model is still in float32 (bf16 and int8 each start from it)."""
        if "precision" in self.description:
            raise ValueError(
                f"{precision} converts the float32 model, and this predictor already runs "
                f"{self.description['precision']}: load it again"
            )

    def info(self) -> dict[str, Any]:
        """What a client needs to know: family, head and its settings, max length, hidden size,
        backend."""
        return {**self.description, "max_length": self.max_length}

    def examples(self, inputs: list[Request]) -> list[Any]:
        """The task's examples of ``inputs``, one each, in order: texts through
        ``Task.read_text_lines`` (as lines of a file named ``inputs``), records through
        ``Task.read`` (the task's native format).

        Raises:
            ValueError: an input the task cannot read (the message names ``inputs[i]`` or
                ``inputs:i``), or a mix of texts and records.
        """
        task = self.task
        if all(isinstance(x, str) for x in inputs):
            check_texts(inputs)
            for i, text in enumerate(inputs):
                if "\n" in text or "\r" in text:
                    raise ValueError(f"inputs[{i}]: one line per input (the text has a line break)")
            examples = task.read_text_lines(Path("inputs"), enumerate(inputs, 1))  # sources inputs:1 …
        elif all(isinstance(x, dict) for x in inputs):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "inputs.jsonl"
                path.write_text("".join(json.dumps(x) + "\n" for x in inputs), encoding="utf-8")
                try:
                    examples = [renamed_source(e, str(path), "inputs") for e in task.read(path, labelled=False)]
                except ValueError as err:
                    raise ValueError(str(err).replace(str(path), "inputs")) from None
        else:
            raise ValueError("inputs: all texts (strings) or all records (JSON objects), not a mix")
        if len(examples) != len(inputs):
            raise ValueError(f"inputs: {type(task).__name__} read {len(examples)} examples from {len(inputs)} inputs")
        return examples

    def least_tokens(self, texts: list[str]) -> int:
        """A lower bound of the tokens featurizing ``texts`` makes (specials and window overlaps
        not counted), from their token counts (``BertTokenizer.count_tokens``, in Rust, no window
        built): each text's whole count where the task reads all of a long text (``Task.windowed``),
        else at most ``max_length`` of it (the task truncates)."""
        counts = self.tokenizer.count_tokens(texts)
        return sum(counts) if self.task.windowed else sum(min(n, self.max_length) for n in counts)

    def predict(self, inputs: list[Request]) -> list[dict[str, Any]]:
        """One record per input, as ``bertkit predict`` writes them (entities with character
        offsets, labels with probabilities, answers …).

        Raises:
            ValueError: see ``examples``.
        """
        return self.predict_examples([self.examples(inputs)])[0]

    def featurize(self, examples: list[Any]) -> Featurized:
        """The task's features of ``examples`` (windows of long ones), ready for ``predict_featurized``;
        ``Featurized.tokens`` says how much work they are."""
        return Featurized(examples, list(self.task.featurize(examples, self.tokenizer, self.max_length)))

    def predict_examples(self, groups: list[list[Any]]) -> list[list[dict[str, Any]]]:
        """The records of each group of the task's examples (from ``examples``); see
        ``predict_featurized``."""
        return self.predict_featurized([self.featurize(examples) for examples in groups])

    @torch.inference_mode()
    def predict_featurized(self, groups: list[Featurized]) -> list[list[dict[str, Any]]]:
        """The records of each group of featurized examples. Each group was featurized on its own,
        so no group is another's context (the requests ``bertkit serve`` runs together); their
        features are batched together, longest first, within ``max_tokens``."""
        task, tokenizer, device = self.task, self.tokenizer, self.device
        features: list[dict[str, Any]] = []
        starts = [0]
        for group in groups:  # example_index counts over all groups
            offset = starts[-1]
            features += [{**f, "example_index": f["example_index"] + offset} for f in group.features]
            starts.append(offset + len(group.examples))
        lengths = [len(f["input_ids"]) for f in features]
        longest_first = sorted(range(len(features)), key=lambda i: -lengths[i])
        predictions: list[dict[str, Any]] = []  # they name their example: format_predictions joins them
        for rows in cut_by_tokens(longest_first, lengths, self.max_tokens, padded=True):
            batch = pad_batch([features[i] for i in rows], tokenizer.pad_token_id, task.pad_values)
            batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            predictions += predict_batch(task, self.head, self.forward(batch), batch)
        records = []
        for group, (start, end) in zip(groups, itertools.pairwise(starts), strict=True):
            own = [
                {**p, "example_index": p["example_index"] - start}
                for p in predictions
                if start <= p["example_index"] < end
            ]
            records.append(task.format_predictions(group.examples, own))
        return records

    @torch.inference_mode()
    def embed(self, texts: list[str], normalize: bool = True) -> list[list[float]]:
        """Mean-pooled last-layer vectors (sentence-transformers' pooling), L2-normalised unless
        ``normalize`` is False; texts longer than ``max_length`` tokens are truncated.

        Raises:
            ValueError: an empty text (names ``inputs[i]``); an ONNX backend (no encoder).
        """
        check_texts(texts)
        if self.encoder is None:
            raise ValueError(f"embeddings need the torch backend (this predictor runs {self.description['backend']})")
        batch_size = max(1, self.max_tokens // self.max_length)
        vectors, _, _ = embed_texts(
            self.encoder, self.tokenizer, texts, max_length=self.max_length, batch_size=batch_size
        )
        stacked = torch.stack(vectors).float()  # (N, H)
        if normalize:
            stacked = torch.nn.functional.normalize(stacked, dim=-1)
        return stacked.tolist()


def _as_float(value: Any) -> Any:
    """A floating-point tensor as float32; anything else as it is."""
    return value.float() if isinstance(value, torch.Tensor) and value.is_floating_point() else value


@dataclasses.dataclass(frozen=True)
class Featurized:
    """A group of a task's examples and their features (``Predictor.featurize``)."""

    examples: list[Any]
    features: list[dict[str, Any]]

    @property
    def tokens(self) -> int:
        """Tokens of all the features (windows), special tokens included: the work they are."""
        return sum(len(f["input_ids"]) for f in self.features)


def check_texts(texts: list[str]) -> None:
    """Raises ValueError naming ``inputs[i]``, the first empty (or whitespace-only) text."""
    empty = next((i for i, text in enumerate(texts) if not text.strip()), None)
    if empty is not None:
        raise ValueError(f"inputs[{empty}]: empty text")


class OnnxLogits:
    """A padded batch -> the head's logits from onnxruntime on an exported graph (inputs
    ``input_ids``, ``attention_mask``, ``token_type_ids``; outputs ``TransformersExport.onnx_outputs``).

    Raises:
        FileNotFoundError: no such file; ImportError: onnxruntime is missing.
    """

    def __init__(self, path: Path, head: Head, device: str = "cpu") -> None:
        try:
            import onnxruntime
        except ImportError as err:
            raise ImportError(f"the ONNX backends need the onnx extra: pip install 'bertkit[onnx]' ({err})") from None
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: no such file; `bertkit export` writes it (--int8 true for model.int8.onnx)"
            )
        cuda = str(device).startswith("cuda") and "CUDAExecutionProvider" in onnxruntime.get_available_providers()
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]
        self.session = onnxruntime.InferenceSession(str(path), providers=providers)
        self.outputs = list(exported(head).onnx_outputs)

    def __call__(self, batch: Batch) -> dict[str, torch.Tensor]:
        feed = {k: batch[k].cpu().numpy() for k in ONNX_INPUTS}
        return dict(zip(self.outputs, (torch.from_numpy(a) for a in self.session.run(self.outputs, feed)), strict=True))


def _description(family: str, task: Task, hidden_size: int, backend: Backend) -> dict[str, Any]:
    settings = dict(task.hparams)
    return {
        "family": family,
        "task": type(task).__name__,
        "task_settings": settings,
        "fields": list(task.request_fields),
        "hidden_size": hidden_size,
        "backend": backend,
    }
