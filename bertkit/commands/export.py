"""``bertkit export``: a checkpoint as a transformers folder and ONNX. The signature and docstring are
the command's options and help (jsonargparse); torch is imported when the command runs."""

from __future__ import annotations

import logging
from importlib.util import find_spec
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def export(
    checkpoint: str,
    output: str,
    onnx: bool | None = None,
    int8: bool = False,
    adapter: bool = False,
    calibrate: bool | None = None,
) -> None:
    """Export a ``bertkit fit`` checkpoint for inference: a transformers directory and ONNX.

    ``OUTPUT`` becomes a Hugging Face directory that the head's ``transformers`` class loads
    (``BertForTokenClassification`` …, with ``id2label``), with a model card (``README.md``: the
    base model, labels, the run's test scores, the training settings and how to load it), plus
    ``model.onnx`` checked against bertkit with onnxruntime.

    Args:
        checkpoint: a ``.ckpt`` file (``runs/ner/checkpoints/last.ckpt`` …).
        output: the directory to write: the export is written into a new folder beside it, which
            then replaces it whole (an earlier export there is removed; a folder that is not a
            model folder is refused).
        onnx: also write ``model.onnx`` (needs ``pip install 'bertkit[onnx]'``); unset: when
            the onnx extra is installed and the head has logits to export.
        int8: also write ``model.int8.onnx``, its weights quantized to int8 (ONNX Runtime's
            dynamic quantization: about a third of the size; the Results page gives the
            accuracy it costs on CoNLL-2003 and SST-2).
        adapter: with ``model.adapter`` (LoRA), also write ``OUTPUT/adapter``: a PEFT adapter
            folder (the adapters, and the head as ``modules_to_save``) that
            ``peft.PeftModel.from_pretrained`` loads over the head's transformers class built on
            ``model.pretrained``. ``OUTPUT`` itself holds the merged model either way.
        calibrate: let the head adjust itself for its ``transformers`` class's own decoding, from
            the run's validation set, without changing what bertkit decodes
            (``TransformersExport.hf_calibrate``: a CRF tagger fits its emission biases for the
            plain ``token-classification`` pipeline); unset: when the head does so and the
            run's validation data is where the run read it; true: a missing validation set is
            an error. A calibrated export's logits are the checkpoint's plus what the head
            fitted (a CRF tagger: one bias per tag); ``false`` keeps them as trained.
    """
    from bertkit.api.app import (
        BertModule,
        atomic_dir,
        export_onnx,
        exported,
        load_checkpoint,
        quantize_onnx,
        save_serving_config,
        stored_max_length,
    )
    from bertkit.commands.card import model_card

    model = BertModule.load_from_checkpoint(checkpoint, map_location="cpu")
    if onnx is None and exported(model.head).onnx_outputs:
        onnx = int8 or (find_spec("onnxruntime") is not None and find_spec("onnxscript") is not None)
        if not onnx:
            print("no model.onnx: the onnx extra is not installed (pip install 'bertkit[onnx]'; --onnx false skips it)")
    if int8 and not onnx:
        raise ValueError("--int8 true quantizes model.onnx: it needs --onnx true (or unset)")
    stored = load_checkpoint(checkpoint, mmap=True)
    written = [line for line in [calibrated(model, stored, checkpoint, calibrate)] if line]
    with atomic_dir(output) as folder:  # the folder holds this export alone, or the one before it
        architecture = model.save_pretrained(folder)
        if architecture != model.encoder.config.to_dict()["architectures"][0]:  # the task layers are in: servable
            save_serving_config(model, folder, stored_max_length(stored, checkpoint))
        card = model_card(model, architecture, checkpoint, stored, Path(output))
        (folder / "README.md").write_text(card, encoding="utf-8")
        written.append(f"wrote {output} ({architecture})")
        if adapter:
            from bertkit.api.app import save_peft_adapter

            head = save_peft_adapter(model, folder / "adapter")
            written.append(f"wrote {Path(output) / 'adapter'} (PEFT: the adapters, and {', '.join(head)} whole)")
        if onnx:
            worst = export_onnx(model, folder / "model.onnx")
            written.append(f"wrote {Path(output) / 'model.onnx'} (onnxruntime vs bertkit: max |diff| {worst:.1e})")
        if int8:
            before, after = quantize_onnx(folder / "model.onnx", folder / "model.int8.onnx")
            written.append(
                f"wrote {Path(output) / 'model.int8.onnx'} ({after / 1e6:.1f} MB; model.onnx {before / 1e6:.1f} MB)"
            )
    print("\n".join(written))


def calibrated(model: Any, stored: dict[str, Any], checkpoint: str, calibrate: bool | None) -> str:
    """``hf_calibrate`` of ``model``'s head over the run's validation set, as ``--calibrate``
    says: what it did, or why it did not run ("" when the head has nothing to calibrate)."""
    from bertkit.api.app import calibrates, exported, run_validation_data, validation_outputs

    if calibrate is False or not calibrates(model.head):
        return ""
    try:
        data = run_validation_data(model, stored, checkpoint)
    except (ValueError, FileNotFoundError) as error:
        if calibrate:
            raise ValueError(f"--calibrate true: {error}") from error
        return f"not calibrated for transformers' own decoding (--calibrate): {error}"
    return exported(model.head).hf_calibrate(validation_outputs(model, data))
