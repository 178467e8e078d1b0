"""The plugin API: every name a bertkit plugin may use, in one module.

A plugin (a task, an encoder family, a masking strategy, a command) imports from here and from
nothing else of ``bertkit`` (CI checks it for the built-in plugins: ``.importlinter``); the core
never imports a plugin. Names are imported on first use (PEP 562), so a plugin's registration
module stays cheap to import (``bertkit plugins``, ``bertkit --help``).

- Plugin system: ``hookimpl`` (the hooks are in ``bertkit.hookspecs``), ``PluginExports`` (a
  plugin package's public classes, imported on first use, and the hooks that register them;
  ``lazy_exports`` alone names classes without importing them), ``registered`` and
  ``stored_class`` (a registry's objects; a class named by a file, never imported), and for
  names of an earlier release ``deprecated_alias``, ``forwarding`` and ``renamed``.
- Tasks: ``Task`` (files, labels, features, records), ``Head`` (layers, loss, metrics, export
  keys; ``DistillationTarget``: what a student learns from a teacher), ``mean_over_processes`` (a loss that means the same on any number of processes), ``Feature``, ``Batch``, ``TaskExample``, ``LazyFeatures``, ``by_example``,
  ``task_from_spec``, ``pad_batch``.
- Encoders: ``Encoder`` (the protocol a family's module implements), ``EncoderFamily`` (and
  ``registered_family``: another plugin's family to build on, by its registered name),
  ``BertConfig`` (``Preset``, ``PRESETS``), ``BertModel`` and its parts a family reuses
  (``BertPooler``, ``ACTIVATIONS``, ``first_tokens``, ``check_length``), ``EncoderOutput``,
  ``token_features``, ``Dropout``/``dropout``, the unpadded layout (``Unpadded``) and its
  attention (``varlen_attention``, padded ``attend``, local ``band``), ``save_encoder``.
- Tokenizers: ``BertTokenizer``, ``Encoded``, ``Inputs``, ``SPECIAL_TOKENS``, ``load_tokenizer``;
  ``split_words`` (plain text's words by BERT's basic-tokenizer rules, with offsets),
  ``unspaced_script`` (a word in a script those rules leave whole: Thai, Japanese kana …).
- Files: ``text_lines``, ``json_lines``, ``read_text``, ``read_json``, ``atomic_path``,
  ``replace_output`` (a finished file or folder onto its name, keeping its mode),
  ``sample_files``, ``cache_dir``; ``max_context_window`` (windows of long texts); streamed
  data in litdata chunks (the ``stream`` extra): ``write_chunks``, ``StreamedFeatures``,
  ``fetch_file``, ``is_remote``, ``require_litdata``;
  ``check_choice`` (a setting among a ``Literal``'s values), ``check_float32`` (a number checked in
  the float32 it is used in).
- Typed records: ``Schema`` (a JSON record's declared fields, strict), ``Text``/``NonBlank``,
  ``parse`` (a value checked against a schema or type), ``parse_json``, ``typed_fields`` (a
  ``config.json``'s entries checked against a config dataclass's field types).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertkit.hookspecs import hookimpl
from bertkit.plugins import PluginExports, lazy_exports

if TYPE_CHECKING:
    from bertkit.data.collate import pad_batch
    from bertkit.data.samples import cache_dir, sample_files
    from bertkit.data.streaming import StreamedFeatures, fetch_file, is_remote, require_litdata, write_chunks
    from bertkit.data.windows import max_context_window
    from bertkit.model.bert import (
        ACTIVATIONS,
        BertModel,
        BertPooler,
        EncoderOutput,
        check_length,
        first_tokens,
        token_features,
    )
    from bertkit.model.config import PRESETS, BertConfig, Preset, typed_fields
    from bertkit.model.dropout import Dropout, dropout
    from bertkit.model.encoder import Encoder
    from bertkit.model.families import EncoderFamily, registered_family
    from bertkit.model.pretrained import load_tokenizer
    from bertkit.model.tokenizer import SPECIAL_TOKENS, BertTokenizer, Encoded, Inputs, split_words, unspaced_script
    from bertkit.model.unpadded import Unpadded, attend, band, varlen_attention
    from bertkit.model.weights import save_encoder
    from bertkit.plugins import registered, stored_class
    from bertkit.tasks.head import DistillationTarget, Head
    from bertkit.tasks.loss import mean_over_processes
    from bertkit.tasks.task import (
        Batch,
        Feature,
        LazyFeatures,
        Task,
        TaskExample,
        by_example,
        deprecated_alias,
        task_from_spec,
    )
    from bertkit.utils.choices import check_choice
    from bertkit.utils.io import atomic_path, json_lines, read_json, read_text, replace_output, text_lines
    from bertkit.utils.moved import forwarding, renamed
    from bertkit.utils.precision import check_float32
    from bertkit.utils.schema import NonBlank, Schema, Text, parse, parse_json

_HOME = {
    "ACTIVATIONS": "model.bert",
    "BertModel": "model.bert",
    "BertPooler": "model.bert",
    "EncoderOutput": "model.bert",
    "check_length": "model.bert",
    "first_tokens": "model.bert",
    "token_features": "model.bert",
    "BertConfig": "model.config",
    "PRESETS": "model.config",
    "Preset": "model.config",
    "typed_fields": "model.config",
    "Dropout": "model.dropout",
    "dropout": "model.dropout",
    "Encoder": "model.encoder",
    "EncoderFamily": "model.families",
    "registered_family": "model.families",
    "load_tokenizer": "model.pretrained",
    "SPECIAL_TOKENS": "model.tokenizer",
    "BertTokenizer": "model.tokenizer",
    "Encoded": "model.tokenizer",
    "Inputs": "model.tokenizer",
    "split_words": "model.tokenizer",
    "unspaced_script": "model.tokenizer",
    "Unpadded": "model.unpadded",
    "attend": "model.unpadded",
    "band": "model.unpadded",
    "varlen_attention": "model.unpadded",
    "save_encoder": "model.weights",
    "lazy_exports": "plugins",
    "registered": "plugins",
    "stored_class": "plugins",
    "Head": "tasks.head",
    "DistillationTarget": "tasks.head",
    "mean_over_processes": "tasks.loss",
    "Batch": "tasks.task",
    "Feature": "tasks.task",
    "LazyFeatures": "tasks.task",
    "Task": "tasks.task",
    "TaskExample": "tasks.task",
    "by_example": "tasks.task",
    "deprecated_alias": "tasks.task",
    "task_from_spec": "tasks.task",
    "pad_batch": "data.collate",
    "cache_dir": "data.samples",
    "sample_files": "data.samples",
    "max_context_window": "data.windows",
    "StreamedFeatures": "data.streaming",
    "fetch_file": "data.streaming",
    "is_remote": "data.streaming",
    "require_litdata": "data.streaming",
    "write_chunks": "data.streaming",
    "check_choice": "utils.choices",
    "check_float32": "utils.precision",
    "atomic_path": "utils.io",
    "json_lines": "utils.io",
    "read_json": "utils.io",
    "read_text": "utils.io",
    "replace_output": "utils.io",
    "text_lines": "utils.io",
    "forwarding": "utils.moved",
    "renamed": "utils.moved",
    "NonBlank": "utils.schema",
    "Schema": "utils.schema",
    "Text": "utils.schema",
    "parse": "utils.schema",
    "parse_json": "utils.schema",
}
__all__ = [
    "ACTIVATIONS",
    "atomic_path",
    "attend",
    "band",
    "Batch",
    "BertConfig",
    "BertModel",
    "BertPooler",
    "BertTokenizer",
    "by_example",
    "cache_dir",
    "check_choice",
    "check_float32",
    "check_length",
    "deprecated_alias",
    "DistillationTarget",
    "Dropout",
    "dropout",
    "Encoded",
    "Encoder",
    "EncoderFamily",
    "EncoderOutput",
    "Feature",
    "first_tokens",
    "fetch_file",
    "forwarding",
    "Head",
    "hookimpl",
    "Inputs",
    "is_remote",
    "json_lines",
    "lazy_exports",
    "LazyFeatures",
    "load_tokenizer",
    "max_context_window",
    "mean_over_processes",
    "NonBlank",
    "pad_batch",
    "PluginExports",
    "parse",
    "parse_json",
    "Preset",
    "PRESETS",
    "read_json",
    "read_text",
    "registered",
    "registered_family",
    "renamed",
    "replace_output",
    "require_litdata",
    "sample_files",
    "save_encoder",
    "Schema",
    "SPECIAL_TOKENS",
    "split_words",
    "stored_class",
    "StreamedFeatures",
    "Task",
    "task_from_spec",
    "TaskExample",
    "Text",
    "text_lines",
    "token_features",
    "typed_fields",
    "unspaced_script",
    "Unpadded",
    "varlen_attention",
    "write_chunks",
]
__getattr__ = lazy_exports(__name__, {name: f"bertkit.{module}:{name}" for name, module in _HOME.items()})


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
