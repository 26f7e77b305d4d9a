"""What a fine-tune costs besides its steps: the loader's batches (read a batch at a time, the same
batches as row by row), the loop's logging and seeding, the training loop's own clock (metrics.json's
timing), and a sweep worker that runs node after node."""

from __future__ import annotations

import itertools

import pytest
import torch


def _tokenised(n: int = 70):
    import datasets

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 40, (n,), generator=g).tolist()
    return datasets.Dataset.from_dict(
        {
            "input_ids": [[2] + [7 + i % 50] * (k - 2) + [3] for i, k in enumerate(lengths)],
            "token_type_ids": [[0] * k for k in lengths],
            "attention_mask": [[1] * k for k in lengths],
            "label": [i % 2 for i in range(n)],
            "idx": list(range(n)),
        }
    )


@pytest.mark.parametrize("grouped", [False, True])
def test_the_loader_reads_a_batch_at_once_and_gives_the_row_by_row_batches(grouped, monkeypatch):
    """A training batch read in one take of the Arrow table (not a read per row: 5 ms of a GLUE
    step's loader, 0.4 ms now) and padded with numpy is the batch the stream gives row by row
    (stream[p] as tensors, padded as before), across an epoch's end and from a resumed step."""
    import datasets

    from convexp.tasks.classification.evaluate import Padded
    from convexp.tasks.classification.stage import COLUMNS
    from convexp.train.streams import training_loader, training_stream

    ds, B = _tokenised(), 16
    stream = training_stream(ds, 7, COLUMNS, B, grouped)
    for start_step in (0, 3):
        loader = training_loader(ds, 7, COLUMNS, B, grouped, start_step, Padded(0), 0)
        reads = []
        read = datasets.Dataset.__getitem__
        monkeypatch.setattr(datasets.Dataset, "__getitem__", lambda self, key: reads.append(key) or read(self, key))
        batches = list(itertools.islice(loader, 8))  # 8 x 16 rows: past the 70-row epoch
        monkeypatch.undo()
        assert len(reads) == 8  # one read of the table per batch
        for k, batch in enumerate(batches):
            first = (start_step + k) * B
            rows = [stream[p] for p in range(first, first + B)]
            length = max(len(r["input_ids"]) for r in rows)
            for key in ("input_ids", "token_type_ids", "attention_mask"):
                expect = torch.zeros(B, length, dtype=torch.long)
                for i, r in enumerate(rows):
                    expect[i, : len(r[key])] = r[key]
                assert torch.equal(batch[key], expect) and batch[key].dtype == torch.long
            assert batch["labels"].tolist() == [int(r["label"]) for r in rows]
            assert batch["idx"].tolist() == [int(r["idx"]) for r in rows]
            assert batch["position"].tolist() == list(range(first, first + B)) and batch["first_position"] == first


def test_squad_windows_are_collated_as_before():
    """SQuAD's windows (a list of dicts) through the batch read and the numpy padding: the same
    tensors as padding each window by hand."""
    from convexp.tasks.squad.stage import COLUMNS, WindowBatches
    from convexp.train.streams import training_loader

    g = torch.Generator().manual_seed(1)
    windows = []
    for i in range(40):
        n = int(torch.randint(5, 30, (), generator=g))
        windows.append({"input_ids": list(range(10, 10 + n)), "token_type_ids": [0] * 3 + [1] * (n - 3),
                        "context_mask": [0] * 3 + [1] * (n - 4) + [0], "start_position": i % n,
                        "end_position": (i + 1) % n, "is_impossible": i % 3 == 0, "feature_index": i,
                        "offsets": [None] * n})  # fmt: skip
    loader = training_loader(windows, 3, COLUMNS, 8, False, 0, WindowBatches(0), 0)
    for k, batch in enumerate(itertools.islice(loader, 6)):
        picked = [windows[int(i)] for i in batch["feature_index"]]
        length = max(len(w["input_ids"]) for w in picked)
        assert batch["input_ids"].shape == (8, length)
        for i, w in enumerate(picked):
            n = len(w["input_ids"])
            assert batch["input_ids"][i, :n].tolist() == w["input_ids"] and not batch["input_ids"][i, n:].any()
            assert batch["context_mask"][i, :n].tolist() == w["context_mask"]
            assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (length - n)
        assert batch["is_impossible"].tolist() == [float(w["is_impossible"]) for w in picked]
        assert batch["position"].tolist() == list(range(8 * k, 8 * k + 8))


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_step_clock_times_the_steps_less_the_validations_between_them(monkeypatch):
    """train_s runs from the first step's start to the last step's end, less the validations
    between two steps; a validation after the last step (GLUE's final dev pass) is the run's
    evaluation, not its loop; setup_s is the attempt's start to the first step."""
    from convexp.train import clock as clock_module

    now = _Clock()
    monkeypatch.setattr(clock_module.time, "time", now)
    c = clock_module.StepClock(started=990.0)

    def step(seconds):
        c.on_train_batch_start(None, None, None, 0)
        now.now += seconds
        c.on_train_batch_end(None, None, None, None, 0)

    def validate(seconds):
        c.on_validation_start(None, None)
        now.now += seconds
        c.on_validation_end(None, None)

    step(2.0)
    now.now += 0.5  # the loop around the step: counted
    step(2.0)
    validate(7.0)  # after an epoch: between two steps
    step(2.0)
    validate(3.0)  # after the last step
    now.now += 1.0
    t = c.record()
    assert t["steps"] == 3 and t["setup_s"] == pytest.approx(10.0) and t["validation_s"] == pytest.approx(7.0)
    assert t["train_s"] == pytest.approx(6.5) and t["first_step"] == 1000.0 and t["last_step"] == pytest.approx(1013.5)
    assert t["written"] == pytest.approx(1017.5) and t["started"] == 990.0
    resumed = clock_module.StepClock(started=5.0)  # a run resumed at its last step trains no step
    assert resumed.record(written=6.0) == {"started": 5.0, "written": 6.0, "steps": 0, "train_s": 0.0}


