"""The documentation tells the truth about the code: the generated references are complete, and
every `convexp` command line of README.md and the site (docs/) is composed, planned or run here,
or its block says, in its first line, why it is not run (`# not run by the tests: <why>`)."""

from __future__ import annotations

import importlib.util
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)]
MARKER = "# not run by the tests:"
# what a marked block may give as its reason: something these tests cannot have
REASONS = ("GPU", "cluster", "SLURM", "network", "hours", "serves until stopped", "timing loop")


def hook():
    """docs/hooks/convexp_docs.py, the MkDocs hook that generates the references."""
    spec = importlib.util.spec_from_file_location("convexp_docs", DOCS / "hooks" / "convexp_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- fenced blocks


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    lines: list[str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def marked(self) -> str | None:
        """The reason the block gives for not being run, or None."""
        first = next((ln.strip() for ln in self.lines if ln.strip()), "")
        return first[len(MARKER):].strip() if first.startswith(MARKER) else None


def blocks(page: Path) -> list[Block]:
    out, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)\s*$", lines[i])
        if m:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            out.append(Block(page, i + 1, m.group(1), lines[i + 1 : end]))
            i = end
        i += 1
    return out


def shell_blocks() -> list[Block]:
    """The blocks a user types: bash and sh, and an untagged block's `$ ` lines (a shown session)."""
    return [b for p in PAGES for b in blocks(p) if b.lang in ("bash", "sh", "console", "")]


def command_lines(block: Block) -> list[str]:
    """The block's `convexp ...` command lines: continuations joined, comments dropped, `$ ` and
    `srun` prompts taken off, redirections and pipes cut."""
    text = "\n".join(block.lines)
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in text.splitlines():
        s = line.strip()
        if block.lang == "":
            if not s.startswith("$ "):
                continue
            s = s[2:]
        s = re.split(r"\s#", s)[0].strip()
        s = re.sub(r"^(srun|\$)\s+", "", s)
        if not s.startswith("convexp "):
            continue
        out.append(re.split(r"\s(?:>|\||2>)\s?", s)[0].strip())
    return out


def examples() -> list[tuple[str, str]]:
    """(where, command line) of every convexp line in an unmarked block."""
    return [(b.where, c) for b in shell_blocks() if b.marked is None for c in command_lines(b)]


def distinct_examples() -> list[tuple[str, str]]:
    """:func:`examples`, a line shown on several pages checked once."""
    seen, out = set(), []
    for where, line in examples():
        key = str(plan(line))
        if key not in seen:
            seen.add(key)
            out.append((where, line))
    return out


# ----------------------------------------------------------------------------- what a line becomes

PLACEHOLDERS = [  # a user's values, which a command line shows as placeholders
    (re.compile(r"outputs/runs/pretrain/<id>"), "outputs/runs/pretrain/convbert-small-electra-0a1b2c3d"),
    (re.compile(r"<[^<>\s]+>"), "placeholder"),
]
GLOBAL = {"--debug", "-v", "-vv", "--verbose", "--quiet", "-q"}
DIR_FLAGS = ("--config-dir", "--user-dir")  # global options with a folder


def plan(line: str) -> tuple[str, list[str]]:
    """How a documented line is checked: ("run", args) as written, ("compose", args) with
    `--cfg job` or `--dry-run` added, or ("parse", args) for commands that run for minutes
    (bench, export): their arguments are parsed by the command."""
    for pattern, value in PLACEHOLDERS:
        line = pattern.sub(value, line)
    args = [a for a in shlex.split(line)[1:] if a not in ("...", "…")]
    head = []
    while args and (args[0] in GLOBAL or args[0] in DIR_FLAGS):
        flag = args.pop(0)
        head += [flag, args.pop(0)] if flag in DIR_FLAGS else [flag]
    if not args or args[0] in ("--help", "models", "cp"):
        return "run", head + args
    if args[0] in ("pretrain", "finetune"):
        return ("run", head + args) if "--cfg" in args else ("compose", head + args + ["--cfg", "job"])
    if args[0] == "ablate":
        if "--list" in args or "--dry-run" in args:
            return "run", head + args
        kept = [a for a in args if a not in ("--follow", "--wandb-sweep", "--status")]
        return "compose", head + kept + ["--dry-run"]
    return "parse", head + args  # bench, export, report (which reads the runs of a sweep already run)


def _parse(args: list[str]) -> None:
    """The command's own parser on the arguments (options, types, choices), nothing invoked."""
    import typer.main

    from convexp.cli import app

    cmd, args = typer.main.get_command(app), list(args)
    while args and args[0] in getattr(cmd, "commands", {}):
        name = args.pop(0)
        cmd = cmd.commands[name]
        if not getattr(cmd, "commands", None):
            break
    cmd.make_context(cmd.name, args)


@pytest.mark.parametrize("where,line", distinct_examples(),
                         ids=[f"{w} {c[:60]}" for w, c in distinct_examples()])  # fmt: skip
def test_every_documented_command_composes_plans_or_runs(where, line, tmp_path, monkeypatch):
    from convexp.cli import app

    import fakeslurm

    kind, args = plan(line)
    monkeypatch.chdir(tmp_path)  # cp's copies, any outputs/: here
    # a cluster's commands on PATH (the SLURM stand-in: sinfo's partitions gpu, 8 GPUs a node, and cpu),
    # so that a line with launcher=submitit plans as on a cluster, whatever SLURM this machine has
    for k, v in fakeslurm.install(tmp_path / "slurm-bin", tmp_path / "slurm").items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("CONVEXP_USER_DIR", "")  # what --user-dir sets, put back after
    for i, a in enumerate(args[:-1]):
        if a == "--config-dir":  # the folder a `convexp cp ... DIR/` line before it makes
            (tmp_path / args[i + 1]).mkdir(parents=True, exist_ok=True)
        if a == "--user-dir":  # a folder of the checkout (examples/...), the lines' working directory
            args[i + 1] = str(ROOT / args[i + 1])
    if kind == "parse":
        _parse(args)
        own = [a for a in args if a not in GLOBAL]
        while own and own[0] in DIR_FLAGS:
            if own[0] == "--user-dir":
                from convexp.user_code import add_user_dirs

                add_user_dirs([own[1]])
            own = own[2:]
        if own[0] == "report":  # the sweep it names is one
            from convexp.sweep.spec import load_sweep

            load_sweep(own[1])
        return
    res = CliRunner().invoke(app, args, env={"COLUMNS": "100"})
    how = f"{kind}: convexp {shlex.join(args)}"
    assert res.exit_code == 0, f"{where}: `{line}` ({how}) exited {res.exit_code}:\n{res.output[-2000:]}"


def test_every_marked_block_says_why():
    for b in shell_blocks():
        if b.marked is not None:
            why = any(r.lower() in b.marked.lower() for r in REASONS)
            assert why, f"{b.where}: `{MARKER} {b.marked}` gives no reason a test cannot run it"


def test_the_examples_are_counted():
    """The counts the docs' report gives: lines composed (or parsed) and run, blocks marked."""
    kinds = [plan(line)[0] for _, line in examples()]
    marked = [b for b in shell_blocks() if b.marked is not None]
    marked_lines = sum(len(command_lines(b)) for b in marked)
    print(f"\nconvexp lines: {kinds.count('compose')} composed, {kinds.count('parse')} parsed, "
          f"{kinds.count('run')} run as written; {len(marked)} blocks marked "
          f"({marked_lines} convexp lines)")  # fmt: skip
    assert kinds and "compose" in kinds and "run" in kinds


def test_every_shell_block_is_tested_or_marked():
    """A block with no convexp line is one CI runs (dev.py's commands, the CPU install block:
    .ci/run) or says why it is not run."""
    for b in shell_blocks():
        if b.lang and not command_lines(b) and b.marked is None:
            text = "\n".join(b.lines)
            ci = "python3 dev.py " in text or 'pip install "torch==2.13.0"' in text
            assert ci, f"{b.where}: a block no test runs, without `{MARKER} <why>`"


def test_dev_py_demo_plans(tmp_path, monkeypatch):
    """`python3 dev.py demo`'s sweep (dev.DEMO), planned."""
    from convexp.cli import app

    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path))
    res = CliRunner().invoke(app, [*dev.DEMO, "--dry-run"])
    assert res.exit_code == 0 and dev.DEMO[0] == "ablate", res.output[-2000:]


