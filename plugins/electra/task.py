"""``ReplacedTokenDetection``: ELECTRA pre-training (Clark et al. 2020, §3).

A small generator (a narrower encoder sharing the discriminator's embeddings) is trained with
masked LM on the masked positions; its samples replace the masked tokens; the encoder being
trained (the discriminator) reads the corrupted text and predicts, for every token, whether it
was replaced (``ElectraPreTrainingHeads``). Loss = generator MLM loss + ``discriminator_weight`` x
mean binary cross-entropy over the real tokens (λ = 50 in the paper). No gradient flows through
the sampling. Defaults: generator width 1/4 of the discriminator's (§3.2, Figure 3: 1/4-1/2 works
best), the same number of layers, sampling temperature 1.

Data: the corpora, prepared shards and masking of the pre-training plugin's ``CorpusTask`` (no
sentence task).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bertkit_plugins.pretraining import (
    CorpusPreparation,
    CorpusTask,
    MaskedText,
    MaskingStrategy,
    flat_preparation,
    nest_preparation,
)

from bertkit.api.task import BertConfig, BertTokenizer, Head, by_example, check_float32, deprecated_alias


class ReplacedTokenDetection(CorpusTask):
    """ELECTRA pre-training: a generator fills the masked tokens, the encoder detects replacements.

    Args:
        generator_size: the generator's width as a fraction of the encoder's (Clark et al. §3.2).
        discriminator_weight: λ, the weight of the replaced-token-detection loss (50).
        temperature: softmax temperature of the generator's samples (1).
        masking: the masking strategy of the generator's input (default token-level 15 %,
            80/10/10, at most 20 predictions per sequence).
        dynamic_masking: draw masks when an instance is read instead of using stored ones.
        preparation: how a corpus is prepared (``CorpusPreparation``: ``dupe_factor`` …).

    Raises:
        ValueError: ``generator_size`` outside (0, 1], a negative weight or a temperature <= 0.
    """

    def __init__(
        self,
        generator_size: float = 0.25,
        discriminator_weight: float = 50.0,
        temperature: float = 1.0,
        masking: MaskingStrategy | None = None,
        dynamic_masking: bool = True,
        preparation: CorpusPreparation | None = None,
    ) -> None:
        super().__init__()
        check_float32(generator_size, "model.task.generator_size", low=0.0, high=1.0, low_open=True)
        check_float32(discriminator_weight, "model.task.discriminator_weight", low=0.0)
        check_float32(temperature, "model.task.temperature", low=0.0, low_open=True)
        self.save_hyperparameters(ignore=["masking", "preparation"])
        self.use_corpus(masking, preparation)

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        from bertkit_plugins.electra.head import ElectraPreTrainingHeads

        self._tokenizer = self._tokenizer or tokenizer
        hp = self.hparams
        return ElectraPreTrainingHeads(config, hp.generator_size, hp.discriminator_weight, hp.temperature)

    # ----- predictions: which tokens of a text look replaced (ElectraPreTrainingHeads.feature_predictions) -----

    def read_text_lines(self, path: Path, lines: Iterable[tuple[int, str]]) -> list[MaskedText]:
        """Texts to check, one per line (blank lines skipped)."""
        return [MaskedText(line, f"{path}:{number}") for number, line in lines if line.strip()]

    def format_predictions(self, examples: list[MaskedText], predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per text: each token (specials included) and the probability that it was replaced."""
        to_token = self.tokenizer().backend.id_to_token
        records = []
        for example, (feature,) in zip(examples, by_example(predictions, len(examples), self), strict=True):
            tokens = [
                {"token": to_token(t), "replaced_probability": round(p, 6)}
                for t, p in zip(feature["input_ids"], feature["p"], strict=True)
            ]
            records.append({"source": example.source, "text": example.text, "tokens": tokens})
        return records


ReplacedTokenDetectionHead = deprecated_alias(
    ReplacedTokenDetection, "ReplacedTokenDetectionHead", "bertkit_plugins.electra.head", convert=nest_preparation,
    parameters=flat_preparation(ReplacedTokenDetection),
)  # fmt: skip
