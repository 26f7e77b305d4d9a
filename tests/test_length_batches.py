"""Length-grouped training batches and length-sorted evaluation batches (data/length_batches.py),
the training stream they make (resumable), evaluation in idx order, and the fine-tuning run's
checkpoint policy settings."""

from __future__ import annotations

import pytest
import torch

from convexp.data.length_batches import grouped_permutation, row_lengths, sorted_batches


def lengths_like_sst2(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.clamp((torch.randn(n, generator=g) * 0.6 + 2.3).exp().long() + 2, 3, 64)


def padded_tokens(lengths: torch.Tensor, order: torch.Tensor, batch: int) -> int:
    return sum(int(lengths[b].max()) * len(b) for b in torch.split(order, batch))


def test_grouped_permutation_is_a_permutation_with_little_padding_and_is_reproducible():
    lengths = lengths_like_sst2(4000)
    perm = grouped_permutation(lengths, 32, torch.Generator().manual_seed(1))
    assert sorted(perm.tolist()) == list(range(4000))
    random_order = torch.randperm(4000, generator=torch.Generator().manual_seed(1))
    real = int(lengths.sum())
    grouped, plain = padded_tokens(lengths, perm, 32), padded_tokens(lengths, random_order, 32)
    assert grouped < 1.1 * real < plain / 2  # random batches: over twice the real tokens
    assert torch.equal(perm, grouped_permutation(lengths, 32, torch.Generator().manual_seed(1)))
    assert not torch.equal(perm, grouped_permutation(lengths, 32, torch.Generator().manual_seed(2)))
    assert int(lengths[perm[:32]].max()) == int(lengths.max())  # the longest batch first
    # batches are shuffled: their lengths do not simply fall through each mega-batch
    first_rows = lengths[perm[::32][:40]]
    assert not torch.equal(first_rows, torch.sort(first_rows, descending=True).values)


def test_grouped_permutation_keeps_the_offset_rows_for_the_straddling_batch():
    lengths = lengths_like_sst2(1000)
    perm = grouped_permutation(lengths, 32, torch.Generator().manual_seed(3), offset=7)
    assert sorted(perm.tolist()) == list(range(1000))
    rest = perm[7:]
    full = [b for b in torch.split(rest, 32) if len(b) == 32]
    spread = [int(lengths[b].max() - lengths[b].min()) for b in full]
    assert sorted(spread)[len(spread) // 2] <= 2  # the aligned batches hold similar lengths


def test_sorted_batches_cover_every_row_once_within_the_token_budget():
    lengths = lengths_like_sst2(3000)
    batches = sorted_batches(lengths, max_tokens=2048, max_rows=256)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(3000))
    assert all(int(lengths[b].max()) * len(b) <= 2048 for b in batches)
    assert max(len(b) for b in batches) == 256 and len(batches) < 3000 / 32
    assert sorted_batches(torch.tensor([600, 5]), max_tokens=100) == [[0], [1]]  # a long row alone


def tokenised(n: int):
    import datasets

    lengths = lengths_like_sst2(n, seed=5).tolist()
    return datasets.Dataset.from_dict(
        {
            "input_ids": [[2] + [7] * (k - 2) + [3] for k in lengths],
            "token_type_ids": [[0] * k for k in lengths],
            "attention_mask": [[1] * k for k in lengths],
            "label": [i % 2 for i in range(n)],
            "idx": list(range(n)),
        }
    )


def test_row_lengths_of_a_tokenised_split_and_of_a_selection():
    ds = tokenised(50)
    assert row_lengths(ds).tolist() == [len(x) for x in ds["input_ids"]]
    sel = ds.select([4, 2, 9])
    assert row_lengths(sel).tolist() == [len(ds[i]["input_ids"]) for i in (4, 2, 9)]


def test_length_grouped_stream_is_resumable_across_epochs():
    """Position p gives the same row in a fresh stream (a resumed run); after an epoch that does
    not end on a batch boundary, the next epoch's batches are still length groups."""
    from convexp.tasks.classification.stage import COLUMNS
    from convexp.train.streams import LengthGroupedStream

    ds = tokenised(1000)  # 1000 = 31 batches of 32 + 8: epoch 1 starts inside a batch
    a = LengthGroupedStream(ds, 42, COLUMNS, 32)
    b = LengthGroupedStream(ds, 42, COLUMNS, 32)
    positions = list(range(0, 3000, 37))
    assert [int(a[p]["idx"]) for p in positions] == [int(b[p]["idx"]) for p in reversed(positions)][::-1]
    for epoch in (0, 1, 2):
        rows = [int(a[p]["idx"]) for p in range(epoch * 1000, (epoch + 1) * 1000)]
        assert sorted(rows) == list(range(1000))
    lengths = row_lengths(ds)
    spread = []  # the stream's batches that start inside epoch 1 (positions 1024, 1056, ...)
    for start in range(32 * 32, 62 * 32, 32):
        batch = [int(a[p]["idx"]) for p in range(start, start + 32)]
        spread.append(int(lengths[batch].max() - lengths[batch].min()))
    assert sorted(spread)[len(spread) // 2] <= 2


def test_predict_returns_the_split_in_idx_order():
    from convexp.models import ModelConfig, SequenceClassifier
    from convexp.tasks.classification.evaluate import predict

    cfg = ModelConfig(vocab_size=20, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    torch.manual_seed(0)
    model = SequenceClassifier(cfg, 2)
    ds = tokenised(300)
    logits, labels, idx = predict(model, ds, pad_id=0)
    assert idx.tolist() == list(range(300)) and labels.tolist() == [i % 2 for i in range(300)]
    with torch.inference_mode():  # row 5 alone, unpadded: the same logits as in its batch
        one = model(torch.tensor([ds[5]["input_ids"]]), torch.tensor([ds[5]["attention_mask"]]), None)
    assert torch.allclose(logits[5], one.logits[0], atol=1e-5)


def test_evaluation_batches_are_smaller_on_a_cpu_than_on_a_gpu():
    from convexp.tasks.classification.evaluate import eval_loader

    ds = tokenised(3000)
    lengths = row_lengths(ds)
    for device, budget in (("cpu", 2048), ("cuda", 8192)):
        batches = list(eval_loader(ds, 0, device).batch_sampler)
        assert sorted(i for b in batches for i in b) == list(range(3000))
        assert all(int(lengths[b].max()) * len(b) <= budget for b in batches)
        assert max(int(lengths[b].max()) * len(b) for b in batches) > budget // 2  # the budget is used


def test_checkpoint_interval_is_checked_and_finished_runs_drop_their_checkpoints(tmp_path):
    from convexp.config.compose import compose_stage
    from convexp.errors import UserError
    from convexp.store.runs import Run
    from convexp.train.task_module import drop_checkpoints

    with pytest.raises(UserError, match="checkpoint_every_s"):
        compose_stage("finetune", ["init=x", "checkpoint_every_s=-1"])
    run = Run(tmp_path / "r")
    run.checkpoints.mkdir(parents=True)
    (run.checkpoints / "last.ckpt").write_bytes(b"x")
    drop_checkpoints(run)
    assert not run.checkpoints.exists()


class _Tiny(__import__("pytorch_lightning").LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


@pytest.mark.parametrize("min_seconds, saved_steps", [(0.0, [2, 4]), (3600.0, [])])
def test_timed_checkpoint_saves_every_n_steps_after_the_interval_never_at_the_end(
    tmp_path, min_seconds, saved_steps
):
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    from convexp.train.task_module import TimedCheckpoint

    saves = []

    class Recording(TimedCheckpoint):
        def _save_checkpoint(self, trainer, filepath):
            saves.append(trainer.global_step)
            super()._save_checkpoint(trainer, filepath)

    ckpt = Recording(min_seconds, dirpath=str(tmp_path), every_n_train_steps=2, save_last=True, save_top_k=0)
    trainer = pl.Trainer(
        max_steps=6,
        callbacks=[ckpt],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(_Tiny(), DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=2))
    assert saves == saved_steps  # step 6 is the last: the results are written right after it
    assert (tmp_path / "last.ckpt").exists() == bool(saved_steps)
