"""Encoder families: an encoder architecture with its config, tokenizer and Hugging Face names.

``BertModule`` builds its encoder through a family looked up by name in the ``register_encoders``
registry (``bertkit plugins`` lists them) or given by class path: ``model.encoder: electra``
(or ``my_package.MyFamily``), or, for a pretrained
directory, the ``model_type`` its ``config.json`` states (as transformers' ``AutoModel`` does).
The core provides ``bert``; plugins add theirs the same way, by subclassing ``EncoderFamily``.
A family's module implements the ``bertkit.model.encoder.Encoder`` protocol (``BertModel`` does);
heads see only that protocol and the tokenizer's template, never a family's internals.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from torch import nn

from bertkit.model.bert import BertModel
from bertkit.model.config import BertConfig, Preset
from bertkit.model.encoder import Encoder, missing_members
from bertkit.model.tokenizer import BertTokenizer
from bertkit.model.weights import pretrained_encoder
from bertkit.plugins import entries, import_class, loaded, registered, stored_class
from bertkit.utils.io import read_json


class EncoderFamily:
    """An encoder architecture: how to build, load and export it (class attributes and methods
    only; registered as a class, by ``name``)."""

    name: ClassVar[str] = "bert"
    """Registry name, and ``config.json``'s ``model_type`` of this family's exports."""
    config_class: ClassVar[type[BertConfig]] = BertConfig
    encoder_class: ClassVar[type[Encoder]] = BertModel
    """The encoder module (``Encoder`` protocol), built from a ``config_class`` (and
    ``add_pooling_layer``)."""
    tokenizer_class: ClassVar[type[BertTokenizer]] = BertTokenizer
    hf_prefix: ClassVar[str] = "bert."
    """Prefix of the encoder's keys in a ``transformers`` task checkpoint (``bert.`` for BERT):
    the rest of such a checkpoint is the task's layers."""
    adapter_targets: ClassVar[tuple[str, ...]] = ("query", "key", "value", "dense")
    """The linear layers that get LoRA adapters when ``model.adapter`` names none: every linear
    layer of the blocks (BERT's query, key and value, the attention's output and both
    feed-forward products, all named ``dense``; the pooler's too). Hu et al. 2021 §4.2 adapt
    query and value alone, which on CoNLL-2003 NER lost 4.3 F1 to full fine-tuning at its budget
    where every linear layer gained 0.6 (``benchmarks/results/lora_parity.json``,
    ``lora_ablation.json``)."""
    hf_token_roles: ClassVar[dict[str, str]] = {}
    """``config.json`` token-id fields of this family's transformers config, by the tokenizer role
    that fills them (``{"bos_token_id": "cls"}``: ``tokenizer.cls_token_id``)."""

    @classmethod
    def hf_architecture(cls, head_architecture: str) -> str | None:
        """This family's ``transformers`` class for a head's (``TransformersExport.hf_architecture``, named for
        BERT: ``BertForTokenClassification`` …), or None when the family has no class with the
        same task layers (the export is then the encoder alone)."""
        return head_architecture if head_architecture.startswith("Bert") else None

    @classmethod
    def hf_renames(cls, architecture: str) -> dict[str, str]:
        """Key prefixes to rename in an export to ``architecture`` (this family's class from
        ``hf_architecture``), where its transformers class names the task layers otherwise than
        BERT's (a family's masked-LM layer under another name than ``cls.predictions.``); empty
        for BERT."""
        return {}

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> tuple[nn.Module, BertTokenizer]:
        """Encoder and tokenizer of a Hugging Face format directory.

        Raises:
            FileNotFoundError, ValueError: see ``BertConfig.from_pretrained`` and
                ``bertkit.model.weights.pretrained_encoder`` (they name the file and keys); a
                ``vocab_size`` smaller than the tokenizer's vocabulary.
        """
        config = cls.config_class.from_pretrained(directory)
        encoder, _ = pretrained_encoder(lambda: cls.encoder_class(config), directory, cls.hf_prefix)
        tokenizer = cls.tokenizer_class.from_pretrained(directory)
        if tokenizer.vocab_size > encoder.config.vocab_size:
            raise ValueError(
                f"{Path(directory) / 'config.json'}: vocab_size {encoder.config.vocab_size} is smaller than the "
                f"tokenizer's {tokenizer.vocab_size} tokens: their ids would index past the embeddings"
            )
        return encoder, tokenizer

    @classmethod
    def fresh(cls, preset: Preset, tokenizer: BertTokenizer) -> nn.Module:
        """A randomly initialised encoder of a standard size for ``tokenizer``'s vocabulary."""
        config = cls.config_class.preset(preset, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id)
        return cls.encoder_class(config)


