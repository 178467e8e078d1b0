"""Where each name of the API tiers lives, and the tiers themselves (``bertkit.api.task``,
``bertkit.api.encoder``, ``bertkit.api.app``; ``bertkit.api``: the task and encoder tiers
together). A tier's names are imported on first use (PEP 562), from their modules here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from bertkit.plugins import lazy_exports

HOME = {
    **dict.fromkeys(["hookimpl", "hookspec"], "hookspecs"),
    **dict.fromkeys(["PluginExports", "lazy_exports", "plugin_hooks", "registered", "stored_class"], "plugins"),
    **dict.fromkeys(["deprecated_alias"], "tasks.task"),
    **dict.fromkeys(["forwarding", "renamed"], "utils.moved"),
    **dict.fromkeys(
        [
            "atomic_dir",
            "atomic_path",
            "file_names",
            "json_lines",
            "read_json",
            "read_text",
            "replace_output",
            "text_lines",
        ],
        "utils.io",
    ),
    **dict.fromkeys(["cache_dir", "sample_files"], "data.samples"),
    **dict.fromkeys(["Backend", "Features", "Pooling", "Precision", "Pruner", "check_choice"], "utils.choices"),
    **dict.fromkeys(["check_float32"], "utils.precision"),
    **dict.fromkeys(["NonBlank", "Schema", "Text", "parse", "parse_json"], "utils.schema"),
    # tasks
    **dict.fromkeys(["DistillationTarget", "Head", "TransformersExport", "calibrates", "exported"], "tasks.head"),
    **dict.fromkeys(["mean_over_processes"], "tasks.loss"),
    **dict.fromkeys(
        ["Batch", "Feature", "LazyFeatures", "Task", "TaskExample", "by_example", "task_from_spec"], "tasks.task"
    ),
    **dict.fromkeys(["BatchOrder", "BatchSettings"], "tasks.task"),
    **dict.fromkeys(["EpochBatchSampler", "ProcessBatches", "share"], "data.samplers"),
    **dict.fromkeys(["pad_batch"], "data.collate"),
    **dict.fromkeys(["max_context_window"], "data.windows"),
    **dict.fromkeys(
        ["StreamedFeatures", "fetch_file", "is_remote", "require_litdata", "write_chunks"], "data.streaming"
    ),
    # encoders and tokenizers
    **dict.fromkeys(
        ["ACTIVATIONS", "BertModel", "BertPooler", "EncoderOutput", "check_length", "first_tokens", "token_features"],
        "model.bert",
    ),
    **dict.fromkeys(["BertConfig", "MAX_LENGTH", "PRESETS", "Preset", "typed_fields"], "model.config"),
    **dict.fromkeys(["Dropout", "dropout"], "model.dropout"),
    **dict.fromkeys(["Encoder"], "model.encoder"),
    **dict.fromkeys(["EncoderFamily", "family_of", "registered_family"], "model.families"),
    **dict.fromkeys(["base_model", "declared_max_length", "load_tokenizer", "resolve_pretrained"], "model.pretrained"),
    **dict.fromkeys(
        ["SPECIAL_TOKENS", "BertTokenizer", "Encoded", "Inputs", "split_words", "unspaced_script"], "model.tokenizer"
    ),
    **dict.fromkeys(["Unpadded", "attend", "band", "varlen_attention"], "model.unpadded"),
    **dict.fromkeys(["save_encoder", "truncated_normal_"], "model.weights"),
    # applications
    **dict.fromkeys(["LORA_INSTALL"], "model.adapters"),
    **dict.fromkeys(["prepack_linears"], "model.prepacked"),
    **dict.fromkeys(["quantize_linears"], "model.quantize"),
    **dict.fromkeys(["BertModule"], "training.module"),
    **dict.fromkeys(["load_checkpoint"], "training.checkpoints"),
    **dict.fromkeys(
        ["load_trained", "run_validation_data", "save_serving_config", "stored_max_length", "validation_outputs"],
        "training.trained",
    ),
    **dict.fromkeys(["save_peft_adapter"], "training.adapter_export"),
    **dict.fromkeys(["MAX_TOKENS", "Featurized", "Predictor", "check_texts"], "inference.predictor"),
    **dict.fromkeys(["export_onnx", "quantize_onnx"], "inference.onnx"),
    **dict.fromkeys(["PART_LINES", "embed_texts", "read_parts"], "inference.embeddings"),
    **dict.fromkeys(["DEFAULT_ADAPTER", "load_adapters"], "inference.adapter_set"),
    **dict.fromkeys(["compose"], "cli.recipe"),
    **dict.fromkeys(["load_yaml"], "cli.guide"),
}
"""Each name's module under ``bertkit``."""

