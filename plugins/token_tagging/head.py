"""``TokenClassificationHead``: a linear tagger on every token (Devlin et al. 2019, §5.3), with an
optional linear-chain CRF over the words' first sub-words (``crf.CRF``; Lample et al. 2016)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from bertkit_plugins.token_tagging.calibration import fit_bias
from bertkit_plugins.token_tagging.crf import CRF
from bertkit_plugins.token_tagging.metric import EntityF1
from torch import nn

from bertkit.api.task import (
    Batch,
    BertConfig,
    DistillationTarget,
    Dropout,
    EncoderOutput,
    Head,
    TransformersExport,
    forwarding,
    mean_over_processes,
)

CRF_PIPELINE_TASK = "crf-token-classification"
"""The task name of the CRF's transformers pipeline in an export's ``custom_pipelines`` (not
``token-classification``: the plain pipeline keeps working without ``trust_remote_code``)."""


def compacted_positions(marked: torch.Tensor) -> torch.Tensor:
    """The token positions where ``marked`` ((B, T), e.g. ``word_index``) is >= 0, moved to the
    front of each row in order: (B, W) with W the most in any row (at least 1), -1 past a row's
    positions."""
    chosen = marked >= 0
    width = max(1, int(chosen.sum(1).max()))
    order = torch.sort((~chosen).to(torch.int8), dim=1, stable=True).indices[:, :width]  # chosen ones first
    return torch.where(chosen.gather(1, order), order, -1)


def collated_positions(batch: Batch, positions: str, marked: str) -> torch.Tensor:
    """``compacted_positions`` of ``batch[marked]``, as the loader collated it: a task's feature
    lists the token positions where ``marked`` is >= 0 under the key ``positions``, which pads
    them with -1 into (B, W), so a step does not read W on the host (a wait for a GPU). A batch
    without that key (features written before it existed) is compacted here.

    Returns:
        (B, W) long, W >= 1: each row's positions in order, -1 past them.
    """
    if positions not in batch:
        return compacted_positions(batch[marked])
    found = batch[positions]
    if found.shape[1] == 0:  # no row has any: one column of -1, as compacted_positions gives
        return torch.full((found.shape[0], 1), -1, dtype=torch.long, device=found.device)
    return found.long()


class TokenClassificationHead(Head, TransformersExport):
    """Dropout and a linear layer on every token's last hidden state; with ``crf``, a CRF.

    Without a CRF the loss is each labelled token's cross-entropy; with one, the CRF's negative
    log-likelihood of each window's owned words, per word. ``decode`` gives every owned word's
    tag: the argmax of its first sub-word's logits, or the Viterbi path.

    Args:
        tags: the IOB2 tags, ``O`` first (the task's).
        config: the encoder's config (``hidden_size``, ``initializer_range``).
        dropout: dropout before the linear layer.
        crf: add the CRF (IOB2 moves only).
        crf_learning_rate: the CRF's learning rate (its scores start at 0 and would hardly move
            at an encoder's); warm-up and decay apply as to the rest.
        emission_loss_weight: with a CRF, the weight of the emissions' own cross-entropy at the
            scored words, added to the CRF's loss (``crf_loss`` and ``emission_loss`` are logged).
        emission_target: what that cross-entropy's target is: ``labels``, the gold tags; ``crf``,
            the CRF's own posterior of each word's tag (``CRF.log_marginals``, held constant);
            ``viterbi``, the CRF's own Viterbi path (held constant): the emissions learn the
            decisions the transitions add, so that their argmax alone (transformers' pipeline)
            agrees with the CRF's.
        crf_trains_encoder: whether the CRF's loss reaches the emissions (and the encoder); False:
            it trains the CRF's scores alone, on the emissions held constant, which the
            emission loss trains.
    """

    hf_architecture = "BertForTokenClassification"
    hf_tags_words = True
    onnx_outputs = ("logits",)

    def __init__(
        self,
        tags: list[str],
        config: BertConfig,
        dropout: float = 0.1,
        crf: bool = False,
        crf_learning_rate: float = 1e-3,
        emission_loss_weight: float = 0.0,
        emission_target: str = "labels",
        crf_trains_encoder: bool = True,
    ) -> None:
        super().__init__()
        self.tags, self.crf_learning_rate = list(tags), crf_learning_rate
        self.emission_loss_weight, self.emission_target = emission_loss_weight, emission_target
        self.crf_trains_encoder = crf_trains_encoder
        self.dropout = Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, len(tags))
        nn.init.normal_(self.classifier.weight, std=config.initializer_range)
        nn.init.zeros_(self.classifier.bias)
        self.crf = CRF(self.tags, "IOB2") if crf else None
        self.calibration = ""  # what hf_calibrate fitted, for the model card
        self.metrics = nn.ModuleDict({stage: EntityF1(self.tags) for stage in ("val", "test")})

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """``classifier.*``, and ``crf.*`` with a CRF (``transformers`` ignores them; ``CRF.from_export``
        reads them)."""
        state = {f"classifier.{k}": v for k, v in self.classifier.state_dict().items()}
        if self.crf is not None:
            state |= {f"crf.{k}": v for k, v in self.crf.state_dict().items()}
        return state

    def hf_config(self) -> dict[str, Any]:
        """IOB2 tags by id (``O``, ``B-PER`` …); with a CRF, the ``crf-token-classification``
        pipeline of ``crf_pipeline.py`` (``hf_files``) as a custom pipeline."""
        config: dict[str, Any] = {
            "id2label": dict(enumerate(self.tags)),
            "label2id": {t: i for i, t in enumerate(self.tags)},
        }
        if self.crf is not None:
            config["custom_pipelines"] = {
                CRF_PIPELINE_TASK: {
                    "impl": "crf_pipeline.CRFTokenClassificationPipeline", "pt": ["AutoModelForTokenClassification"],
                    "tf": [], "type": "text",
                }
            }  # fmt: skip
        return config

    def hf_files(self) -> dict[str, str]:
        """With a CRF, ``crf_pipeline.py``: transformers' token-classification pipeline decoding with
        the CRF, as bertkit does (``pipeline(model=folder, trust_remote_code=True)``)."""
        if self.crf is None:
            return {}
        return {"crf_pipeline.py": (Path(__file__).parent / "crf_pipeline.py").read_text(encoding="utf-8")}

    def hf_calibrate(self, validation: Iterable[tuple[dict[str, torch.Tensor], Batch]]) -> str:
        """With a CRF: fit a bias per tag on the validation set for transformers' plain pipeline
        (its arg-max over each word's first sub-word, ``calibration.fit_bias``), add it to the
        emission layer's bias and take it back out of the CRF's scores
        (``CRF.absorb_emission_bias``): bertkit's Viterbi path is unchanged, the plain pipeline
        finds more of the entities. Each batch row is read as one sentence (a window of a long
        one as a sentence of its own). Without a CRF, nothing: the arg-max is bertkit's decoding."""
        if self.crf is None:
            return ""
        emissions, gold, first = [], [], []
        for outputs, batch in validation:
            mask = batch["word_index"] >= 0
            emissions.append(outputs["logits"][mask].float())
            gold.append(batch["labels"][mask])
            first.append(mask.cumsum(1)[mask] == 1)  # each row's first owned word starts a sentence
        if not emissions:
            return ""
        bias, before, after = fit_bias(torch.cat(emissions), torch.cat(gold), torch.cat(first), self.tags)
        self.classifier.bias.data += bias.to(self.classifier.bias)
        self.crf.absorb_emission_bias(bias)
        words = sum(len(e) for e in emissions)
        self.calibration = (
            f"The emission layer's biases were fitted for that arg-max on the run's validation set ({words:,} words): "
            f"its entity F1 there went from {before:.2f} to {after:.2f}, and the CRF's scores take the biases back "
            "out, so the CRF decodes as before (`bertkit export --calibrate false` leaves them out)."
        )
        return f"emission biases fitted for transformers' plain pipeline: validation F1 {before:.2f} -> {after:.2f}"

    def hf_notes(self) -> str:
        """With a CRF: transformers ignores it and tags each token by the argmax of its logits
        (and, after ``hf_calibrate``, what it fitted)."""
        if self.crf is None:
            return ""
        return (
            "This model was trained with a CRF over the words' first sub-words (Lample et al. 2016). "
            "`transformers` loads the emission layer (`classifier.*`) and ignores the CRF's scores (`crf.*` in "
            "`model.safetensors`): its `pipeline` tags each token by the argmax of its logits, which finds "
            "fewer entities than the CRF's Viterbi decoding. `bertkit predict`, `Predictor.from_export` "
            "(PyTorch or the ONNX graph) and the export's own pipeline (`crf_pipeline.py`, needing only torch, "
            "transformers and safetensors: `pipeline(model=folder, trust_remote_code=True)`) decode with the "
            "CRF; so does `CRF.from_export(folder).decode(emissions, mask)` (`bertkit_plugins.token_tagging.crf`) "
            "on the logits at each word's first sub-word." + (f" {self.calibration}" if self.calibration else "")
        )

    def parameter_settings(self) -> list[tuple[list[nn.Parameter], dict[str, float]]]:
        return [(list(self.crf.parameters()), {"lr": self.crf_learning_rate})] if self.crf is not None else []

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """``logits`` (B, T, tags); with labels, ``loss``."""
        logits = encoded.map_tokens(lambda h: self.classifier(self.dropout(h)))  # (B, T, num_tags)
        out = {"logits": logits}
        if "labels" in batch and self.crf is not None:
            emissions, words, free_start = self._words(logits, batch)
            tags, scored = batch["labels"].gather(1, words.clamp(min=0)), words >= 0
            words_scored = scored.sum()
            read = emissions if self.crf_trains_encoder else emissions.detach()
            nll = self.crf.nll(read, tags, scored, free_start).sum()  # per word: the sentences' sum / words
            out["loss"] = mean_over_processes(nll, words_scored, self.training)
            if self.emission_loss_weight:
                out["crf_loss"] = out["loss"]
                token_losses = self._emission_losses(emissions, tags, scored, free_start)
                out["emission_loss"] = mean_over_processes(token_losses, words_scored, self.training)
                out["loss"] = out["loss"] + self.emission_loss_weight * out["emission_loss"]
        elif "labels" in batch:
            labels = batch["labels"].flatten()
            token_losses = F.cross_entropy(logits.flatten(0, 1), labels, ignore_index=-100, reduction="sum")
            out["loss"] = mean_over_processes(token_losses, (labels != -100).sum(), self.training)
        return out

    def _emission_losses(
        self, emissions: torch.Tensor, tags: torch.Tensor, scored: torch.Tensor, free_start: torch.Tensor
    ) -> torch.Tensor:
        """The emissions' summed cross-entropy at the scored words against ``emission_target``."""
        log_probs = emissions[scored].log_softmax(-1)  # (words, tags)
        if self.emission_target == "labels":
            return F.nll_loss(log_probs, tags[scored], reduction="sum")
        if self.emission_target == "viterbi":
            path = self.crf.decode(emissions.detach(), scored, free_start)[scored]
            return F.nll_loss(log_probs, path, reduction="sum")
        with torch.no_grad():
            posterior = self.crf.log_marginals(emissions.detach(), scored, free_start)[scored].exp()
        return -(posterior * log_probs).sum()

    def distillation_targets(self, outputs: dict[str, torch.Tensor], batch: Batch) -> dict[str, DistillationTarget]:
        """The tag distribution of each scored sub-word (a word's first; every sub-word with
        ``label_all_subwords``): without a CRF, its logits; with one, the CRF's log-marginals
        of each word's tag (``CRF.log_marginals``) at its first sub-word, so that the student's
        whole CRF (emissions and transitions) learns the teacher's posterior over tags: posterior
        distillation (Wang et al. 2020, §3.3): a CRF's emissions are no distribution of the
        tags, its transitions carry part of each decision (docs/distillation.md has what each
        gave the 2-layer student)."""
        if self.crf is None:
            return {"logits": (outputs["logits"], batch["labels"] != -100)}
        emissions, words, free_start = self._words(outputs["logits"], batch)
        scored = words >= 0
        marginals = self.crf.log_marginals(emissions, scored, free_start)  # (B, W, tags)
        placed = torch.full_like(outputs["logits"], torch.finfo(torch.float32).min, dtype=marginals.dtype)
        rows = torch.zeros(outputs["logits"].shape[:2], dtype=torch.bool, device=placed.device)
        b, w = scored.nonzero(as_tuple=True)
        placed[b, words[b, w]] = marginals[b, w]
        rows[b, words[b, w]] = True
        return {"marginals": (placed, rows)}

    @staticmethod
    def _words(logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The CRF's sequences: each row's first sub-words of its own words, in order
        (``word_positions`` as collated, else found from ``word_index``).

        Returns:
            emissions (B, W, num_tags) float32, their token positions (B, W) (-1 past a row's
            words), and (B,) whether a row's first word is not its sentence's first (a window
            that starts inside the sentence, where an entity may go on).
        """
        word_index = batch["word_index"]
        words = collated_positions(batch, "word_positions", "word_index")
        order = words.clamp(min=0)
        emissions = logits.float().gather(1, order.unsqueeze(2).expand(-1, -1, logits.shape[2]))
        free_start = word_index.gather(1, order[:, :1]).squeeze(1) > 0
        return emissions, words, free_start

    def decode(self, outputs: dict[str, torch.Tensor], batch: Batch) -> dict[str, torch.Tensor]:
        """Adds ``word_tags`` (B, T): the tag id of each owned word at its first sub-word (-1
        elsewhere): the argmax of the logits there, or the CRF's Viterbi path over the row's words."""
        logits, word_index = outputs["logits"], batch["word_index"]
        mask = word_index >= 0  # (B, T) first sub-word of an owned word
        if self.crf is not None:  # Viterbi: the tags in the rows' word order, which is mask's order
            emissions, words, free_start = self._words(logits, batch)
            pred = self.crf.decode(emissions, words >= 0, free_start)[words >= 0]
        else:
            pred = logits.argmax(-1)[mask]
        word_tags = torch.full_like(word_index, -1)
        word_tags[mask] = pred
        return {**outputs, "word_tags": word_tags}

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        example, word, pred = word_level(outputs, batch)
        self.metrics[stage].update(example, word, pred, batch["labels"][batch["word_index"] >= 0])

    def feature_predictions(self, decoded: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """Per owned word: its ``example_index``, ``word_index`` and ``tag`` (``decode``'s ``word_tags``)."""
        example, word, pred = word_level(decoded, batch)
        return [
            {"example_index": e, "word_index": w, "tag": self.tags[p]}
            for e, w, p in zip(example.tolist(), word.tolist(), pred.tolist(), strict=True)
        ]


def word_level(outputs: dict[str, torch.Tensor], batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each owned word's example index, word index and predicted tag id (``word_tags``), in
    row-major order of their first sub-words."""
    mask = batch["word_index"] >= 0  # (B, T) first sub-word of an owned word
    rows = mask.nonzero()[:, 0]
    return batch["example_index"][rows], batch["word_index"][mask], outputs["word_tags"][mask]


# release 0.1's bertkit_plugins.token_tagging.head.TokenTaggingHead
__getattr__ = forwarding(__name__, "bertkit_plugins.token_tagging.task")