def test_the_named_sweeps_table_lists_every_sweep():
    """README's and the Sweeps page's table: every sweep file of convexp/conf/sweep, and no other."""
    from convexp.config.compose import CONF_DIR

    sweeps = {p.stem for p in (CONF_DIR / "sweep").glob("*.yaml")}
    for page in (ROOT / "README.md", DOCS / "sweeps.md"):
        table = set(re.findall(r"^\| `([\w-]+)` \| (?:ConvBERT|Chang|BERMO|MLM)", page.read_text(), re.M))
        assert table == sweeps, f"{page.name}: missing {sweeps - table}, extra {table - sweeps}"


def test_dev_py_verbs_in_the_docs_exist():
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    source = (ROOT / "dev.py").read_text()
    for page in PAGES:
        for verb in re.findall(r"python3 dev\.py (\w+)", page.read_text()):
            assert f'verb == "{verb}"' in source, f"{page.name}: `python3 dev.py {verb}` is not dev.py's"


# ----------------------------------------------------------------------------- smoke runs (slow tier)

SMOKE = re.compile(r"scale=smoke .*init=outputs/runs/pretrain/<id>"
                   r"|init=outputs/runs/pretrain/<id> .*scale=smoke")


def smoke_examples() -> list[tuple[str, str]]:
    """The documented smoke-scale fine-tunes of one task from a pre-training run: cheap to run whole."""
    return [(w, c) for w, c in examples() if SMOKE.search(c) and "task=all" not in c]


