"""The CUDA paths on a GPU (skipped without one): FlashAttention varlen, padded SDPA with
dropout, ModernBERT's sliding window, ``torch.compile`` and a bf16 fit whose checkpoint predicts
the same on the CPU. Each compares with the fp32 padded path by ‖x − ref‖ / ‖ref‖; bf16 operands
land between 1e-3 and 1e-2. On a machine without CUDA the same routes are checked exactly by
``tests/test_attention_routes.py`` and ``tests/test_varlen_contract.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import bertkit.model.unpadded
from bertkit import BertConfig, BertModel
from bertkit.model.unpadded import Unpadded, grouped_attention, padded_attention

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

LENGTHS = [37, 5, 64, 1, 20, 64, 3]


def relative(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.detach().float() - ref.detach().float()).norm() / ref.detach().float().norm())


def batch(lengths: list[int], vocab: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    T = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (T - n) for n in lengths])
    return (torch.randint(5, vocab, (len(lengths), T), generator=g) * mask).cuda(), mask.cuda()


def config(**changes) -> BertConfig:
    c = BertConfig.preset("tiny", vocab_size=1000)
    c.hidden_size, c.num_attention_heads, c.intermediate_size = 128, 4, 256  # head size 32 (FlashAttention)
    for key, value in changes.items():
        setattr(c, key, value)
    return c


def routes(monkeypatch) -> list[str]:
    taken: list[str] = []
    choose = bertkit.model.unpadded.route
    monkeypatch.setattr(bertkit.model.unpadded, "route", lambda *a: taken.append(choose(*a)) or taken[-1])
    return taken


def test_varlen_bf16_matches_the_fp32_padded_encoder(monkeypatch):
    taken = routes(monkeypatch)
    torch.manual_seed(0)
    encoder = BertModel(config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).cuda().train()
    ids, mask = batch(LENGTHS)
    real = mask.bool()
    outputs, grads = [], []
    for unpad in (True, False):
        encoder.zero_grad()
        with torch.autocast("cuda", torch.bfloat16, enabled=unpad):
            out = encoder(ids, mask, unpad=unpad)
        outputs.append(out.last_hidden_state[real])
        (out.last_hidden_state[real].float().pow(2).mean() + out.pooler_output.float().sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in encoder.parameters() if p.grad is not None]))
    assert taken == ["varlen"] * encoder.config.num_hidden_layers
    assert relative(outputs[0], outputs[1]) < 2e-2
    assert relative(grads[0], grads[1]) < 5e-2
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
        first = encoder.eval()(ids, mask, cls_only=True)  # the last layer: [CLS] queries only
        full = encoder(ids, mask, unpad=False)
    assert taken[-1] == "varlen" and relative(first.pooler_output, full.pooler_output) < 2e-2


def test_padded_attention_with_dropout_runs_a_fused_kernel():
    """The route training with attention dropout takes on CUDA: without dropout it equals exact
    attention; with dropout p each output is an unbiased estimate (the mean of many draws
    approaches the output without dropout); the math backend is switched off, so a fused kernel
    runs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator(device="cuda").manual_seed(0)
    A, D = 4, 32
    layout = Unpadded.from_mask(batch(LENGTHS)[1])
    N = layout.offsets[-1]
    q, k, v = (torch.randn(N, A, D, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    exact = grouped_attention(q.float(), k.float(), v.float(), layout, 0.0, False, None)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        assert relative(padded_attention(q, k, v, layout, 0.0, False, None), exact) < 1e-2
        first = padded_attention(q[layout.first_rows], k, v, layout, 0.0, True, None)
        assert relative(first, exact[layout.first_rows]) < 1e-2
        draws = torch.stack([padded_attention(q, k, v, layout, 0.5, False, None).float() for _ in range(400)])
    assert relative(draws[0], exact) > 0.2  # one draw is far from it
    assert relative(draws.mean(0), exact) < 0.1  # the mean is close: an unbiased dropout
    qg = q.clone().requires_grad_()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        padded_attention(qg, k, v, layout, 0.1, False, None).float().sum().backward()
    assert qg.grad is not None and bool(torch.isfinite(qg.grad).all())


def test_training_with_attention_dropout_takes_the_padded_route(monkeypatch):
    taken = routes(monkeypatch)
    encoder = BertModel(config()).cuda().train()  # attention dropout 0.1
    ids, mask = batch(LENGTHS)
    with torch.autocast("cuda", torch.bfloat16):
        out = encoder(ids, mask)
    out.last_hidden_state[mask.bool()].float().sum().backward()
    assert taken == ["padded"] * encoder.config.num_hidden_layers


def test_modernbert_window_on_cuda(monkeypatch):
    from bertkit_plugins.modernbert import ModernBertConfig, ModernBertModel

    taken = routes(monkeypatch)
    torch.manual_seed(0)
    c = ModernBertConfig.preset("tiny", vocab_size=1000, pad_token_id=0, local_attention=8)
    c.hidden_size, c.num_attention_heads, c.intermediate_size, c.num_hidden_layers = 128, 4, 256, 4
    encoder = ModernBertModel(c).cuda().eval()
    ids, mask = batch(LENGTHS)
    real = mask.bool()
    with torch.no_grad():
        with torch.autocast("cuda", torch.bfloat16):
            packed = encoder(ids, mask).last_hidden_state[real]
        padded = encoder(ids, mask, unpad=False).last_hidden_state[real]
    assert taken == ["varlen"] * 4
    assert relative(packed, padded) < 2e-2
    encoder.train()
    taken.clear()
    with torch.autocast("cuda", torch.bfloat16):
        encoder(ids, mask)
    assert set(taken) == {"varlen" if c.attention_probs_dropout_prob == 0 else "padded"}


def test_compiled_blocks_on_cuda_match_eager():
    torch.manual_seed(0)
    encoder = BertModel(config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).cuda().eval()
    outputs = []
    for lengths in (LENGTHS, [12, 7, 90], LENGTHS[:3]):  # new lengths: dynamic shapes, no crash
        ids, mask = batch(lengths)
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
            outputs.append(encoder(ids, mask).last_hidden_state[mask.bool()])
    for block in encoder.encoder.layer:
        block.compile(dynamic=True)
    for expected, lengths in zip(outputs, (LENGTHS, [12, 7, 90], LENGTHS[:3]), strict=True):
        ids, mask = batch(lengths)
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
            assert relative(encoder(ids, mask).last_hidden_state[mask.bool()], expected) < 1e-2


def test_bf16_fit_on_the_gpu_predicts_the_same_on_the_cpu(tmp_path: Path):
    """bertkit's own loop: a tagger trains on the GPU in bf16-mixed (loss falls), its checkpoint
    loads on the CPU, and fp32 logits there equal fp32 logits on the GPU."""
    import pytorch_lightning as pl
    from bertkit_plugins.token_tagging import TokenClassification
    from bertkit_plugins.token_tagging.conll import read_conll

    from bertkit import BertModule
    from bertkit.data.datamodule import BertDataModule

    sample = Path(__import__("bertkit_plugins.token_tagging").token_tagging.__file__).parent / "sample"
    words = sorted({w.lower() for s in read_conll(sample / "train.conll") for w in s.words})
    chars = sorted({c for w in words for c in w})
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *chars, *("##" + c for c in chars)])
    )
    losses: list[float] = []

    class Losses(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    pl.seed_everything(0)
    model = BertModule(TokenClassification(["PER", "LOC", "ORG", "MISC"]), pretrained=None, preset="tiny",
                       vocab_file=str(vocab), learning_rate=1e-3)  # fmt: skip
    trainer = pl.Trainer(
        accelerator="gpu", devices=1, precision="bf16-mixed", max_epochs=3, limit_val_batches=0, logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path, callbacks=[Losses()],
    )  # fmt: skip
    trainer.fit(model, datamodule=BertDataModule(train_file="train.conll", batch_size=16))
    ckpt = tmp_path / "tagger.ckpt"
    trainer.save_checkpoint(ckpt)
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    gpu = model.cuda().eval().float()  # fit's teardown left it on the CPU
    cpu = BertModule.load_from_checkpoint(ckpt, map_location="cpu").eval()
    ids, mask = batch([30, 12, 25], vocab=len(words))
    with torch.no_grad():
        on_gpu = gpu.encoder(ids, mask).last_hidden_state[mask.bool()]
        on_cpu = cpu.encoder(ids.cpu(), mask.cpu()).last_hidden_state[mask.cpu().bool()]
    assert relative(on_cpu, on_gpu.cpu()) < 1e-4
