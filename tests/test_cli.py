"""The command line: fast start-up, the `models` listing, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from convexp.cli import app
from convexp.config.compose import group_options

runner = CliRunner()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "convexp.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_help_does_not_import_heavy_modules():
    code = "import sys, convexp.cli; print(sorted(m for m in ('torch', 'hydra', 'pytorch_lightning', 'wandb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    res = run_cli("--help")
    assert res.returncode == 0 and "models" in res.stdout


def test_models_and_ablate_list_do_not_import_torch():
    """`convexp models` counts from shapes and `ablate --list` reads sweep files: neither needs torch
    (which alone takes over a second to import)."""
    code = (
        "import sys\nfrom convexp.cli import main\nsys.argv = ['convexp', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('heavy:', sorted(m for m in ('torch', 'pytorch_lightning', 'wandb') if m in sys.modules))"
    )
    for args in (["models"], ["ablate", "--list"]):
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert "heavy: []" in res.stdout, (args, res.stdout[-300:])


EXITING = """
import atexit, pathlib, sys, threading, time
from convexp.cli import entry
out = pathlib.Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
def late():
    time.sleep(float(sys.argv[2]))
    (out / "thread").write_text("done")
if float(sys.argv[2]) >= 0:
    threading.Thread(target=late).start()  # non-daemon: the exit must wait for it