def test_the_runs_rate_is_its_training_steps_rate():
    """metrics.json's examples_per_s: the rows of this attempt's steps over their seconds (clock.py),
    not over the attempt's whole time."""
    from convexp.train.clock import StepClock
    from convexp.train.finetune import Trained

    c = StepClock(started=0.0)
    c.first_step, c.last_step, c.steps = 10.0, 30.0, 40
    trained = Trained(None, None, 0, {"batch_size": 16}, 45.0, 640, clock=c)
    speed = trained.speed()
    assert speed["examples_per_s"] == pytest.approx(40 * 16 / 20.0) and speed["timing"]["train_s"] == 20.0
    assert Trained(None, None, 0, {"batch_size": 16}, 40.0, 640).speed() == {"examples_per_s": 16.0}


def test_fine_tuning_loads_in_the_main_process_on_a_cpu_and_in_workers_on_a_gpu():
    """trainer.num_workers=auto (fine-tuning's default): no loader process on a CPU run, where one
    would take a core from the step, two on a GPU run; a number is kept; pre-training takes a number."""
    from omegaconf import OmegaConf

    from convexp.config.compose import compose_stage
    from convexp.errors import ConfigError
    from convexp.train.accel import loader_workers

    cfg = compose_stage("finetune", ["task=rte", "init=x"])
    assert cfg.trainer.num_workers == "auto"
    for accelerator, workers in (("cpu", 0), ("gpu", 2)):
        assert loader_workers(OmegaConf.merge(cfg.trainer, {"accelerator": accelerator})) == workers
    assert loader_workers(OmegaConf.merge(cfg.trainer, {"num_workers": 3, "accelerator": "cpu"})) == 3
    with pytest.raises(ConfigError, match="trainer.num_workers=auto is fine-tuning's"):
        compose_stage("pretrain", ["scale=smoke", "trainer.num_workers=auto"])
    with pytest.raises(ConfigError, match="trainer.num_workers=many"):
        compose_stage("finetune", ["task=rte", "init=x", "trainer.num_workers=many"])


def test_a_training_value_is_logged_only_on_the_steps_whose_logs_are_written():
    """TaskModule.log_step: Lightning's logging (~1 ms a step) only every log_every_n_steps and at
    the last step, the steps Lightning's loggers write (the progress bar shows the last value)."""
    from types import SimpleNamespace

    from convexp.train.task_module import TaskModule

    module = TaskModule({"lr": 1e-3}, total_steps=10, seed=0)
    module._trainer = SimpleNamespace(global_step=0, log_every_n_steps=4, max_steps=10)
    logged = []
    module.log = lambda name, value, **kw: logged.append((module._trainer.global_step + 1, name, value))
    for step in range(10):
        module._trainer.global_step = step
        module.log_step("train/loss", float(step))
    assert logged == [(4, "train/loss", 3.0), (8, "train/loss", 7.0), (10, "train/loss", 9.0)]


