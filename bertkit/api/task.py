"""The task author's tier of the plugin API: a task and its head (a masking strategy and a
pre-training objective too). A task plugin imports from here and from nothing else of ``bertkit``
(``.importlinter`` checks the built-in ones); ``bertkit.api``'s docstring describes each name.
Names are imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertkit.api._tiers import TASK, tier

if TYPE_CHECKING:
    from bertkit.data.collate import pad_batch
    from bertkit.data.samplers import EpochBatchSampler, ProcessBatches, share
    from bertkit.data.samples import cache_dir, sample_files
    from bertkit.data.streaming import StreamedFeatures, fetch_file, is_remote, require_litdata, write_chunks
    from bertkit.data.windows import max_context_window
    from bertkit.hookspecs import hookimpl, hookspec
    from bertkit.model.bert import ACTIVATIONS, EncoderOutput
    from bertkit.model.config import BertConfig
    from bertkit.model.dropout import Dropout, dropout
    from bertkit.model.pretrained import load_tokenizer
    from bertkit.model.tokenizer import SPECIAL_TOKENS, BertTokenizer, Encoded, Inputs, split_words, unspaced_script
    from bertkit.model.weights import truncated_normal_
    from bertkit.plugins import PluginExports, lazy_exports, plugin_hooks, registered, stored_class
    from bertkit.tasks.head import DistillationTarget, Head, TransformersExport
    from bertkit.tasks.loss import mean_over_processes
    from bertkit.tasks.task import (
        Batch,
        BatchOrder,
        BatchSettings,
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

__all__, __getattr__, __dir__ = tier(__name__, TASK)
