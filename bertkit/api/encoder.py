"""The encoder author's tier of the plugin API: an encoder family (its module, configuration,
tokenizer and weights; another registered family to build on, ``registered_family``). An encoder
plugin imports from here and from nothing else of ``bertkit`` (``.importlinter`` checks the
built-in ones); ``bertkit.api``'s docstring describes each name. Names are imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertkit.api._tiers import ENCODER, tier

if TYPE_CHECKING:
    from bertkit.data.samples import cache_dir, sample_files
    from bertkit.hookspecs import hookimpl, hookspec
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
    from bertkit.model.weights import save_encoder, truncated_normal_
    from bertkit.plugins import PluginExports, lazy_exports, plugin_hooks, registered, stored_class
    from bertkit.tasks.task import deprecated_alias
    from bertkit.utils.choices import check_choice
    from bertkit.utils.io import atomic_path, json_lines, read_json, read_text, replace_output, text_lines
    from bertkit.utils.moved import forwarding, renamed
    from bertkit.utils.precision import check_float32
    from bertkit.utils.schema import NonBlank, Schema, Text, parse, parse_json

__all__, __getattr__, __dir__ = tier(__name__, ENCODER)