def test_a_steps_seed_gives_the_draws_torch_manual_seed_gives():
    """seed_step seeds the CPU's generator (and a CUDA device's) as torch.manual_seed does, so a
    step's dropout is the same, without torch.manual_seed's walk over every backend."""
    from convexp.train.common import seed_step, step_seed

    seed = step_seed(42, 96)
    torch.manual_seed(seed)
    expect = torch.rand(6), torch.nn.functional.dropout(torch.ones(8), 0.5)
    seed_step(seed, torch.device("cpu"))
    got = torch.rand(6), torch.nn.functional.dropout(torch.ones(8), 0.5)
    assert all(torch.equal(a, b) for a, b in zip(got, expect))
    seed_step(torch.tensor(seed), torch.device("cpu"))  # a batch's position as a tensor
    assert torch.equal(torch.rand(6), expect[0])


@pytest.mark.parametrize("gpus", [False, True])
def test_a_cpu_sweeps_worker_runs_node_after_node(gpus):
    """launcher=local's workers: without GPUs one process runs node after node (the imports paid once
    per worker); with GPUs every node gets a fresh process (its CUDA_VISIBLE_DEVICES set before CUDA
    starts)."""
    import os

    from convexp.sweep.launchers import pool_executor

    with pool_executor(1, gpus) as pool:
        pids = [pool.submit(os.getpid).result() for _ in range(2)]
    assert (pids[0] == pids[1]) is not gpus


def test_squad_windows_are_made_once_per_task_and_tokenizer(tmp_path, monkeypatch):
    """cached_features: a second fine-tune of the task reads the windows the first made (the same
    windows); other questions, another window setting or another tokenizer make their own."""
    from convexp.data.tokenizer import Tokenizer
    from convexp.tasks.squad import features
    from convexp.tasks.squad.data import synthetic_squad

    records = synthetic_squad(40, 0)["train"]
    words = sorted({w for r in records for w in (r["context"] + " " + r["question"]).replace("?", " ").split()})
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", *words]))
    tok = Tokenizer.load(tmp_path / "vocab.txt")
    window = {"max_len": 48, "doc_stride": 16, "max_query_len": 64, "stride_mode": "step"}
    made, real = [], features.squad_features
    monkeypatch.setattr(features, "squad_features", lambda *a, **k: made.append(1) or real(*a, **k))
    first = features.cached_features(records, tok, tmp_path / "cache", **window)
    again = features.cached_features(records, tok, tmp_path / "cache", **window)
    assert again == first == real(records, tok, **window) and len(made) == 1
    features.cached_features(records[:-1], tok, tmp_path / "cache", **window)
    features.cached_features(records, tok, tmp_path / "cache", **{**window, "doc_stride": 8})
    assert len(made) == 3 and len(list((tmp_path / "cache").glob("squad-windows-*.pkl"))) == 3
    left = [p.name for p in (tmp_path / "cache").glob(".*") if not p.name.startswith(".lock-")]
    assert left == []  # no partial file left (the entries' locks stay, as every cache entry's do)


def test_a_training_batch_says_from_the_host_whether_it_is_padded(monkeypatch):
    """The collates note whether any row is padded (a host bool), and the step hands it to the
    encoder, which then reads nothing back from the device to know (on a GPU: no sync a step)."""
    from convexp.models import ModelConfig
    from convexp.models.encoder import Encoder
    from convexp.tasks.classification.evaluate import Padded
    from convexp.tasks.classification.registry import get_task
    from convexp.tasks.classification.stage import FinetuneModule
    from convexp.tasks.squad.stage import WindowBatches

    def row(n, position):
        return {"input_ids": [2] + [7] * (n - 2) + [3], "token_type_ids": [0] * n, "attention_mask": [1] * n,
                "label": 1, "idx": position, "position": position}  # fmt: skip

    def window(n, position):
        return {"input_ids": [5] * n, "token_type_ids": [0] * n, "context_mask": [1] * n, "start_position": 0,
                "end_position": 0, "is_impossible": False, "feature_index": position, "position": position}  # fmt: skip

    for collate, make in ((Padded(0), row), (WindowBatches(0), window)):
        assert collate([make(6, 0), make(6, 1)])["padded"] is False
        assert collate([make(6, 0), make(4, 1)])["padded"] is True
    seen = []
    forward = Encoder.forward
    monkeypatch.setattr(Encoder, "forward", lambda self, *a, **k: seen.append(k.get("padded")) or forward(self, *a, **k))
    cfg = ModelConfig(vocab_size=20, hidden_size=16, num_heads=2, intermediate_size=32, num_layers=1)
    module = FinetuneModule(cfg, get_task("sst2"), {"lr": 1e-3}, 1, 0)
    for batch in (Padded(0)([row(6, 0), row(4, 1)]), Padded(0)([row(5, 0), row(5, 1)])):
        module.forward_batch(batch)
    assert seen == [True, False]
