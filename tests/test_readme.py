"""README.md tells the truth about how CI tests the project."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    """README's test command is dev.py's (set-up, then pytest with the tier the README names), and
    CI runs it as written; the top of the README shows the same two commands."""
    import shlex

    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    tests = readme[readme.index("## Tests") :]
    command, pytest_line = tests[tests.index("```bash\n") + 8 :].split("\n", 2)[:2]
    assert command.split(" #")[0].strip() == "python3 dev.py test" and "python3 dev.py test" in ci
    import importlib.util

    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    assert pytest_line.split(" #")[0].strip() == shlex.join(["pytest", *dev.TESTS]).replace("'", '"')
    top = readme[readme.index("## Two commands") : readme.index("## Install")]
    assert "python3 dev.py demo" in top and "python3 dev.py test" in top


def _command_tree():
    """{command path ("finetune glue"): (its options' --names, the --no-... forms of its flags)},
    "" for the top level."""
    import click
    import typer.main

    from convexp.cli import app

    tree = {}

    def walk(cmd: click.Command, path: str) -> None:
        options = {o for p in cmd.params for o in p.opts if o.startswith("--")}
        tree[path] = options, {o for p in cmd.params for o in p.secondary_opts if o.startswith("--")}
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return tree


def _readme_invocations(readme: str):
    """(command path, flags) of every `convexp ...` the README shows: in code blocks a line up to its
    comment, in the text a code span."""
    import re

    tree = _command_tree()
    pieces = [line.split(" #")[0] for line in readme.splitlines()] + re.findall(r"`([^`\n]+)`", readme)
    for piece in pieces:
        for m in re.finditer(r"\bconvexp((?: --(?:user|config)-dir \S+)+)", piece):  # global, with a folder
            yield "", set(re.findall(r"--[a-z][a-z-]*", m.group(1)))
        piece = re.sub(r"\bconvexp(?: --(?:user|config)-dir \S+)+", "convexp", piece)
        for m in re.finditer(r"\bconvexp((?: [a-z][a-z-]*)*)([^`|]*)", piece):
            words = m.group(1).split()
            path = ""
            while words and f"{path} {words[0]}".strip() in tree:
                path = f"{path} {words.pop(0)}".strip()
            yield path, set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", m.group(2) + " " + " ".join(words)))


def _readme_and_site() -> str:
    """README.md and the documentation site's pages (docs/), as one text."""
    pages = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)]
    return "\n".join(p.read_text() for p in pages)


def test_every_command_and_flag_the_docs_show_exists_and_vice_versa():
    """Every `convexp ...` of README.md and the site (docs/) names commands and flags that exist, and
    every command and option is told about in the written pages (the generated CLI reference aside)."""
    readme = _readme_and_site()
    tree = _command_tree()
    shown = {}
    for path, flags in _readme_invocations(readme):
        shown.setdefault(path, set()).update(flags)
        unknown = flags - set().union(*tree[path], *tree[""]) - {"--help"}
        assert not unknown, f"the docs show `convexp {path}` with {sorted(unknown)}, which --help does not have"
    for path, (options, _negations) in tree.items():
        if path:  # a group (finetune) through its commands
            assert any(p == path or p.startswith(f"{path} ") for p in shown), f"`convexp {path}` is not in the docs"
        typer_own = {"--help", "--install-completion", "--show-completion"}
        undocumented = {o for o in options - typer_own if o not in readme}
        assert not undocumented, f"`convexp {path}`'s {sorted(undocumented)} are not in the docs"


def test_ci_runs_the_readme_cpu_install_block():
    """The README's CPU install block is what CI installs with, verbatim (.ci/readme_block.py)."""
    import subprocess
    import sys

    block = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_block.py"), "On a CPU"],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    commands = [line.split(" #")[0].strip() for line in block.splitlines()]
    assert commands[1:] == ['pip install "torch==2.13.0"', "pip install .", "convexp --help"]
    assert 'readme_block.py "On a CPU"' in (ROOT / ".ci" / "run").read_text()
