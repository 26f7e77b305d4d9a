"""How wide printed lines may be, and folding to that width.

  terminal_width(default)              COLUMNS where set, the terminal's width where stdout is one,
                                       else ``default`` (a file or a pipe)
  fold_items(items, width, ...)        items joined by a separator, folded between items
  fold_command(command, width, ...)    a shell command folded between its words with `` \\``
                                       continuations, still runnable when pasted

Wide output on a narrow terminal is wrapped by the terminal mid-word; these fold where a reader
(and a shell) expects it, and leave a line that fits as it is.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import textwrap


def terminal_width(default: int = 160) -> int:
    """The width to fold printed lines to."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((default, 24)).columns
    return default


def fold_items(items: list[str], width: int, indent: str = "  ", sep: str = " · ", hang: str = "    ") -> list[str]:
    """``indent`` + the items joined by ``sep``, folded between items into lines of at most ``width``;
    a continuation line starts with ``hang``; an item longer than a line is wrapped at its spaces."""
    lines: list[str] = []
    line = ""
    for item in items:
        lead = hang if lines else indent
        candidate = f"{line}{sep}{item}" if line else f"{lead}{item}"
        if len(candidate) <= width or not line:
            line = candidate
        else:
            lines.append(line.rstrip())
            line = f"{hang}{item}"
        if len(line) > width:  # one item wider than a line
            *done, line = textwrap.wrap(line, width, subsequent_indent=hang, break_on_hyphens=False) or [""]
            lines += done
    return lines + ([line] if line else [])


def fold_command(command: str, width: int, indent: str = "  ", hang: str = "    ") -> list[str]:
    """A shell command as lines of at most ``width`` (a word longer than a line stays whole), each
    but the last ending in `` \\``, so that pasting them runs the same command."""
    words = [shlex.quote(w) for w in shlex.split(command)]
    lines: list[str] = []
    line = indent + words[0]
    for word in words[1:]:
        if len(line) + 1 + len(word) + 2 <= width:  # room for the word and a " \"
            line += " " + word
        else:
            lines.append(line + " \\")
            line = hang + word
    return lines + [line]
