"""The site's generated parts, made from the code at build time (an MkDocs hook, see mkdocs.yml), so
they cannot drift from it:

* ``<!-- generated: cli -->`` — every command of the Typer app with its arguments and options
  (walked from the click command Typer builds: new commands and options appear by themselves);
* ``<!-- generated: config -->`` — every config group and key: the structured configs of
  ``convexp/config/schema.py``, ``groups.py`` and ``ModelConfig`` (type, default, the range their
  checks allow, the comment beside the field), each group's options in ``convexp/conf/``, and the
  papers' values: the recipe, protocol and scale files as they are, with their sources;
* ``<!-- generated: bench-plots -->`` — a figure per benchmark record in ``docs/bench/``, drawn by
  ``convexp bench plot``'s code.

``tests/test_docs.py`` checks the first two are complete (every command, option, group and key) and
name nothing that does not exist.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import tempfile
import typing
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent
RECORDS = DOCS / "bench"
PLOTS = "bench-plots"  # where the plots go in the site, beside performance.md


# ----------------------------------------------------------------------------- the CLI


def command_tree() -> dict[str, "object"]:
    """{"convexp finetune glue": its click command, ...}, the top level as "convexp"."""
    import typer.main

    from convexp.cli import app

    tree = {}

    def walk(cmd, path: str) -> None:
        tree[path] = cmd
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "convexp")
    return tree


TYPER_OWN = {"--install-completion", "--show-completion"}


def _param_type(p) -> str:
    """A parameter's type: its annotation (Typer >= 0.29 keeps it), else click's type name."""
    described = getattr(p, "type_descriptor", None)
    if described is not None:
        return _type_name(described.annotation)
    return getattr(getattr(p, "type", None), "name", "")


def _param_rows(cmd) -> list[str]:
    rows = []
    for p in cmd.params:
        if any(o in TYPER_OWN for o in p.opts):
            continue
        if p.param_type_name == "argument":
            name = f"`{p.name.upper()}`" + (" ..." if p.nargs == -1 else "")
            kind = f"argument ({_param_type(p)})" + ("" if p.required else ", optional")
        else:
            names = [*p.opts, *p.secondary_opts]
            name = " / ".join(f"`{n}`" for n in names)
            counted = getattr(p, "count", False)
            kind = "flag" if p.is_flag else "count" if counted else f"option ({_param_type(p)})"
        default = p.default
        shown = "" if default in (None, (), [], "") or callable(default) else f"`{default}`"
        text = " ".join((getattr(p, "help", None) or "").split()).replace("|", "\\|")
        rows.append(f"| {name} | {kind} | {shown} | {text} |")
    return rows


def cli_markdown() -> str:
    """The CLI reference: one section per command, in the order of the command tree."""
    from convexp.config.catalog import stage_help

    out = ["Generated from the Typer app (`convexp/cli.py`, `convexp/bench/commands.py`) when the site is "
           "built; `convexp COMMAND --help` prints the same.", ""]
    for path, cmd in command_tree().items():
        out += [f"## `{path}`", ""]
        text = inspect.cleandoc(cmd.help or "")
        if text:
            out += [text.replace("\n\n", "\n\n"), ""]
        rows = _param_rows(cmd)
        if rows:
            out += ["| name | kind | default | what |", "|---|---|---|---|", *rows, ""]
        stage = getattr(cmd, "stage", "")
        if stage:
            out += ["Config groups (`GROUP=OPTION`; see the [configuration reference](config.md)):", ""]
            out += [f"* **{name}**: {options}" for name, options in stage_help(stage)]
            out.append("")
        subs = getattr(cmd, "commands", {})
        if subs:
            out += ["Commands: " + ", ".join(f"`{path} {n}`" for n in sorted(subs)), ""]
    return "\n".join(out)


# ----------------------------------------------------------------------------- the configuration


def schemas() -> dict[str, type]:
    """{the key of a node in a composed config ("" for a stage's own keys): its structured config}."""
    from convexp.config.groups import AblateSchema
    from convexp.config.schema import GROUPS, FinetuneSchema, PretrainSchema, RecipeSchema
    from convexp.models import ModelConfig

    return {"pretrain": PretrainSchema, "finetune": FinetuneSchema, "ablate": AblateSchema,
            "model": ModelConfig, "recipe": RecipeSchema, **GROUPS}  # fmt: skip


STAGES = ("pretrain", "finetune", "ablate")  # their keys are top-level: no prefix


def _type_name(hint) -> str:
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if origin is typing.Union and len(args) == 1:
        return f"{_type_name(args[0])} or null"
    if origin in (list, typing.List):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin in (dict, typing.Dict):
        return "mapping"
    if hint is typing.Any:
        return "any"
    return getattr(hint, "__name__", str(hint))


def _comments(schema: type) -> dict[str, str]:
    """The comment beside each field in the source: ``name: type = default  # comment``."""
    try:
        source = inspect.getsource(schema)
    except (OSError, TypeError):
        return {}
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\s+(\w+): [^\n#]*#\s*(.*)$", source, re.M)}


PROBES = {int: (-1, 0), float: (-1.0, 0.0, 2.0), str: ("?bogus?",)}


def allowed(schema: type, name: str, hint) -> str:
    """What the schema's checks allow for ``name``: the first line its own check gives for a probe
    value (-1, 0 for numbers, a nonsense word for text), without its ``key=value:`` head; empty
    where every probe passes."""
    base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Union else hint
    probes = PROBES.get(base, (-1, "?bogus?") if hint is typing.Any else ())
    for value in probes:
        try:
            schema(**{name: value})
        except (ValueError, TypeError) as e:
            first = str(e).splitlines()[0]
            leaf = name.split(".")[-1]
            if leaf not in first:
                continue  # another key's check: says nothing of this one
            first = re.sub(r"^model '[^']*': \w+ ", "", first)  # ModelConfig's "model 'custom': key ..."
            first = re.sub(r", got .*?(?=( \(e\.g\.)|$)", "", first)  # the probe value itself
            return re.sub(r"^[\w.\[\]]+=\S*?:\s*", "", first).replace("|", "\\|")
        except Exception:  # noqa: BLE001 - a probe the schema cannot even hold
            continue
    return ""


def schema_rows(key: str, schema: type) -> list[tuple[str, str, str, str, str]]:
    """(dotted key, type, default, allowed, note) for every field of ``schema``."""
    hints = typing.get_type_hints(schema)
    notes = _comments(schema)
    rows = []
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "???"
        shown = "null" if default is None else str(default)
        shown = shown.lower() if isinstance(default, bool) else shown
        dotted = f.name if key in STAGES else f"{key}.{f.name}"
        rows.append((dotted, _type_name(hints[f.name]), shown, allowed(schema, f.name, hints[f.name]),
                     notes.get(f.name, "")))  # fmt: skip
    return rows


def config_entries() -> dict[str, list[str]]:
    """{section: [its keys]}: what the configuration reference has an entry for."""
    return {key: [r[0] for r in schema_rows(key, schema)] for key, schema in schemas().items()}


def _first_comment(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("#") and "@package" not in line:
            return line.lstrip("# ").strip()
        if line.strip() and not line.startswith("#"):
            break
    return ""


VERBATIM = ("recipe", "protocol", "scale", "finetune_scale")  # the papers' values, with their sources


def config_markdown() -> str:
    from convexp.config.compose import CONF_DIR

    out = ["Generated from the structured configs (`convexp/config/schema.py`, `convexp/config/groups.py`, "
           "`convexp/models/config.py`) and the files of `convexp/conf/` when the site is built. "
           "*allowed* is what the config's own check answers for a value out of range (empty: any value "
           "of the type); *default* is the structured config's, which the YAML files and the stage's "
           "defaults list then set (`--cfg` prints the composed values).", ""]
    groups = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "sweep")
    out += ["## Config groups", "", "| group | options (the first line of each file) |", "|---|---|"]
    for g in groups:
        files = sorted((CONF_DIR / g).glob("*.yaml"))
        opts = "<br>".join(f"`{p.stem}`: {_first_comment(p)}".rstrip(": ") for p in files)
        out.append(f"| `{g}` | {opts.replace('|', chr(92) + '|')} |")
    out += ["", "Named sweeps (`sweep/`): `convexp ablate --list` and [Sweeps and reports](../sweeps.md).",
            ""]  # fmt: skip
    for key, schema in schemas().items():
        title = f"`{key}` (the stage's own keys)" if key in STAGES else f"`{key}`"
        doc = inspect.cleandoc(schema.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        if doc.startswith(f"{schema.__name__}("):  # a dataclass's generated signature
            doc = ""
        out += [f"## {title}", ""] + ([doc, ""] if doc else [])
        out += ["| key | type | default | allowed | note |", "|---|---|---|---|---|"]
        for dotted, kind, default, ok, note in schema_rows(key, schema):
            cells = [f"`{dotted}`", kind, f"`{default}`", ok, note.replace("|", "\\|")]
            out.append("| " + " | ".join(c.replace("\n", " ") for c in cells) + " |")
        out.append("")
    out += ["## The papers' values", "",
            "Each recipe (pre-training, named by the model preset), protocol (fine-tuning, `protocol=`) and "
            "scale file as it is, with the source of every value in its comments.", ""]
    for g in VERBATIM:
        for p in sorted((CONF_DIR / g).glob("*.yaml")):
            out += [f"### `{g}={p.stem}`", "", f"`convexp/conf/{g}/{p.name}`:", "", "```yaml",
                    p.read_text().rstrip(), "```", ""]  # fmt: skip
    return "\n".join(out)


# ----------------------------------------------------------------------------- bench plots


def records() -> list[Path]:
    return sorted(RECORDS.glob("*.json"))


def plots_markdown() -> str:
    from convexp.bench.plot import bars, date, machine

    import json

    out = []
    for path in records():
        record = json.loads(path.read_text())
        title = bars(record)[0]
        out += [f"![{title}]({PLOTS}/{path.stem}.png)", "",
                f"*{title}* — {machine(record)}, {date(record, path)}; record `docs/bench/{path.name}`.",
                ""]  # fmt: skip
    return "\n".join(out) or "(no records in docs/bench/)"


# ----------------------------------------------------------------------------- the MkDocs hook

GENERATED = {"cli": cli_markdown, "config": config_markdown, "bench-plots": plots_markdown}


def on_page_markdown(markdown: str, page, config, files) -> str:
    """``<!-- generated: NAME -->`` (up to ``<!-- /generated -->`` where one follows: a note for
    readers of the source tree) becomes the generated text."""
    for name, make in GENERATED.items():
        marker = re.compile(rf"<!-- generated: {name} -->(?:.*?<!-- /generated -->)?", re.S)
        if marker.search(markdown):
            text = make()
            markdown = marker.sub(lambda _: text, markdown)
    return markdown


def on_files(files, config):
    """The bench plots, drawn from docs/bench/*.json into a temporary folder and added to the site."""
    from mkdocs.structure.files import File

    from convexp.bench.plot import plot_records

    if not records():
        return files
    folder = Path(tempfile.mkdtemp(prefix="convexp-bench-plots-"))
    for png in plot_records(records(), folder):
        files.append(File.generated(config, f"{PLOTS}/{png.name}", abs_src_path=str(png)))
    return files