print("x" * 200_000, end="")  # more than a pipe holds: flushed before the process ends
sys.argv = ["convexp", *sys.argv[3:]]
entry()
"""


@pytest.mark.parametrize("thread", [-1, 0.3])
def test_the_program_exits_with_its_handlers_run_and_its_output_flushed(tmp_path, thread):
    res = subprocess.run([sys.executable, "-c", EXITING, str(tmp_path), str(thread), "models"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("x" * 200_000) and "convbert_small" in res.stdout
    assert (tmp_path / "atexit").read_text() == "ran"
    assert thread < 0 or (tmp_path / "thread").read_text() == "done"


def test_an_error_exits_with_its_code_through_pythons_own_exit(tmp_path):
    res = subprocess.run([sys.executable, "-c", EXITING, str(tmp_path), "-1", "finetune", "glue", "task=nosuch"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 2 and "nosuch" in res.stderr
    assert (tmp_path / "atexit").read_text() == "ran"


def test_models_lists_every_preset_with_counts():
    res = runner.invoke(app, ["models"], terminal_width=200)
    assert res.exit_code == 0, res.output
    for name in group_options("model"):
        assert name in res.output
    row = next(line for line in res.output.splitlines() if "chang_small_composite " in line)
    assert "13.43M" in row
    row = next(line for line in res.output.splitlines() if "convbert_small " in line)
    assert "13.21M" in row and "0.081" in row  # ~1.3e18 FLOPs over 1M steps x 128 x 128 tokens (Table 3)


@pytest.mark.parametrize(
    "args, message",
    [
        (["models", "no_such_model"], "unknown model preset 'no_such_model'"),
        (["bench", "--lengths", "12x"], "--lengths must be comma-separated integers"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args, message):
    res = run_cli(*args)
    assert res.returncode == 2, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_command_exits_2():
    res = run_cli("no-such-command")
    assert res.returncode == 2


def test_ablate_list_fits_100_columns_and_dry_run_describes_the_sweep(tmp_path):
    from typer.testing import CliRunner

    from convexp.cli import app

    res = CliRunner().invoke(app, ["ablate", "--list"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(map(len, lines)) <= 100
    row = next(line for line in lines if line.split()[:1] == ["convbert-sizes"])
    assert row.split()[1:5] == ["ConvBERT,", "Table", "3", "6"] and "pretrain → GLUE" in row
    res = CliRunner().invoke(app, ["ablate", "bermo-glue", "scale=smoke", f"outputs={tmp_path}", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "BERMO (Kodge & Roy), Table 2: Fine-tuning without compression" in " ".join(res.output.split())


def test_bench_prints_each_row_as_it_is_measured():
    """A row is on the screen before the next one is measured (a long benchmark shows progress)."""
    import io

    from rich.console import Console

    from convexp.bench.step import print_rows

    buf = io.StringIO()
    out = Console(file=buf, width=100)
    seen = []

    def rows():
        for i in range(3):
            seen.append(buf.getvalue())  # what was printed when row i started
            yield {"length": 128 * (i + 1), "ms": 1.5 * i}

    print_rows("title", rows(), {"ms": ".1f"}, out, "blocks")
    assert "length 128, ms 0.0" not in seen[0] and "length 128, ms 0.0" in seen[1] and "length 256" in seen[2]
    assert buf.getvalue().index("length 384, ms 3.0") < buf.getvalue().index("title")  # then the table


def test_dry_run_on_a_cpu_estimates_time_from_a_measured_step(tmp_path, monkeypatch):
    import torch
    from typer.testing import CliRunner

    import convexp.sweep.show as show
    from convexp.cli import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(show, "cpu_rate", lambda cfg: (2e10, time.time()))  # what the step would measure
    res = CliRunner().invoke(app, ["ablate", "key-based-conv", "scale=smoke", f"outputs={tmp_path}", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "on this CPU (a rough estimate: 20 GFLOP/s measured" in " ".join(res.output.split())


@pytest.mark.parametrize("width", [80, 60])
def test_dry_run_folds_to_the_terminals_width(tmp_path, monkeypatch, width):
    """COLUMNS=80: every line of the plan, the recipe cards and the first command fits 80 columns;
    the settings fold between settings, the command between words (runnable when pasted)."""
    import shlex

    import torch
    from typer.testing import CliRunner

    import convexp.sweep.show as show
    from convexp.cli import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(show, "cpu_rate", lambda cfg: (2e10, time.time()))
    args = ["ablate", "key-based-conv", "scale=smoke", f"outputs={tmp_path}", "--dry-run"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": str(width)}, terminal_width=width)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    # (a word of the command wider than a line stays whole)
    assert [x for x in lines if len(x) > width and len(x.removesuffix(" \\").split()) > 1] == []
    words = [x for x in lines if len(x.removesuffix(" \\").split()) > 1]  # lines of more than one word
    assert width < 80 or max(map(len, words)) <= width, max(words, key=len)
    assert "  objective mlm · lr 1e-03 · " in res.output and "    adam_" in res.output  # folded between settings
    start = lines.index("launcher: local; first command:")
    command = " ".join(x.strip().removesuffix("\\") for x in lines[start + 1 : start + 6] if x.startswith("  "))
    assert shlex.split(command)[:3] == ["convexp", "pretrain", "scale=smoke"] and "logger.tags=[composite]" in shlex.split(command)
    for node in ("pretrain/composite_key", "finetune/composite_key/cola/s42"):
        assert f"\n{node} " in res.output  # a node's name starts its row, whole; its run ids follow, folded
    assert "\n    chang-small-composite-key-mlm-a" in res.output


def test_dry_run_on_a_wide_terminal_prints_one_row_per_line(tmp_path, monkeypatch):
    import torch
    from typer.testing import CliRunner

    import convexp.sweep.show as show
    from convexp.cli import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(show, "cpu_rate", lambda cfg: (2e10, time.time()))
    args = ["ablate", "key-based-conv", "scale=smoke", f"outputs={tmp_path}", "--dry-run"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    row = next(x for x in res.output.splitlines() if "finetune/composite_key/rte/s42" in x)
    assert "chang-small-composite-key-mlm-" in row and "e+12" in row  # the node, its run id and FLOPs on one line
    assert any(x.startswith("  objective mlm · ") and "tokenizer unigram" in x for x in res.output.splitlines())
    assert any(x.startswith("launcher: local; first command: convexp pretrain ") for x in res.output.splitlines())


def test_fold_items_and_fold_command_keep_what_they_fold():
    import shlex

    from convexp.width import fold_command, fold_items

    items = [f"key{i} {'v' * i}" for i in range(12)]
    lines = fold_items(items, 30)
    assert max(map(len, lines)) <= 30 and lines[0].startswith("  key0") and lines[1].startswith("    ")
    assert " · ".join(x.strip() for x in lines) == " · ".join(items)
    assert fold_items(["a b"], 80) == ["  a b"]  # a line that fits stays as it is
    command = "convexp pretrain scale=smoke 'logger.tags=[a, b]' " + " ".join(f"k{i}=v{i}" for i in range(20))
    folded = fold_command(command, 40)
    assert max(map(len, folded)) <= 40 and all(x.endswith(" \\") for x in folded[:-1])
    assert shlex.split(" ".join(x.removesuffix("\\") for x in folded)) == shlex.split(command)


@pytest.mark.parametrize("model", [["model.num_layers=1"], ["model.num_layers=3"]])
def test_measured_cpu_rate_is_a_plausible_flop_rate(model):
    """One block (measured alone), or three (measured with one and with two)."""
    from convexp.config.compose import compose_stage
    from convexp.train.cpu_rate import measured_flops, runs_on_cpu

    cfg = compose_stage("pretrain", ["scale=smoke", *model, "trainer.batch_size=4", "seq_len=16"])
    assert runs_on_cpu(cfg)
    assert 1e7 < measured_flops(cfg, repeats=1) < 1e13  # a CPU: more than 10 MFLOP/s, less than 10 TFLOP/s


def test_the_whole_models_rate_adds_the_other_blocks_at_the_measured_blocks_rate():
    """A step that takes 0.1 s outside its blocks plus its blocks' FLOPs at 1e11 FLOP/s: measured
    with one block and with two, the rate of the 12-block model is its FLOPs over its time."""
    from convexp.train.cpu_rate import whole_rate

    rest, block = 3e9, 2e9  # FLOPs of the embeddings and head, of one block
    flops = {1: rest + block, 2: rest + 2 * block}
    seconds = {n: 0.1 + n * block / 1e11 for n in (1, 2)}
    whole = rest + 12 * block
    assert whole_rate(seconds, flops, whole) == pytest.approx(whole / (0.1 + 12 * block / 1e11))
    # a second block too fast to time apart, or one block only: the deepest model's own rate
    assert whole_rate({1: 0.2, 2: 0.19}, flops, whole) == pytest.approx(flops[2] / 0.19)
    assert whole_rate({1: 0.2}, {1: 4e9}, 4e9) == pytest.approx(2e10)


def test_a_measured_cpu_rate_is_kept_for_a_month_or_an_hour_when_busy(tmp_path, monkeypatch):
    """The next dry run (or --status) of the same model on this machine answers without measuring
    (nor importing torch); another model, or a month later, is measured again; a rate measured while
    other work held the cores is kept an hour only."""
    from convexp.config.compose import compose_stage
    from convexp.train import cpu_rate as rates

    monkeypatch.setenv("CONVEXP_CACHE", str(tmp_path))
    monkeypatch.setattr(rates, "_busy", lambda: False)
    measured = []
    monkeypatch.setattr(rates, "measured_flops", lambda cfg: measured.append(cfg.seq_len) or 1e10 * len(measured))
    small, longer = (compose_stage("pretrain", ["scale=smoke", f"seq_len={n}"]) for n in (32, 64))
    assert rates.cpu_rate(small)[0] == rates.cpu_rate(small)[0] == 1e10 and measured == [32]
    assert rates.cpu_rate(longer)[0] == 2e10 and measured == [32, 64]

    def age(seconds: float) -> None:
        kept = json.loads((tmp_path / "cpu_rate.json").read_text())
        for entry in kept.values():
            entry["time"] -= seconds
        (tmp_path / "cpu_rate.json").write_text(json.dumps(kept))

    age(rates.KEPT_BUSY_S + 1)  # an hour on: a quiet measurement stands
    assert rates.cpu_rate(small)[0] == 1e10 and measured == [32, 64]
    age(rates.KEPT_S)
    assert rates.cpu_rate(small)[0] == 3e10 and measured == [32, 64, 32]
    monkeypatch.setattr(rates, "_busy", lambda: True)
    assert rates.cpu_rate(longer)[0] == 4e10 and rates.cpu_rate(longer)[0] == 4e10 and measured == [32, 64, 32, 64]
    age(rates.KEPT_BUSY_S + 1)
    assert rates.cpu_rate(longer)[0] == 5e10 and measured == [32, 64, 32, 64, 64]
