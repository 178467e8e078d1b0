"""The application author's tier: what a command over trained models, checkpoints and recipes
needs (``bertkit serve``, ``export``, ``embed`` and ``tune`` are written against it alone, as
``.importlinter`` checks): ``compose`` (a recipe's model, data and trainer), ``BertModule`` and
``load_trained`` (a checkpoint or export folder's model), ``Predictor`` (batched prediction the way
``bertkit predict`` does it), ``load_adapters`` (several LoRA checkpoints over one encoder),
``export_onnx``, ``embed_texts``, the choices commands take (``Backend``, ``Precision`` …), and the
files and records every plugin uses. Names are imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertkit.api._tiers import APP, tier

if TYPE_CHECKING:
    from bertkit.cli.guide import load_yaml
    from bertkit.cli.recipe import compose
    from bertkit.data.samples import cache_dir, sample_files
    from bertkit.data.streaming import require_litdata
    from bertkit.hookspecs import hookimpl, hookspec
    from bertkit.inference.adapter_set import DEFAULT as DEFAULT_ADAPTER
    from bertkit.inference.adapter_set import load_adapters
    from bertkit.inference.embeddings import PART_LINES, embed_texts, read_parts
    from bertkit.inference.onnx import export_onnx, quantize_onnx
    from bertkit.inference.predictor import MAX_TOKENS, Featurized, Predictor, check_texts
    from bertkit.model.adapters import LORA_INSTALL
    from bertkit.model.config import MAX_LENGTH
    from bertkit.model.families import family_of
    from bertkit.model.prepacked import prepack_linears
    from bertkit.model.pretrained import base_model, declared_max_length, resolve_pretrained
    from bertkit.model.quantize import quantize_linears
    from bertkit.plugins import PluginExports, lazy_exports, plugin_hooks, registered, stored_class
    from bertkit.tasks.head import calibrates, exported
    from bertkit.tasks.task import deprecated_alias
    from bertkit.training.adapter_export import save_peft_adapter
    from bertkit.training.checkpoints import load_checkpoint
    from bertkit.training.module import BertModule
    from bertkit.training.trained import (
        load_trained,
        run_validation_data,
        save_serving_config,
        stored_max_length,
        validation_outputs,
    )
    from bertkit.utils.choices import Backend, Features, Pooling, Precision, Pruner, check_choice
    from bertkit.utils.io import (
        atomic_dir,
        atomic_path,
        file_names,
        json_lines,
        read_json,
        read_text,
        replace_output,
        text_lines,
    )
    from bertkit.utils.moved import forwarding, renamed
    from bertkit.utils.precision import check_float32
    from bertkit.utils.schema import NonBlank, Schema, Text, parse, parse_json

__all__, __getattr__, __dir__ = tier(__name__, APP)
