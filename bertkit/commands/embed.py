"""``bertkit embed``: contextual features of a text file's lines. The signature and docstring are the
command's options and help (jsonargparse); torch is imported when the command runs."""

from __future__ import annotations

import json
import logging
from contextlib import nullcontext
from pathlib import Path

from bertkit.api.app import Features, Pooling, atomic_path, replace_output

log = logging.getLogger(__name__)


def embed(
    input: str,
    output: str,
    pretrained: str = "all-MiniLM-L6-v2",
    checkpoint: str | None = None,
    features: Features = "last",
    pooling: Pooling = "mean",
    max_length: int | None = None,
    batch_size: int = 32,
    int8: bool = False,
) -> None:
    """Write contextual features of each non-blank line of a UTF-8 text file (BERT §5.3).

    ``OUTPUT`` ending in ``.safetensors``: one tensor ``features`` (lines, D) (pooled only), with
    the settings and each row's ``file:line`` in its metadata; ``.jsonl``: one record per line with
    ``source`` (``file:line``), ``text`` and ``features`` (``tokens`` and a list of vectors with
    ``--pooling tokens``). Lines are read, embedded and (JSONL) written 4,096 at a time into
    ``OUTPUT.partial``, renamed to ``OUTPUT`` at the end: memory does not grow with the input,
    and an interrupted run keeps the lines it wrote.

    Args:
        input: the text file, one text per line (blank lines are skipped; sources keep numbers).
        output: ``.safetensors`` or ``.jsonl`` file to (over)write atomically.
        pretrained: a Hugging Face format directory, a registered model name or a Hub id
            (``org/name[@revision]``, ``bertkit.model.hub``).
        checkpoint: a ``bertkit fit`` checkpoint (or ``bertkit export`` folder) whose fine-tuned
            encoder to use instead.
        features: last, second_to_last, sum_last_four or concat_last_four (Table 7).
        pooling: mean, cls or tokens.
        max_length: tokens per line, specials included; longer lines are truncated (with a warning).
            Unset: with ``checkpoint``, its ``model.max_length``; else the length the pretrained
            directory declares (sentence-transformers' ``sentence_bert_config.json``: 256 for
            all-MiniLM-L6-v2, as sentence-transformers reads it), or ``MAX_LENGTH`` (128) where it
            declares none (BERT's pre-training length for 90 % of its steps, Devlin et al. 2019, §A.2).
        batch_size: lines per forward pass.
        int8: run the encoder's linear layers in int8 (``bertkit.model.quantize``; CPU): faster, and
            the features move: compare them with float32's on your own texts before relying
            on them.
    """
    import torch
    from safetensors.torch import save_file

    from bertkit.api.app import (
        MAX_LENGTH,
        PART_LINES,
        BertModule,
        declared_max_length,
        embed_texts,
        family_of,
        load_trained,
        read_parts,
        resolve_pretrained,
    )

    target = Path(output)
    if target.suffix not in (".safetensors", ".jsonl"):
        raise ValueError(f"{output}: expected a .safetensors or .jsonl output file")
    if pooling == "tokens" and target.suffix == ".safetensors":
        raise ValueError(f"{output}: --pooling tokens gives a matrix per line; write it to a .jsonl file")
    if checkpoint is not None:
        model, trained_length = load_trained(checkpoint, "cpu", BertModule)
        encoder, tokenizer = model.encoder, model.tokenizer
        max_length = trained_length if max_length is None else max_length
    else:
        directory = resolve_pretrained(pretrained)
        encoder, tokenizer = family_of(directory).from_pretrained(directory)
        if max_length is None:
            max_length = declared_max_length(directory) or MAX_LENGTH
    if int8:
        from bertkit.api.app import quantize_linears

        quantize_linears(encoder)
    else:
        from bertkit.api.app import prepack_linears

        prepack_linears(encoder)  # float32 on the CPU, for oneDNN (the same values)
    count, truncated, dims, kept, sources = 0, 0, 0, [], []
    partial = target.with_name(target.name + ".partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("w", encoding="utf-8") if target.suffix == ".jsonl" else nullcontext() as out:
        for part in read_parts(input, PART_LINES):
            texts = [line for _, line in part]
            vectors, tokens, cut = embed_texts(encoder, tokenizer, texts, max_length, features, pooling, batch_size)
            count, truncated, dims = count + len(texts), truncated + cut, vectors[0].shape[-1]
            part_sources = [f"{input}:{number}" for number, _ in part]
            if out is None:  # safetensors: one matrix, written at the end
                kept += vectors
                sources += part_sources
                continue
            for source, text, words, vector in zip(part_sources, texts, tokens, vectors, strict=True):
                record = {"source": source, "text": text}
                record |= (
                    {"tokens": words, "features": vector.tolist()}
                    if pooling == "tokens"
                    else {"features": vector.tolist()}
                )
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
    if not count:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{input}: no text to embed (the file is empty or blank)")
    if truncated:
        log.warning(
            "%d of %d lines of %s were longer than %d tokens and truncated", truncated, count, input, max_length
        )
    if target.suffix == ".safetensors":
        settings = {"features": features, "pooling": pooling, "int8": str(int8), "sources": "\n".join(sources)}
        with atomic_path(target) as tmp:
            save_file({"features": torch.stack(kept).contiguous()}, str(tmp), metadata=settings)
    else:
        replace_output(partial, target)
    print(f"wrote {count} {features}/{pooling} feature{'s' if count != 1 else ''} ({dims} dims) to {output}")