ATTRIBUTE = {"DEFAULT_ADAPTER": "DEFAULT"}
"""Names a tier gives an attribute of another name in its module."""

EVERY_PLUGIN = (
    "hookimpl", "hookspec", "plugin_hooks", "PluginExports", "lazy_exports", "registered", "stored_class", "deprecated_alias", "forwarding",
    "renamed", "atomic_path", "json_lines", "read_json", "read_text", "replace_output", "text_lines", "cache_dir",
    "sample_files", "check_choice", "check_float32", "NonBlank", "Schema", "Text", "parse", "parse_json",
)  # fmt: skip
"""What any plugin author needs: hooks and registries, names of an earlier release, files, checked
settings and typed records."""

TOKENIZERS = (
    "BertTokenizer", "Encoded", "Inputs", "SPECIAL_TOKENS", "load_tokenizer", "split_words", "unspaced_script",
)  # fmt: skip

TASK = (
    *EVERY_PLUGIN, *TOKENIZERS, "Task", "Head", "DistillationTarget", "TransformersExport", "mean_over_processes", "Feature", "Batch",
    "TaskExample", "LazyFeatures", "by_example", "task_from_spec", "pad_batch", "max_context_window", "BatchOrder",
    "BatchSettings", "EpochBatchSampler", "ProcessBatches", "share",
    "write_chunks", "StreamedFeatures", "fetch_file", "is_remote", "require_litdata", "BertConfig",
    "EncoderOutput", "Dropout", "dropout", "ACTIVATIONS", "truncated_normal_",
)  # fmt: skip
"""``bertkit.api.task``: a task and its head."""

ENCODER = (
    *EVERY_PLUGIN, *TOKENIZERS, "Encoder", "EncoderFamily", "registered_family", "BertConfig", "Preset", "PRESETS",
    "typed_fields", "BertModel", "BertPooler", "ACTIVATIONS", "first_tokens", "check_length", "EncoderOutput",
    "token_features", "Dropout", "dropout", "Unpadded", "varlen_attention", "attend", "band", "save_encoder",
    "truncated_normal_",
)  # fmt: skip
"""``bertkit.api.encoder``: an encoder family (its module, configuration, tokenizer, weights)."""

APP = (
    *EVERY_PLUGIN, "atomic_dir", "file_names", "Backend", "Features", "Pooling", "Precision", "Pruner", "compose",
    "load_yaml", "BertModule", "load_checkpoint", "load_trained", "save_serving_config", "stored_max_length",
    "save_peft_adapter", "Predictor", "MAX_TOKENS", "Featurized", "check_texts", "export_onnx", "quantize_onnx", "embed_texts",
    "read_parts", "PART_LINES", "load_adapters", "DEFAULT_ADAPTER", "resolve_pretrained", "declared_max_length", "base_model",
    "family_of", "exported", "calibrates", "run_validation_data", "validation_outputs", "quantize_linears",
    "prepack_linears", "LORA_INSTALL", "require_litdata", "MAX_LENGTH",
)  # fmt: skip
"""``bertkit.api.app``: a command (``bertkit serve``, ``export``, ``embed``, ``tune`` …) over
trained models, checkpoints and recipes."""


def tier(module: str, names: Iterable[str]) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """A tier module's ``__all__``, ``__getattr__`` (each name imported on first use) and
    ``__dir__``."""
    names = sorted(set(names), key=str.lower)
    getattr_ = lazy_exports(module, {n: f"bertkit.{HOME[n]}:{ATTRIBUTE.get(n, n)}" for n in names})
    return names, getattr_, lambda: list(names)
