"""bertkit's training loop is transformers' loop, step for step.

With every setting matched — the same initial weights (bertkit's, exported with
``save_pretrained``), the same batches in the same order, dropout off, fp32 — the first training
steps of bertkit (Lightning ``Trainer.fit`` with ``BertModule.configure_optimizers`` and the
recipes' gradient clipping) and of transformers (its ``Trainer``'s own optimizer, parameter groups
and schedule from ``create_optimizer_and_scheduler``, the model's own loss, ``clip_grad_norm_``,
then ``optimizer.step`` and ``lr_scheduler.step`` as ``Trainer.train`` does) give the same losses.
Any difference in the update — parameter groups, epsilon, warm-up or decay step counts, loss
normalisation, clipping — makes the losses part after a few steps.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import transformers
from bertkit_plugins.question_answering import QuestionAnswering
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification
from bertkit_plugins.token_tagging.task import SAMPLE_FILES
from torch import nn

from bertkit import BertModule
from bertkit.data.collate import pad_batch
from tests.test_classification_train import toy_rows
from tests.test_qa_train import toy_squad

STEPS = 10
BATCH_SIZE = 8
SETTINGS = {"learning_rate": 3e-4, "weight_decay": 0.01, "warmup_ratio": 0.2}  # 2 warm-up steps on both sides
HF_KEYS = ("input_ids", "token_type_ids", "attention_mask", "labels", "start_positions", "end_positions")


def ner_data(tmp_path: Path) -> tuple[TokenClassification, Path, type]:
    head = TokenClassification(entity_types=["PER", "LOC", "ORG", "MISC"], classifier_dropout=0.0)
    return head, SAMPLE_FILES["train"], transformers.BertForTokenClassification


def classification_data(tmp_path: Path) -> tuple[SequenceClassification, Path, type]:
    path = tmp_path / "train.tsv"
    with path.open("w", newline="") as handle:
        csv.writer(handle, delimiter="\t").writerows(
            [("sentence", "label")] + toy_rows("single_label", 120, random.Random(0))
        )
    head = SequenceClassification(classifier_dropout=0.0)
    return head, path, transformers.BertForSequenceClassification


def qa_data(tmp_path: Path) -> tuple[QuestionAnswering, Path, type]:
    path = tmp_path / "train.json"
    path.write_text(json.dumps(toy_squad(80, random.Random(0))))
    # transformers' loss lets padding into the span softmax; bertkit's default leaves it out.
    head = QuestionAnswering(doc_stride=24, softmax_over_padding=True)
    return head, path, transformers.BertForQuestionAnswering


TASKS = {"ner": ner_data, "classification": classification_data, "qa": qa_data}


def batches(model: BertModule, path: Path, max_length: int) -> list[dict]:
    """bertkit's features of the file, padded by bertkit's collate, in file order."""
    head = model.task
    examples = head.read(path)
    features = head.featurize(examples, model.tokenizer, max_length)
    features = features[: STEPS * BATCH_SIZE]
    assert len(features) == STEPS * BATCH_SIZE
    return [
        pad_batch(features[i : i + BATCH_SIZE], model.tokenizer.pad_token_id, head.pad_values)
        for i in range(0, len(features), BATCH_SIZE)
    ]


def bertkit_model(head, path: Path) -> BertModule:
    torch.manual_seed(0)
    if head.learned:
        head.learn(head.read(path))
    model = BertModule(
        head, pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2", attention_dropout=0.0, **SETTINGS
    )
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model


class Losses(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(outputs["loss"].item())


def bertkit_losses(model: BertModule, data: list[dict]) -> list[float]:
    record = Losses()
    trainer = pl.Trainer(
        max_epochs=1, gradient_clip_val=1.0, precision="32-true", accelerator="cpu", callbacks=[record],
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    return record.losses


def load(directory: Path, cls: type) -> transformers.PreTrainedModel:
    return cls.from_pretrained(
        directory, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0
    )


def transformers_fit(model: transformers.PreTrainedModel, data: list[dict], tmp_path: Path) -> list[float]:
    """transformers' ``Trainer`` inner loop: its optimizer and schedule, the model's loss."""
    model.train()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), learning_rate=SETTINGS["learning_rate"],
        weight_decay=SETTINGS["weight_decay"], warmup_steps=SETTINGS["warmup_ratio"], max_grad_norm=1.0,
        use_cpu=True, report_to=[],
    )  # fmt: skip
    trainer = transformers.Trainer(model=model, args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=STEPS)
    losses = []
    for batch in data:
        loss = model(**{k: batch[k] for k in HF_KEYS if k in batch}).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        trainer.optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("task", list(TASKS))
def test_first_steps_give_the_losses_transformers_gives(task, tmp_path):
    head, path, cls = TASKS[task](tmp_path)
    model = bertkit_model(head, path)
    data = batches(model, path, max_length=64)
    model.save_pretrained(tmp_path / "initial")  # the weights both sides start from
    initial = load(tmp_path / "initial", cls).state_dict()
    reference = load(tmp_path / "initial", cls)
    theirs = transformers_fit(reference, data, tmp_path)
    ours = bertkit_losses(model, data)
    assert len(ours) == len(theirs) == STEPS
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), atol=1e-5, rtol=0)

    model.save_pretrained(tmp_path / "trained")
    trained = load(tmp_path / "trained", cls).state_dict()
    # A key bias and the span bias get no gradient (softmax ignores a shift of all its scores): their
    # updates are Adam steps on rounding noise, and are not compared.
    compared = {k: v for k, v in reference.state_dict().items() if not k.endswith(("key.bias", "qa_outputs.bias"))}
    change = {k: (v - initial[k]).abs().max() for k, v in compared.items()}
    assert min(change.values()) > 1e-7 and max(change.values()) > 1e-3  # every tensor moved, some far
    # Adam divides each gradient by its own running scale, so rounding in a small gradient can move
    # a weight by a fraction of the learning rate (3e-4): the weights are compared to 1e-4.
    for key, value in compared.items():
        torch.testing.assert_close(trained[key], value, atol=1e-4, rtol=0, msg=lambda m, k=key: f"{k}: {m}")