@pytest.mark.slow
@pytest.mark.parametrize("where,line", smoke_examples(), ids=[c[:60] for _, c in smoke_examples()])
def test_documented_smoke_fine_tunes_run(where, line, pretrained, tmp_path):
    """Run as written, the pre-training run a tiny one (the `pretrained` fixture) in place of `<id>`."""
    from helpers import convexp

    args = shlex.split(line.replace("outputs/runs/pretrain/<id>", str(pretrained)))[1:]
    res = convexp(*args, outputs=tmp_path, env={"WANDB_MODE": "disabled"}, timeout=900)
    assert res.returncode == 0, f"{where}: {line}\n{res.stderr[-3000:]}"


# ----------------------------------------------------------------------------- generated references


def test_cli_reference_has_every_command_and_option_and_no_other():
    ref = hook()
    text = ref.cli_markdown()
    tree = ref.command_tree()
    headings = set(re.findall(r"^## `(convexp[^`]*)`$", text, re.M))
    assert headings == set(tree), f"missing {set(tree) - headings}, extra {headings - set(tree)}"
    names = re.findall(r"^## `(convexp[^`]*)`$", text, re.M)
    sections = dict(zip(names, re.split(r"^## `convexp[^`]*`$", text, flags=re.M)[1:]))
    for path, cmd in tree.items():
        for p in cmd.params:
            for opt in [*p.opts, *p.secondary_opts]:
                if opt in ref.TYPER_OWN:
                    continue
                shown = f"`{opt}`" if opt.startswith("-") else f"`{p.name.upper()}`"
                assert shown in sections[path], f"`{path}`'s {opt} has no entry in the CLI reference"
        named = set(re.findall(r"`(--?[\w-]+)`", sections[path]))
        real = {o for p in cmd.params for o in [*p.opts, *p.secondary_opts]}
        assert named <= real, f"`{path}`'s reference names {named - real}, which it does not have"


def _yaml_keys(path: Path) -> set[str]:
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    return {k for k in node if k != "defaults"} if isinstance(node, dict) else set()


