"""The plugin API: every name a bertkit task or encoder plugin may use, in one module, and its
tiers, each what one kind of author needs:

- ``bertkit.api.task``: a task and its head (and a masking strategy, an objective);
- ``bertkit.api.encoder``: an encoder family (its module, configuration, tokenizer, weights);
- ``bertkit.api.app``: a command over trained models, checkpoints and recipes (``bertkit serve``
  and the other built-in commands are written against it).

``bertkit.api`` itself holds the task and encoder tiers together. A plugin imports from its tier
(or from here) and from nothing else of ``bertkit``; CI checks each built-in plugin and the
built-in commands against their tier (``.importlinter``), and the core never imports a plugin.
Names are imported on first use (PEP 562), so a plugin's registration module stays cheap to
import (``bertkit plugins``, ``bertkit --help``).

- Plugin system: ``hookimpl`` (the hooks are in ``bertkit.hookspecs``; ``hookspec`` and
  ``plugin_hooks`` for hooks a plugin declares itself, ``add_hookspecs``), ``PluginExports`` (a
  plugin package's public classes, imported on first use, and the hooks that register them;
  ``lazy_exports`` alone names classes without importing them), ``registered`` and
  ``stored_class`` (a registry's objects; a class named by a file, never imported), and for
  names of an earlier release ``deprecated_alias``, ``forwarding`` and ``renamed``.
- Tasks: ``Task`` (files, labels, features, records), ``Head`` (layers, loss, metrics;
  ``DistillationTarget``: what a student learns from a teacher), ``TransformersExport`` (the
  optional protocol of a head that a transformers class computes: its export keys, config
  entries, ONNX outputs), ``mean_over_processes`` (a loss that means the same on any number of processes), ``Feature``, ``Batch``, ``TaskExample``, ``LazyFeatures``, ``by_example``,
  ``task_from_spec``, ``pad_batch``; a task that batches its own way (``Task.batch_order``):
  ``BatchSettings`` (what it is told), ``BatchOrder`` (what it gives), ``EpochBatchSampler`` (a
  training order drawn from ``seed + epoch``, resumable inside an epoch), ``ProcessBatches`` (one
  process's batches of it) and ``share`` (a process's part of a global batch).
- Encoders: ``Encoder`` (the protocol a family's module implements), ``EncoderFamily`` (and
  ``registered_family``: another plugin's family to build on, by its registered name),
  ``BertConfig`` (``Preset``, ``PRESETS``), ``BertModel`` and its parts a family reuses
  (``BertPooler``, ``ACTIVATIONS``, ``first_tokens``, ``check_length``), ``EncoderOutput``,
  ``token_features``, ``Dropout``/``dropout``, the unpadded layout (``Unpadded``) and its
  attention (``varlen_attention``, padded ``attend``, local ``band``), ``save_encoder``,
  ``truncated_normal_`` (BERT's weight initialisation: a normal truncated at 2 std, redrawn).
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

from bertkit.api._tiers import ENCODER, TASK, tier

if TYPE_CHECKING:
    from bertkit.api.encoder import *  # noqa: F403
    from bertkit.api.task import *  # noqa: F403

__all__, __getattr__, __dir__ = tier(__name__, [*TASK, *ENCODER])
