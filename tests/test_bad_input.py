"""Every bad input a user can give, across every command: one line naming the key or file, exit
code 2, no traceback, and nothing written under the outputs folder."""

from __future__ import annotations

import json

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
    for name, junk in (("binary_glue", b"\x00\x01\r\x00" * 550), ("undecodable_glue", b"\x80\x01\r\xff" * 550)):
        d = bad / name / "SST-2"  # 2.2 KB of bytes that are not text, no line break: once all in the line
        d.mkdir(parents=True)
        (d / "train.tsv").write_bytes(junk)
        (d / "dev.tsv").write_bytes(junk)
    nolabel = bad / "nolabel_glue" / "SST-2"  # a header without the label column
    nolabel.mkdir(parents=True)
    for split in ("train", "dev"):
        (nolabel / f"{split}.tsv").write_text("sentence\na b\n")
    (bad / "corpus.jsonl").write_text('{"text": "a b c"}\n' * 50 + '{"text": "broken\n' + '{"text": "a"}\n')
    (bad / "broken_tokenizer.json").write_text('{"version": "1.0", "model": nonsense')
    (bad / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    corrupt = bad / "corrupt_model"
    corrupt.mkdir()
    (corrupt / "model_config.json").write_text('{"hidden_size": 32, "num_heads": 2, "num_layers": 1}')
    (corrupt / "model.safetensors").write_bytes(b"\x00\x01 not safetensors")
    hf = {"model_type": "bert", "hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 1,
          "intermediate_size": 64, "vocab_size": 10, "max_position_embeddings": 512}
    truncated = bad / "hf_truncated"  # a download cut short: config.json ends mid-string
    truncated.mkdir()
    (truncated / "config.json").write_text(json.dumps(hf)[:30])
    (truncated / "model.safetensors").write_bytes(b"")
    for name, weights in (("hf_bad_safetensors", "model.safetensors"), ("hf_bad_bin", "pytorch_model.bin")):
        d = bad / name  # a Hugging Face directory whose weights cannot be read
        d.mkdir()
        (d / "config.json").write_text(json.dumps(hf))
        (d / weights).write_bytes(b"\x00\x01 not weights")
        (d / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")  # its tokenizer, as a download has
    user = bad / "confdir" / "model"  # a --config-dir with a file that is not YAML
    user.mkdir(parents=True)
    (user / "broken.yaml").write_text("name: [unclosed\n  x: : y\n")
    (bad / "exists.yaml").write_text("x: 1\n")
    # issue 65: what a checkpoint's or a task file's head shows, refused before torch
    for name, config in (("hf_gpt2", {"model_type": "gpt2", "n_embd": 32}), ("hf_short", {**hf, "max_position_embeddings": 16}),
                         ("hf_no_tokenizer", hf)):  # fmt: skip
        d = bad / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        (d / "model.safetensors").write_bytes(_safetensors())
        if name != "hf_no_tokenizer":
            (d / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    badlabel = bad / "badlabel_glue" / "SST-2"
    badlabel.mkdir(parents=True)
    for split in ("train", "dev"):
        (badlabel / f"{split}.tsv").write_text("sentence\tlabel\na b\t1\nc d\tmaybe\n")
    (bad / "squad").mkdir()
    (bad / "squad" / "train-v1.1.json").write_text('{"data": [{"title": "x", "paragraphs": [')  # cut short
    (bad / "squad" / "dev-v1.1.json").write_text('{"data": []}')
    (bad / "header_only.csv").write_text("sentence,label\n")
    # files that exist and cannot be read, whoever runs the tests (root reads a chmod 000 file):
    # reading /proc/self/mem at offset 0 fails with EIO
    (bad / "unreadable_glue" / "SST-2").mkdir(parents=True)
    (bad / "unreadable_glue" / "SST-2" / "train.tsv").symlink_to("/proc/self/mem")
    (bad / "unreadable_glue" / "SST-2" / "dev.tsv").write_text("sentence\tlabel\na b\t1\n")
    (bad / "unreadable_corpus").mkdir()
    (bad / "unreadable_corpus" / "corpus.txt").symlink_to("/proc/self/mem")
    return bad


def _safetensors() -> bytes:
    """A valid safetensors file of one tensor (the header is all the checks read)."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    return len(header).to_bytes(8, "little") + header + b"\x00" * 4


PRE = ["pretrain", "scale=smoke"]
RANDOM_INIT = ["scale=smoke", "init=none", "model=bert_small", "tokenizer_path={bad}/vocab.txt"]
FT = ["finetune", "glue", *RANDOM_INIT]
PROBING = ["finetune", "probing", *RANDOM_INIT]
SQUAD = ["finetune", "squad", *RANDOM_INIT]
ABLATE = ["ablate", "key-based-conv", "--dry-run"]

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
    ("name unicode unquoted", [*PRE, "name=Ünïcode-名前"], ["quote", "name='Ünïcode-名前'"]),
    ("finetune name climbs out", [*FT, "name=../x"], ["name"]),
    ("compile unknown mode", [*PRE, "trainer.compile=maybe"], ["trainer.compile"]),
    ("seed text", [*PRE, "seed=abc"], ["seed"]),
    ("seq_len zero", [*PRE, "seq_len=0"], ["seq_len"]),
    ("seq_len text", [*PRE, "seq_len=abc"], ["seq_len", "e.g. seq_len=128"]),  # its own example, not mask_prob's
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
    ("GLUE folder missing, task=all", [*FT, "task=all", "glue.source=local", "glue.path={bad}/nope"], ["nope"]),
    ("SentEval folder missing, task=all", [*PROBING, "glue.source=local", "glue.path={bad}/nope"], ["nope"]),
    ("TSV header lacks label", [*FT, "task=sst2", "glue.source=local", "glue.path={bad}/nolabel_glue"],
     ["train.tsv", "header lacks column(s) label"]),
    ("tokenizer does not load", ["finetune", "glue", "scale=smoke", "init=none", "model=bert_small",
                                 "tokenizer_path={bad}/broken_tokenizer.json"], ["broken_tokenizer.json", "cannot read"]),
    ("corpus malformed JSON line", [*PRE, "data.source=files", "data.path={bad}/corpus.jsonl"],
     ["corpus.jsonl", "JSON parse error", "row 50"]),
    ("header-only TSV", [*FT, "task=sst2", "glue.source=local", "glue.path={bad}/glue"], ["train", "no rows"]),
    ("binary TSV", [*FT, "task=sst2", "glue.source=local", "glue.path={bad}/binary_glue"], ["train.tsv:1", "not text"]),
    ("undecodable TSV", [*FT, "task=sst2", "glue.source=local", "glue.path={bad}/undecodable_glue"],
     ["train.tsv", "header lacks", "'…"]),  # a short escaped excerpt of the bytes
    ("max_len beyond positions", [*FT, "task.max_len=100000"], ["max_len", "512"]),
    ("max_train_samples zero", [*FT, "task.max_train_samples=0"], ["max_train_samples"]),
    ("task max_len too short", [*FT, "task=rte", "task.max_len=3"], ["max_len 3", "too short for rte"]),
    ("both orders of single sentences", [*FT, "task=sst2", "both_orders=true"], ["both_orders", "single sentences"]),
    ("probing from the hub", [*PROBING, "task=sentlen", "glue.source=hub"], ["sentlen", "no hub source"]),
    ("grid replaces a given lr", ["finetune", "glue", "init=none", "model=bert_small", "tokenizer_path={bad}/vocab.txt",
                                  "task=rte", "lr=2e-5"],
     ["lr=", "grid", "grid=false"]),
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
    # --- issue 23: every group typed (wrong type, out of range, unknown choice), at composition
    # model
    ("num_layers zero", [*PRE, "model.num_layers=0"], ["num_layers", ">= 1"]),
    ("hidden_size text", [*PRE, "model.hidden_size=wide"], ["model.hidden_size"]),
    ("mixer unknown", [*PRE, "model.mixer=nope"], ["mixer", "attention"]),
    # trainer: Lightning's values
    ("precision unknown", [*PRE, "trainer.precision=fp7"], ["trainer.precision", "bf16-mixed"]),
    ("devices text", [*PRE, "trainer.devices=abc"], ["trainer.devices", "e.g."]),
    ("devices zero", [*PRE, "trainer.devices=0"], ["trainer.devices"]),
    ("devices ids on a CPU", [*PRE, "trainer.devices=[0,1]"], ["trainer.devices", "cpu"]),
    ("accelerator tpu", [*PRE, "trainer.accelerator=tpu"], ["trainer.accelerator", "cuda"]),
    ("strategy unknown", [*PRE, "trainer.strategy=nope"], ["trainer.strategy", "ddp"]),
    ("max_steps 23 digits", [*PRE, "trainer.max_steps=12345678901234567890123"], ["trainer.max_steps", "2**63"]),
    ("finetune precision", [*FT, "trainer.precision=fp7"], ["trainer.precision"]),
    ("unknown trainer preset", [*PRE, "trainer=nope"], ["trainer/nope"]),
    # optim
    ("unknown optim preset", [*PRE, "optim=nope"], ["optim/nope"]),
    # data
    ("val_fraction text", [*PRE, "data.val_fraction=abc"], ["data.val_fraction"]),
    ("val_fraction above 1", [*PRE, "data.val_fraction=1.5"], ["data.val_fraction", "(0, 1)"]),
    ("data source unknown", [*PRE, "data.source=nope"], ["data.source", "synthetic"]),
    ("data examples unknown", [*PRE, "data.examples=nope"], ["data.examples", "sentence_pairs"]),
    ("streaming not a bool", [*PRE, "data.streaming=maybe"], ["data.streaming"]),
    ("num_docs zero", [*PRE, "data.num_docs=0"], ["data.num_docs"]),
    # tokenizer
    ("vocab_size text", [*PRE, "tokenizer.vocab_size=abc"], ["tokenizer.vocab_size"]),
    ("vocab_size zero", [*PRE, "tokenizer.vocab_size=0"], ["tokenizer.vocab_size"]),
    ("tokenizer kind unknown", [*PRE, "tokenizer.kind=nope"], ["tokenizer.kind", "wordpiece"]),
    ("pretrained tokenizer without path", [*PRE, "tokenizer=pretrained"], ["tokenizer.path", "required"]),
    # objective
    ("mask_prob above 1", [*PRE, "objective.mask_prob=1.5"], ["objective.mask_prob", "(0, 1)"]),
    ("mask_prob zero", [*PRE, "objective.mask_prob=0"], ["objective.mask_prob"]),
    ("mask_prob text", [*PRE, "objective.mask_prob=abc"], ["objective.mask_prob", "not a number", "mask_prob=0.15"]),
    ("steps_multiplier text", [*PRE, "trainer.steps_multiplier=abc"], ["trainer.steps_multiplier"]),
    ("pair_format unknown", [*PRE, "objective.pair_format=nope"], ["objective.pair_format", "nsp"]),
    ("electra temperature zero", [*PRE, "objective=electra", "objective.temperature=0"], ["objective.temperature"]),
    # logger
    ("logger mode unknown", [*PRE, "logger.mode=sometimes"], ["logger.mode", "offline"]),
    ("logger tags not a list", [*PRE, "logger.tags=abc"], ["logger.tags", "list"]),
    ("finetune logger mode", [*FT, "logger.mode=sometimes"], ["logger.mode"]),
    # scale
    ("scale a number", [*PRE, "scale=0"], ["scale=0", "smoke"]),
    ("finetune scale a number", [*FT, "scale=0"], ["scale", "smoke"]),
    ("finetune scale unknown", [*FT, "scale=huge"], ["huge"]),
    # overrides, config files, outputs
    ("override without a key", [*PRE, "=0.1"], ["'=0.1'", "KEY=VALUE"]),
    ("config file not YAML", ["--config-dir", "{bad}/confdir", "pretrain", "scale=smoke", "model=broken"],
     ["broken.yaml", "YAML", "line 2"]),
    ("outputs under a file", [*PRE, "outputs={bad}/a_file/sub"], ["outputs", "a_file"]),
    ("outputs cannot be made", [*PRE, "outputs=/proc/convexp-out"], ["outputs", "/proc", "cannot be made"]),
    ("corpus file unreadable", [*PRE, "data=files", "data.path={bad}/unreadable_corpus"], ["corpus.txt", "cannot be read"]),
    ("GLUE train.tsv unreadable", [*FT, "task=sst2", "glue.source=local", "glue.path={bad}/unreadable_glue"],
     ["train.tsv", "cannot be read"]),
    ("finetune outputs under a file", [*FT, "outputs={bad}/a_file/sub"], ["outputs"]),
    # pre-training's init: checked before anything is written
    ("pretrain init damaged weights", [*PRE, "init={bad}/hf_bad_safetensors"], ["init=", "damaged"]),
    ("pretrain init truncated config", [*PRE, "init={bad}/hf_truncated"], ["init=", "cannot read"]),
    # finetune glue: the stage's own keys, init, task, glue source, pruning, distill
    ("glue init missing", ["finetune", "glue", "scale=smoke"], ["init is required", "e.g. init="]),
    ("init=none without a model", ["finetune", "glue", "scale=smoke", "init=none"], ["init=none needs model="]),
    ("probing init missing", ["finetune", "probing", "scale=smoke"], ["init is required"]),
    ("squad init missing", ["finetune", "squad", "scale=smoke"], ["init is required"]),
    ("init truncated config.json", ["finetune", "glue", "scale=smoke", "init={bad}/hf_truncated"], ["hf_truncated", "cannot read"]),
    ("init unreadable safetensors", ["finetune", "glue", "scale=smoke", "init={bad}/hf_bad_safetensors"], ["damaged"]),
    ("init unreadable pytorch_model.bin", ["finetune", "glue", "scale=smoke", "init={bad}/hf_bad_bin"], ["hf_bad_bin", "cannot read"]),
    ("init another architecture", ["finetune", "glue", "scale=smoke", "init={bad}/hf_gpt2"], ["'gpt2' checkpoint", "bert, electra, convbert"]),
    ("init position table too short", ["finetune", "glue", "scale=smoke", "task=rte", "init={bad}/hf_short"],
     ["task.max_len=128", "max_position_embeddings=16", "hf_short"]),
    ("init without a tokenizer", ["finetune", "glue", "scale=smoke", "init={bad}/hf_no_tokenizer"], ["no tokenizer file", "tokenizer_path="]),
    ("TSV label outside the task's", [*FT, "task=sst2", "glue.source=local", "glue.path={bad}/badlabel_glue"], ["train.tsv:3", "maybe"]),
    ("SQuAD JSON cut short", [*SQUAD, "task=squad1", "squad.source=local", "squad.path={bad}/squad"], ["train-v1.1.json", "not valid JSON"]),
    ("custom task header-only file", [*FT, "task=custom", "task.train_file={bad}/header_only.csv",
     "task.validation_file={bad}/header_only.csv", "task.num_labels=2"], ["header_only.csv has no rows"]),
    ("classifier unknown", [*FT, "classifier=nope"], ["classifier", "pooler"]),
    ("scalar_mix not a bool", [*FT, "scalar_mix=maybe"], ["scalar_mix"]),
    ("scalar_mix_norm unknown", [*FT, "scalar_mix_norm=nope"], ["scalar_mix_norm", "per_layer"]),
    ("retry_diverged not a bool", [*FT, "retry_diverged=perhaps"], ["retry_diverged"]),
    ("keep_weights unknown", [*FT, "keep_weights=some"], ["keep_weights='some'", "auto, all, none"]),
    ("warmup_fraction text", [*FT, "warmup_fraction=abc"], ["warmup_fraction"]),
    ("task max_len text", [*FT, "task.max_len=abc"], ["task.max_len"]),
    ("glue source unknown", [*FT, "glue.source=nope"], ["glue.source", "local"]),
    ("glue synthetic_size zero", [*FT, "glue.synthetic_size=0"], ["glue.synthetic_size"]),
    ("glue synthetic_size text", [*FT, "glue.synthetic_size=abc"], ["glue.synthetic_size"]),
    ("pruning threshold above 1", [*FT, "pruning=movement", "pruning.final_threshold=2"], ["pruning.final_threshold"]),
    ("pruning threshold zero", [*FT, "pruning=movement", "pruning.final_threshold=0"], ["pruning.final_threshold"]),
    ("pruning threshold text", [*FT, "pruning=movement", "pruning.final_threshold=abc"], ["pruning.final_threshold"]),
    ("soft movement tau 1", [*FT, "pruning=soft_movement", "pruning.final_threshold=1"], ["[0, 1)", "e.g. pruning.final_threshold=0.1"]),
    ("pruning method unknown", [*FT, "pruning=movement", "pruning.method=nope"], ["pruning.method", "topk"]),
    ("unknown pruning preset", [*FT, "pruning=nope"], ["pruning/nope"]),
    ("distill alpha text", [*FT, "distill.alpha_ce=abc"], ["distill.alpha_ce"]),
    ("distill temperature zero", [*FT, "distill.temperature=0"], ["distill.temperature"]),
    ("distill temperature negative", [*FT, "distill.temperature=-2"], ["distill.temperature"]),
    ("distill teacher missing", [*FT, "distill.teacher={bad}/nope"], ["distill.teacher", "does not exist"]),
    # finetune probing
    ("probing max_len text", [*PROBING, "task.max_len=abc"], ["task.max_len"]),
    ("probing samples zero", [*PROBING, "task.max_train_samples=0"], ["max_train_samples"]),
    ("probing unknown task", [*PROBING, "task=nope"], ["nope"]),
    # finetune squad
    ("squad synthetic_size text", [*SQUAD, "squad.synthetic_size=abc"], ["squad.synthetic_size"]),
    ("squad doc_stride zero", [*SQUAD, "squad.doc_stride=0"], ["squad.doc_stride"]),
    ("squad stride beyond window", [*SQUAD, "squad.doc_stride=200"], ["squad.doc_stride", "squad.max_len"]),
    ("squad source unknown", [*SQUAD, "squad.source=nope"], ["squad.source", "local"]),
    ("squad teacher missing", [*SQUAD, "distill.teacher={bad}/nope"], ["distill.teacher"]),
    # ablate: its own settings and the launcher
    ("ablate seeds text", [*ABLATE, "seeds=[abc]"], ["seeds", "e.g. seeds="]),
    ("ablate seeds negative", [*ABLATE, "seeds=[-1]"], ["seeds"]),
    ("ablate tasks not a list", [*ABLATE, "tasks=5"], ["tasks", "list"]),
    ("ablate tflops zero", [*ABLATE, "tflops=0"], ["tflops"]),
    ("ablate scale a number", [*ABLATE, "scale=0"], ["scale"]),
    ("launcher workers text", [*ABLATE, "launcher.workers=abc"], ["launcher.workers", "e.g."]),
    ("launcher workers zero", [*ABLATE, "launcher.workers=0"], ["launcher.workers", ">= 1"]),
    ("launcher per_gpu zero", [*ABLATE, "launcher.per_gpu=0"], ["launcher.per_gpu", ">= 1"]),
    ("launcher per_gpu negative", [*ABLATE, "launcher.per_gpu=-1"], ["launcher.per_gpu", ">= 1"]),
    ("launcher per_gpu text", [*ABLATE, "launcher.per_gpu=abc"], ["launcher.per_gpu=abc", "auto"]),
    ("launcher unknown", [*ABLATE, "launcher=nope"], ["launcher/nope"]),
    ("launcher cluster unknown", [*ABLATE, "launcher=submitit", "launcher.cluster=nope"], ["launcher.cluster", "slurm"]),
    ("ablate stage value", [*ABLATE, "pretrain.trainer.precision=fp7"], ["trainer.precision"]),
    # report
    ("report of a sweep never run", ["report", "key-based-conv", "scale=smoke"], ["no finished runs", "convexp ablate"]),
    ("report format unknown", ["report", "key-based-conv", "--format", "pdf"], ["pdf", "latex"]),
    ("report source unknown", ["report", "key-based-conv", "--source", "s3"], ["s3", "wandb"]),
    # export
    ("export batch zero", ["export", "{bad}/corrupt_model", "--batch", "0", "--out", "{bad}/export"], ["--batch"]),
    ("export a HF checkpoint", ["export", "{bad}/hf_bad_bin", "--out", "{bad}/export"], ["Hugging Face", "convexp run"]),
    ("export damaged weights", ["export", "{bad}/corrupt_model", "--out", "{bad}/export"], ["damaged"]),
    ("export tokenizer not one", ["export", "{bad}/corrupt_model", "--tokenizer", "{bad}/a_file", "--out", "{bad}/export"],
     ["--tokenizer"]),
    # cp
    ("cp onto an existing file", ["cp", "model/convbert_small", "{bad}/exists.yaml"], ["exists", "never overwrites"]),
    ("cp under a file", ["cp", "model/convbert_small", "{bad}/a_file/x.yaml"], ["cannot write"]),
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
    assert lines[0].isprintable(), lines[0]  # no raw bytes of a file (NUL, CR): an escaped excerpt at most
    for w in words:
        assert w in lines[0], lines[0]
    assert not any(outputs.iterdir()), sorted(p.name for p in outputs.rglob("*"))


def test_a_quoted_excerpt_of_a_file_is_short_and_printable():
    from convexp.data.text_files import quoted

    for value in ("\x00\x01\r\x00" * 550, "\ufffd\x01\r" * 700, "é" * 200, 10**80):
        shown = quoted(value)
        assert len(shown) <= 60 and shown.isprintable() and shown.endswith("…"), shown
    assert quoted("sentence\tlabl") == "'sentence\\tlabl'"  # short values whole, as repr shows them


def test_a_refusal_after_the_run_dir_is_made_removes_what_it_made(tmp_path):
    from convexp.errors import UserError
    from convexp.store.runs import Run, RunDiverged

    run = Run(tmp_path / "runs" / "pretrain" / "x-0123456789")
    with pytest.raises(UserError), run.removed_on_refusal():
        run.dir.mkdir(parents=True)
        run.write_json("status.json", {"status": "running"})
        raise UserError("init=... does not match the model")
    assert not any(tmp_path.iterdir())  # the run and the store's folders it made
    with pytest.raises(RunDiverged), run.removed_on_refusal():  # a diverged run is a result: kept
        run.dir.mkdir(parents=True)
        raise RunDiverged("training diverged")
    assert run.dir.is_dir()
    with pytest.raises(UserError), run.removed_on_refusal():  # a directory it did not make: kept
        raise UserError("refused")
    assert run.dir.is_dir()


def _diverged(run) -> dict:
    run.dir.mkdir(parents=True, exist_ok=True)
    run.set_status("diverged", error="training diverged: non-finite loss at step 3")
    return run.read_json("status.json")


@pytest.mark.parametrize("stage", ["pretrain", "finetune"])
def test_a_diverged_run_is_not_trained_again_unless_asked(tmp_path, files, monkeypatch, stage):
    from convexp.config.compose import compose_stage
    from convexp.train.finetune import resolve_init
    from convexp.tasks.pretraining.runs import pretrain_run
    from convexp.tasks import command
    from convexp.tasks.classification.runs import classification_runs

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", "")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    args = [a.replace("{bad}", str(files)) for a in (PRE if stage == "pretrain" else [*FT, "task=rte"])]
    if stage == "pretrain":
        run = pretrain_run(compose_stage("pretrain", args[1:]))
    else:
        cfg, others = command("glue").compose(args[2:], compose_stage("finetune", args[2:]))
        init = resolve_init(cfg)
        [planned] = classification_runs(cfg, init.slug, init.model_cfg.hidden_size, others)
        run = planned.run
    before = _diverged(run)
    res = runner.invoke(app, args, terminal_width=400)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) <= 3 and "Traceback" not in res.output, res.output
    assert f"{run.dir} diverged before" in res.output and "retry_diverged=true" in res.output
    assert run.read_json("status.json") == before  # not started again
    assert not (run.dir / "checkpoints").exists()
    run.refuse_diverged(retry=True)  # retry_diverged=true lets it train


@pytest.mark.parametrize(
    "stage, args",
    [
        ("pretrain", ["scale=smoke", "trainer.precision=16", "trainer.devices=auto", "name='Ünïcode-名前'"]),
        ("pretrain", ["objective=electra", "trainer.accelerator=gpu", "trainer.devices=[0,1]", "trainer.strategy=ddp"]),
        ("finetune", ["init=x", "task=squad1", "seeds=[1,2]", "distill.temperature=0.5", "logger.tags=[a,b]"]),
    ],
)
def test_checking_accepts_good_values_and_changes_nothing(stage, args):
    """The schemas only check: the composed config (what run ids hash) is Hydra's, unchanged."""
    from omegaconf import OmegaConf

    from convexp.config.compose import _keys_read, _paper_run, _task_pruning, compose, compose_stage, stage_overrides

    checked = OmegaConf.to_container(compose_stage(stage, args))
    del checked["invocation"]
    overrides = stage_overrides(stage, args)
    hydra = compose(stage, overrides, choices=True)
    if stage == "finetune":  # the stage's own reshaping (the keys a fine-tuning run reads), not a check
        _task_pruning(hydra, overrides)
        _keys_read(hydra)
    if stage == "pretrain":  # the recipe's run (its corpus above smoke), not a check
        hydra = _paper_run(hydra, overrides)
    assert checked == OmegaConf.to_container(hydra)


def test_a_sweep_skips_a_diverged_node_unless_retry_diverged(tmp_path):
    from convexp.store.runs import Run
    from convexp.sweep.execute import settled
    from convexp.sweep.nodes import Node

    run = Run(tmp_path / "runs" / "finetune" / "m-rte-s42-0123456789")
    _diverged(run)
    skipped = settled(Node("finetune/a/rte/s42", "finetune", "a", ["task=rte"], [run]))
    assert skipped.status == "diverged" and "retry_diverged=true" in skipped.error and str(run.dir) in skipped.error
    assert settled(Node("finetune/a/rte/s42", "finetune", "a", ["task=rte", "retry_diverged=true"], [run])) is None


@pytest.mark.parametrize("name", ["pretrain init missing", "GLUE folder missing"])
def test_bad_input_on_a_gpu_host_is_still_one_line(tmp_path, files, monkeypatch, name):
    """Where CUDA is visible a smoke run notes that it runs on the CPU, but only once its inputs
    are checked: bad input still gets its one line (the suite first ran on an H200 this way)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args, words = next(c[1:] for c in CASES if c[0] == name)
    test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, files, monkeypatch, args, words)


# The refusals that need a whole file's content or torch: a TSV's rows (empty, binary, undecodable,
# unreadable past its first line), a corpus that cannot be read past os.access, a pytorch_model.bin,
# and convexp export's weights: made by the stage (or export), which imports torch first. Every other
# refusal comes from the task's check, with the light readers (json, safetensors' header, a TSV's
# header line, pyarrow's JSON reader, tokenizers): a damaged safetensors file or config, a header
# without its column, a malformed JSON line, a tokenizer that does not load (issue 56).
READS_CONTENT = {
    "binary TSV", "undecodable TSV", "GLUE train.tsv unreadable", "corpus file unreadable",
    "init unreadable pytorch_model.bin", "export damaged weights",
}
HEAVY = ("torch", "pytorch_lightning", "lightning", "lightning_fabric", "transformers", "datasets")
BLOCKED = f'''
import importlib.abc, json, sys
class Heavy(Exception):
    pass
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise Heavy(name)
sys.meta_path.insert(0, Blocker())
from typer.testing import CliRunner
from convexp.cli import app
cases, out = json.loads(sys.stdin.read()), {{}}
for name, args in cases:
    res = CliRunner().invoke(app, args, terminal_width=400)
    e = res.exception
    while e is not None and not isinstance(e, Heavy):
        e = e.__cause__ or e.__context__
    out[name] = [res.exit_code, str(e) if e else None]
print(json.dumps(out))
'''


@pytest.mark.parametrize("part", range(4))  # four processes, so that two workers share them
def test_refusals_that_need_no_file_content_come_before_torch_and_lightning(tmp_path, files, part):
    """Every bad input whose refusal needs no file's content is refused (exit 2) with torch,
    Lightning, datasets and transformers unimportable: refused before they are imported, at once."""
    import os
    import subprocess
    import sys

    outputs = tmp_path / "outputs"
    outputs.mkdir()
    env = {**os.environ, "CONVEXP_OUTPUTS": str(outputs), "CONVEXP_CONFIG_PATH": "", "WANDB_MODE": "disabled"}
    cases = [(c[0], [a.replace("{bad}", str(files)) for a in c[1]]) for c in CASES if c[0] not in READS_CONTENT]
    cases = cases[part::4]
    done = subprocess.run([sys.executable, "-c", BLOCKED], input=json.dumps(cases), capture_output=True,
                          text=True, env=env, cwd=tmp_path, check=True)  # fmt: skip
    got = json.loads(done.stdout.splitlines()[-1])
    late = {name: heavy for name, (code, heavy) in got.items() if heavy}
    assert late == {}, f"refused only after importing: {late}"
    assert {name: code for name, (code, _) in got.items() if code != 2} == {}
    assert not any(outputs.iterdir())


def _tree(root) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("what", ["custom task without its label column", "corpus of malformed JSON lines"])
def test_a_refused_file_leaves_the_datasets_cache_as_it_was(tmp_path, files, monkeypatch, what):
    """datasets writes its Arrow copy of a local file (and lock files) before convexp sees the
    columns: a refusal takes them out again, and leaves what was cached before."""
    from datasets import config

    cache = tmp_path / "hf-datasets"
    (cache / "earlier").mkdir(parents=True)
    (cache / "earlier" / "kept.arrow").write_text("x")
    before = _tree(cache)
    monkeypatch.setattr(config, "HF_DATASETS_CACHE", str(cache))
    data = tmp_path / "data"
    data.mkdir()
    if what.startswith("custom"):
        for split in ("train", "dev"):
            (data / f"{split}.csv").write_text("sentence,other\nhello world,1\nbye now,0\n")
        args = [*FT, "task=custom", f"task.train_file={data}/train.csv", f"task.validation_file={data}/dev.csv",
                "task.text_fields=[sentence]", "task.label_field=label", "task.num_labels=2"]  # fmt: skip
        words = ["no column label"]
    else:
        (data / "corpus.jsonl").write_text('{"text": "a fine line"}\n{"text": "cut sh\n')
        args, words = [*PRE, "data=files", f"data.path={data}"], ["cannot read"]
    test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, files, monkeypatch, args, words)
    assert _tree(cache) == before


def test_outputs_that_cannot_be_made_and_unreadable_files_are_one_line(tmp_path, monkeypatch):
    """Permissions alone do not tell whether outputs can be made (/proc says yes) nor a file
    read (root reads anything): both refusals are one line naming the path, not a traceback."""
    import os

    from convexp.data.digests import Digests
    from convexp.data.errors import DataPathError
    from helpers import write_vocab

    from convexp.data.text_files import readable
    from convexp.data.tokenizer import check_tokenizer
    from convexp.errors import UserError
    from convexp.train import inputs

    if os.path.isdir("/proc/self"):
        with pytest.raises(UserError, match="outputs '/proc/convexp-out' cannot be made in /proc"):
            inputs.check_outputs_writable("/proc/convexp-out")
    inputs.check_outputs_writable(tmp_path / "a" / "b")  # makable: nothing is left behind
    assert not any(tmp_path.iterdir())
    f = tmp_path / "train.tsv"
    f.write_text("sentence\tlabel\n")
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(DataPathError, match="train.tsv cannot be read"):
        readable(f, "data.path")
    with pytest.raises(DataPathError, match="tokenizer_path: .*vocab.txt cannot be read"):
        check_tokenizer(write_vocab(tmp_path / "vocab.txt", ["a"]), "tokenizer_path")
    monkeypatch.setenv("CONVEXP_CACHE", str(tmp_path / "cache"))

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("convexp.data.digests._file_digest", refused)
    with pytest.raises(DataPathError, match=r"train.tsv cannot be read \(Permission denied\)"):
        Digests().of(f)
