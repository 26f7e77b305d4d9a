"""Every bad input a user can give, across every command: one line naming the key or file, exit
code 2, no traceback, and nothing written under the outputs folder."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from convexp.cli import app

runner = CliRunner()


@pytest.fixture
def files(tmp_path):
    """Bad files and folders the cases point at, outside the outputs folder."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a_file").write_text("not a folder\n")
    sst2 = bad / "glue" / "SST-2"
    sst2.mkdir(parents=True)
    (sst2 / "train.tsv").write_text("sentence\tlabel\n")  # a header, no rows
    (sst2 / "dev.tsv").write_text("sentence\tlabel\n")
    (bad / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    corrupt = bad / "corrupt_model"
    corrupt.mkdir()
    (corrupt / "model_config.json").write_text('{"hidden_size": 32, "num_heads": 2, "num_layers": 1}')
    (corrupt / "model.safetensors").write_bytes(b"\x00\x01 not safetensors")
    return bad


PRE = ["pretrain", "scale=smoke"]
FT = ["finetune", "glue", "scale=smoke", "init=none", "model=bert_small", "tokenizer_path={bad}/vocab.txt"]

CASES = [
    # (id, arguments ({bad} is the folder of bad files), words the one line must contain)
    ("lr negative", [*PRE, "optim.lr=-1"], ["optim.lr"]),
    ("lr zero", [*PRE, "optim.lr=0"], ["optim.lr"]),
    ("lr text", [*PRE, "optim.lr=fast"], ["optim.lr"]),
    ("max_steps zero", [*PRE, "trainer.max_steps=0"], ["trainer.max_steps"]),
    ("max_steps text", [*PRE, "trainer.max_steps=abc"], ["trainer.max_steps"]),
    ("batch_size zero", [*PRE, "trainer.batch_size=0"], ["trainer.batch_size"]),
    ("batch_size negative", [*PRE, "trainer.batch_size=-8"], ["trainer.batch_size"]),
    ("val every zero", [*PRE, "trainer.val_every_n_steps=0"], ["trainer.val_every_n_steps"]),
    ("accumulate zero", [*PRE, "trainer.accumulate_grad_batches=0"], ["accumulate_grad_batches"]),
    ("eps zero", [*PRE, "optim.eps=0"], ["optim.eps"]),
    ("betas one number", [*PRE, "optim.betas=[0.9]"], ["optim.betas"]),
    ("warmup negative", [*PRE, "optim.warmup_steps=-1"], ["optim.warmup_steps"]),
    ("name a number", [*PRE, "name=123"], ["name"]),
    ("name climbs out", [*PRE, "name=../../escape"], ["name", "'..'"]),
    ("name a path", [*PRE, "name=a/b"], ["name", "'/'"]),
    ("finetune name climbs out", [*FT, "name=../x"], ["name"]),
    ("compile unknown mode", [*PRE, "trainer.compile=maybe"], ["trainer.compile"]),
    ("seed text", [*PRE, "seed=abc"], ["seed"]),
    ("seq_len zero", [*PRE, "seq_len=0"], ["seq_len"]),
    ("seq_len beyond positions", [*PRE, "seq_len=100000"], ["seq_len", "max_position_embeddings"]),
    ("head_ratio zero", [*PRE, "model.head_ratio=0"], ["head_ratio"]),
    ("head_ratio above heads", [*PRE, "model.head_ratio=99"], ["head_ratio"]),
    ("kernel text", [*PRE, "model.kernel_size=abc"], ["model.kernel_size"]),
    ("kernel even", [*PRE, "model.kernel_size=4"], ["kernel_size"]),
    ("unknown preset", [*PRE, "model=nope"], ["model/nope"]),
    ("unknown objective", [*PRE, "objective=nope"], ["objective/nope"]),
    ("unknown key", [*PRE, "nokey=1"], ["nokey"]),
    ("unknown model key", [*PRE, "+model.nokey=1"], ["model.nokey"]),
    ("not an override", [*PRE, "seed"], ["seed"]),
    ("sweep syntax", [*PRE, "seed=1,2"], ["seed=1,2"]),
    ("outputs is a file", [*PRE, "outputs={bad}/a_file"], ["a_file"]),
    ("pretrain init missing", [*PRE, "init={bad}/nope"], ["nope"]),
    ("corpus folder missing", [*PRE, "data=files", "data.path={bad}/nope"], ["nope"]),
    ("seeds text", [*FT, "seeds=abc"], ["seeds"]),
    ("seeds empty", [*FT, "seeds=[]"], ["seeds"]),
    ("seeds not integers", [*FT, "seeds=[1,x]"], ["seeds"]),
    ("finetune lr zero", [*FT, "lr=0"], ["lr"]),
    ("epochs zero", [*FT, "epochs=0"], ["epochs"]),
    ("finetune batch zero", [*FT, "batch_size=0"], ["batch_size"]),
    ("layerwise decay above 1", [*FT, "layerwise_lr_decay=2"], ["layerwise_lr_decay"]),
    ("unknown task", [*FT, "task=nope"], ["task/nope"]),
    ("unknown protocol", [*FT, "protocol=nope"], ["protocol"]),
    ("finetune init missing", ["finetune", "glue", "scale=smoke", "init={bad}/nope"], ["nope"]),
    ("corrupt safetensors", ["finetune", "glue", "scale=smoke", "init={bad}/corrupt_model"], ["corrupt_model"]),
    ("GLUE folder missing", [*FT, "glue.source=local", "glue.path={bad}/nope"], ["nope"]),
    ("header-only TSV", [*FT, "task=sst2", "glue.source=local", "glue.path={bad}/glue"], ["train", "no rows"]),
    ("max_len beyond positions", [*FT, "task.max_len=100000"], ["max_len", "512"]),
    ("max_train_samples zero", [*FT, "task.max_train_samples=0"], ["max_train_samples"]),
    ("unknown probing task", ["finetune", "probing", "scale=smoke", "init=x", "task=sst2"], ["sst2"]),
    ("models unknown", ["models", "nope"], ["nope"]),
    ("models seq-len zero", ["models", "--seq-len", "0"], ["--seq-len"]),
    ("bench steps zero", ["bench", "--steps", "0"], ["--steps"]),
    ("bench lengths", ["bench", "--lengths", "12x"], ["--lengths"]),
    ("bench device", ["bench", "--device", "tpu"], ["--device"]),
    ("bench compile mode", ["bench", "--compile", "fast"], ["--compile"]),
    ("bench models", ["bench", "--models", "nope"], ["--models"]),
    ("ablate unknown sweep", ["ablate", "nope", "--dry-run"], ["nope"]),
    ("ablate unknown scale", ["ablate", "key-based-conv", "scale=huge", "--dry-run"], ["huge"]),
    ("ablate unknown variant", ["ablate", "key-based-conv", "variants=[nope]", "--dry-run"], ["nope"]),
    ("ablate unknown key", ["ablate", "key-based-conv", "bogus.key=1", "--dry-run"], ["bogus.key"]),
    ("report unknown sweep", ["report", "nope"], ["nope"]),
    ("export missing run", ["export", "{bad}/nope"], ["nope"]),
    ("cp unknown config", ["cp", "model/nope", "{bad}/copies"], ["model/nope"]),
    ("config dir missing", ["--config-dir", "{bad}/nope", "models"], ["nope"]),
    ("cfg kind", [*PRE, "--cfg", "jobs"], ["jobs"]),
]


@pytest.mark.parametrize("args, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, files, monkeypatch, args, words):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(outputs))
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", "")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, [a.replace("{bad}", str(files)) for a in args], terminal_width=400)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2, res.output + repr(res.exception)
    assert len(lines) == 1, res.output
    assert "Traceback" not in res.output
    for w in words:
        assert w in lines[0], lines[0]
    assert not any(outputs.iterdir()), sorted(p.name for p in outputs.rglob("*"))