def encoder_families() -> dict[str, type[EncoderFamily]]:
    """The families by ``name``: the core's ``bert`` and every plugin's (``register_encoders``).

    Raises:
        ValueError: a plugin's family is not an ``EncoderFamily``, takes a name already taken, or
            has an encoder class without the ``Encoder`` members (named).
    """
    families: dict[str, type[EncoderFamily]] = {EncoderFamily.name: EncoderFamily}
    for name, family in registered("register_encoders").items():
        if not (isinstance(family, type) and issubclass(family, EncoderFamily)):
            raise ValueError(f"register_encoders: {family!r} is not a bertkit.model.families.EncoderFamily subclass")
        missing = missing_members(family.encoder_class)
        if missing:
            raise ValueError(
                f"register_encoders: {family.__name__}.encoder_class {family.encoder_class.__name__} lacks "
                f"{', '.join(missing)} (bertkit.model.encoder.Encoder)"
            )
        if name in families:
            raise ValueError(f"register_encoders: a plugin registers {name!r}, the core's own encoder family")
        if family.name != name:
            raise ValueError(f"register_encoders: {family.__name__} registered as {name!r} but named {family.name!r}")
        families[name] = family
    return families


def registered_family(name: str) -> type[EncoderFamily]:
    """The family registered as ``name`` (the core's ``bert``, or a plugin's through
    ``register_encoders``), resolving that one alone: a plugin whose family builds on another
    (subclasses it, and its ``config_class``) takes its base here when its module is imported,
    instead of importing the other plugin. The core's plugins are registered before any other
    distribution's.

    Raises:
        ValueError: no family of that name (the message lists the registered ones), or what is
            registered under it is not an ``EncoderFamily`` subclass.
    """
    if name == EncoderFamily.name:
        return EncoderFamily
    registry = entries("register_encoders")
    if name not in registry:
        known = ", ".join(sorted({EncoderFamily.name, *registry}))
        raise ValueError(f"registered_family({name!r}): no such encoder family; registered: {known}")
    family = loaded(registry[name])
    if not (isinstance(family, type) and issubclass(family, EncoderFamily)):
        raise ValueError(f"register_encoders: {family!r}, registered as {name!r}, is not an EncoderFamily subclass")
    return family


def encoder_family(name: str, field: str = "model.encoder", stored: bool = False) -> type[EncoderFamily]:
    """The family registered as ``name``, or the ``EncoderFamily`` subclass at a dotted class path
    (an unregistered one, as for heads); ``field`` names the setting in errors. A ``stored``
    name (read from a model directory, not given by the user) never imports a module
    (``bertkit.plugins.stored_class``).

    Raises:
        ValueError: no family of that name (the message lists the registered ones), or a class
            path that cannot be imported or is not an ``EncoderFamily``.
    """
    families = encoder_families()
    if name in families:
        return families[name]
    if stored and "." in name:
        return stored_class(name, EncoderFamily, families, field)
    if "." in name:
        try:
            return import_class(name, EncoderFamily)
        except ValueError as err:
            raise ValueError(f"{field}: {err}") from err
    raise ValueError(f"{field}={name!r}: no such encoder family; registered: {', '.join(sorted(families))}")


def family_of(directory: str | Path) -> type[EncoderFamily]:
    """The family of a pretrained directory, by its ``config.json``'s ``model_type`` (``bert``
    when it states none).

    Raises:
        FileNotFoundError: no ``config.json``.
        ValueError: a ``model_type`` no family is registered for.
    """
    path = Path(directory) / "config.json"
    model_type = read_json(path, "no config.json in the model directory").get("model_type", "bert")
    return encoder_family(str(model_type), f"{path}: model_type", stored=True)