def test_config_reference_has_every_group_and_key_and_no_other():
    """Every field of every structured config has its entry; every key a group's files set is one of
    them; every group folder of convexp/conf is listed; and no entry names a key that is gone."""
    from dataclasses import fields

    from convexp.config.compose import CONF_DIR

    ref = hook()
    text = ref.config_markdown()
    rows = [re.split(r"(?<!\\)\|", line)[1:-1] for line in text.splitlines() if line.startswith("| `")]
    entries = {r[0].strip().strip("`") for r in rows if len(r) == 5}  # key | type | default | allowed | note
    listed = {r[0].strip().strip("`") for r in rows if len(r) == 2}  # group | options
    expected = set()
    for key, schema in ref.schemas().items():
        names = {f.name if key in ref.STAGES else f"{key}.{f.name}" for f in fields(schema)}
        expected |= names
        assert f"## `{key}`" in text
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "sweep"}
    assert listed == groups, f"groups without an entry: {groups - listed}, not groups: {listed - groups}"
    assert entries == expected, f"missing {expected - entries}, extra {entries - expected}"
    for group in ("trainer", "optim", "data", "tokenizer", "objective", "logger", "launcher"):
        for f in sorted((CONF_DIR / group).glob("*.yaml")):
            unknown = {k for k in _yaml_keys(f) if f"{group}.{k}" not in entries}
            assert not unknown, f"conf/{group}/{f.name} sets {unknown}, which the reference has no entry for"
    for f in sorted((CONF_DIR / "model").glob("*.yaml")):
        unknown = {k for k in _yaml_keys(f) if f"model.{k}" not in entries}
        assert not unknown, f"conf/model/{f.name} sets {unknown}, which the reference has no entry for"
    for f in [f for g in ref.VERBATIM for f in sorted((CONF_DIR / g).glob("*.yaml"))]:
        assert f"`{f.parent.name}={f.stem}`" in text, f"{f} is not shown in the configuration reference"


def test_bench_plots_have_the_machine_and_date(tmp_path):
    import json

    from convexp.bench.plot import date, machine, plot_records

    records = hook().records()
    assert records, "docs/bench/ holds no record for the performance page"
    pngs = plot_records(records, tmp_path)
    assert [p.stem for p in pngs] == [r.stem for r in records] and all(p.stat().st_size > 1000 for p in pngs)
    for r in records:
        record = json.loads(r.read_text())
        assert "file date" not in date(record, r) and "not recorded" not in machine(record), r.name


def test_bench_plot_draws_a_users_records_and_refuses_what_is_not_one(tmp_path):
    import json

    from convexp.cli import app

    record = {"benchmark": "pretrain", "time": "2026-11-29T01:00:00+00:00", "model": "convbert-small",
              "objective": "mlm", "batch_size": 32, "seq_len": 64, "precision": "32-true", "device": "cpu",
              "cpu": "Some CPU", "cpus": 2, "bare_tokens_per_s": 20000.0,
              "stage_tokens_per_s": 19000.0}  # fmt: skip
    records = tmp_path / "bench"
    records.mkdir()
    (records / "pretrain-1.json").write_text(json.dumps(record))
    res = CliRunner().invoke(app, ["bench", "plot", str(records), "--out", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "plots" / "pretrain-1.png").stat().st_size > 1000
    (records / "other.json").write_text("[1, 2]")
    res = CliRunner().invoke(app, ["bench", "plot", str(records / "other.json")])
    assert res.exit_code == 2 and "not a convexp bench record" in res.output


def test_the_rates_table_of_the_clusters_page_is_the_codes():
    """docs/clusters.md's table of measured rates holds MEASURED's rows (card, batch, steps/s, date)."""
    from convexp.sweep.rates import MEASURED

    text = (DOCS / "clusters.md").read_text()
    rows = re.findall(r"^\| (H\d+) \| [^|]+ \| [^|]+ \| (\d+) x (\d+) \| ([\d.]+) \| ([\d-]+) \|$", text, re.M)
    code = [(r.card.upper(), r.batch, r.seq_len, round(r.steps_s, 1), r.when) for r in MEASURED]
    assert [(c, int(b), int(n), float(v), w) for c, b, n, v, w in rows] == code

