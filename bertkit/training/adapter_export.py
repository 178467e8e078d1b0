"""An adapter-trained model (``model.adapter``) as a PEFT adapter folder: ``adapter_config.json``
and ``adapter_model.safetensors`` that ``peft.PeftModel.from_pretrained`` loads over the
transformers class of the head built on the base model (``model.pretrained``), with the
trained head as PEFT's ``modules_to_save``."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bertkit.model.adapters import is_adapter_key, require_peft
from bertkit.model.pretrained import base_model
from bertkit.tasks.head import exported
from bertkit.training.module import BertModule


def save_peft_adapter(model: BertModule, directory: str | Path) -> list[str]:
    """Write ``model``'s adapters and head as a PEFT adapter folder into ``directory``; return
    the head's modules saved whole (``modules_to_save``).

    Load it with::

        base = BertForTokenClassification.from_pretrained(PRETRAINED, num_labels=N)  # the head's class
        model = peft.PeftModel.from_pretrained(base, directory)

    Raises:
        ImportError: peft or transformers is not installed.
        ValueError: the model has no adapters, or its head no transformers class.
    """
    peft = require_peft()
    import transformers

    adapter = model.hparams.get("adapter")
    if not adapter:
        raise ValueError("save_peft_adapter: the model has no adapters (model.adapter)")
    export = exported(model.head)
    head_state = export.hf_state_dict()
    architecture = model.family.hf_architecture(export.hf_architecture) if head_state else None
    if architecture is None:
        raise ValueError(
            f"save_peft_adapter: {type(model.task).__name__} has no transformers class for a {model.family.name} "
            "encoder to load the adapters over"
        )
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, merge_adapters=False)  # the base weights, with the trained head
        hf = getattr(transformers, architecture).from_pretrained(tmp)
    children = {name for name, _ in hf.named_children()}
    head = sorted({key.split(".")[0] for key in head_state} & children)
    config = peft.LoraConfig(
        r=adapter["r"],
        lora_alpha=adapter["alpha"],
        lora_dropout=adapter["dropout"],
        target_modules=adapter["target_modules"],
        use_rslora=adapter.get("use_rslora", False),  # checkpoints from before the setting have none
        modules_to_save=head,
    )
    wrapped = peft.get_peft_model(hf, config)
    # a pooler the head never reads (a tagger's) is in no transformers class of its head: its adapter changes nothing
    unread = () if model.head.reads_pooler else ("pooler.",)
    ours = {k: v for k, v in model.encoder.state_dict().items() if is_adapter_key(k) and not k.startswith(unread)}
    prefix = "base_model.model." + model.family.hf_prefix
    theirs = [k for k in wrapped.state_dict() if is_adapter_key(k)]
    if sorted(k.removeprefix(prefix) for k in theirs) != sorted(ours):
        raise ValueError(
            f"save_peft_adapter: {architecture}'s adapters do not match the model's ({len(theirs)} vs {len(ours)} tensors)"
        )
    unexpected = wrapped.load_state_dict(
        {k: ours[k.removeprefix(prefix)] for k in theirs}, strict=False
    ).unexpected_keys
    if unexpected:
        raise ValueError(f"save_peft_adapter: keys {architecture} does not have: {unexpected[:5]}")
    base = base_model(str(model.hparams.pretrained or ""))  # a registered name no Hub lookup resolves: its repo
    wrapped.peft_config["default"].base_model_name_or_path = base[0] if base else model.hparams.pretrained
    if base and base[1]:
        wrapped.peft_config["default"].revision = base[1]
    wrapped.save_pretrained(str(directory), save_embedding_layers=False)  # the base's embeddings are unchanged
    return head
