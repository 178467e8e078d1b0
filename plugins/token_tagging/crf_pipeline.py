"""bertkit's CRF decoding inside transformers' token-classification pipeline.

A bertkit NER export trained with a CRF holds the CRF's scores (``crf.*`` in
``model.safetensors``) beside the emission layer ``BertForTokenClassification`` loads. This file,
written into the export with ``custom_pipelines`` in its ``config.json``, is transformers'
``TokenClassificationPipeline`` with one change: each word's tag comes from the Viterbi path of
the CRF over the logits of the words' first sub-words (Lample et al. 2016), with the moves IOB2
forbids excluded, as ``bertkit predict`` decodes. Entities are the words' B-/I- runs, reported
as the pipeline's ``aggregation_strategy="first"`` reports them::

    from transformers import pipeline

    tagger = pipeline(model="path/to/export", trust_remote_code=True)
    tagger("George Washington went to Washington.")
    tagger(["George", "Washington", "went", "to", "Washington", "."], is_split_into_words=True)

It needs only torch, transformers and safetensors (not bertkit). One window per text: longer
texts are truncated at the tokenizer's ``model_max_length``, as the plain pipeline without a
``stride`` does.
"""

from __future__ import annotations

import torch
from safetensors import safe_open
from transformers import TokenClassificationPipeline
from transformers.utils import cached_file

FORBIDDEN = -1e4  # the score of a move IOB2 forbids (bertkit's CRF uses the same)


def iob2_scores(tags: list[str], transitions: torch.Tensor, start: torch.Tensor, end: torch.Tensor):
    """The CRF's transition (tags x tags), start and end scores with IOB2's forbidden moves (an
    ``I-X`` that follows neither ``B-X`` nor ``I-X``, or opens the text) set to ``FORBIDDEN``."""
    kinds = [("O", "") if t == "O" else (t[0], t[2:]) for t in tags]
    follows = torch.tensor([[b[0] != "I" or (a[0] in "BI" and a[1] == b[1]) for b in kinds] for a in kinds])
    opens = torch.tensor([k[0] != "I" for k in kinds])
    return transitions.masked_fill(~follows, FORBIDDEN), start.masked_fill(~opens, FORBIDDEN), end


def best_path(emissions: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> list[int]:
    """The highest-scoring tag sequence for ``emissions`` (words x tags)."""
    score, pointers = start + emissions[0], []
    for emission in emissions[1:]:
        score, previous = (score.unsqueeze(1) + transitions).max(dim=0)
        score = score + emission
        pointers.append(previous)
    path = [int((score + end).argmax())]
    for previous in reversed(pointers):
        path.append(int(previous[path[-1]]))
    return path[::-1]


class CRFTokenClassificationPipeline(TokenClassificationPipeline):
    """``TokenClassificationPipeline`` whose words are tagged by the export's CRF."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        weights = cached_file(self.model.name_or_path, "model.safetensors")
        with safe_open(weights, framework="pt") as f:
            crf = {
                name: f.get_tensor(f"crf.{name}") for name in ("transitions", "start_transitions", "end_transitions")
            }
        labels = self.model.config.id2label
        self.tags = [labels[i] for i in range(len(labels))]
        self.crf = iob2_scores(self.tags, crf["transitions"], crf["start_transitions"], crf["end_transitions"])

    def postprocess(self, all_outputs, aggregation_strategy=None, ignore_labels=None):
        outputs = all_outputs[0]
        sentence = outputs["sentence"]
        logits = outputs["logits"][0].float()  # (T, tags)
        offsets = outputs["offset_mapping"][0].tolist()
        words = outputs.get("word_ids")
        if words is not None and outputs.get("word_to_chars_map") is not None:
            # pre-split words (is_split_into_words=True): the given words, offsets within each word
            chars = outputs["word_to_chars_map"]
            offsets = [
                (s + chars[w][0], e + chars[w][0]) if w is not None else (s, e)
                for (s, e), w in zip(offsets, words, strict=True)
            ]
        else:
            words = self.tokenizer(sentence, truncation=True).word_ids()
        firsts = [i for i, w in enumerate(words) if w is not None and (i == 0 or words[i - 1] != w)]
        lasts = {w: i for i, w in enumerate(words) if w is not None}  # each word's last sub-word
        if not firsts:
            return []
        emissions = logits[firsts]
        path = best_path(emissions, *self.crf)
        probabilities = emissions.softmax(-1)
        entities, current = [], None
        for n, (position, tag_id) in enumerate(zip(firsts, path, strict=True)):
            tag = self.tags[tag_id]
            last = lasts[words[position]]
            if tag.startswith("I-") and current is not None and current["entity_group"] == tag[2:]:
                current["end"] = offsets[last][1]
                current["scores"].append(float(probabilities[n, tag_id]))
                continue
            current = None
            if tag != "O":
                current = {"entity_group": tag[2:], "start": offsets[position][0], "end": offsets[last][1]}
                current["scores"] = [float(probabilities[n, tag_id])]
                entities.append(current)
        for entity in entities:
            scores = entity.pop("scores")
            entity["score"] = sum(scores) / len(scores)
            entity["word"] = sentence[entity["start"] : entity["end"]]
        return entities
