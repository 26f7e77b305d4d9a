"""Reading a user's text file, and quoting what it holds in an error line.

  readable(path, key)                 the file, refused at once when this process may not read it
                                      (``key``: the option that names it)
  read_lines(path, error, encoding)   the file's lines, decoded as before (undecodable bytes
                                      replaced); a file with a NUL byte is refused as not text,
                                      naming the file and the line (``error``: the class to raise)
  quoted(value, limit)                a value read from a file as an error line shows it: escaped
                                      like repr (no control character, no line break), at most
                                      ``limit`` columns, cut with "…"

A binary file given as a GLUE TSV once put its 2 KB of raw bytes (NUL, CR) into the error line;
no text file holds a NUL byte, and every excerpt an error line quotes is short and printable.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import DataPathError


def readable(path, key: str) -> Path:
    """A file the run reads: refused at once when this process may not read it."""
    p = Path(path)
    if not os.access(p, os.R_OK):
        raise DataPathError(f"{key}: {p} cannot be read (no permission); fix its permissions or the path")
    return p


def read_lines(path: Path, error: type[Exception], encoding: str = "utf-8") -> list[str]:
    """The lines of ``path`` (split on "\\n", kept as read); ``error`` names its first line with a
    NUL byte: the file is not text."""
    data = path.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise error(f"{path}:{line}: not text (a NUL byte; a binary file?): give a UTF-8 text file")
    return data.decode(encoding, errors="replace").split("\n")


def quoted(text, limit: int = 60) -> str:
    """``text`` as repr shows it, cut to at most ``limit`` columns ("…" where it was cut); a value
    that is not text (a number read from JSON) as repr shows it, cut alike."""
    shown = repr(text)
    if len(shown) <= limit:
        return shown
    if not isinstance(text, str):
        return shown[: limit - 1] + "…"
    n = limit
    while n > 0 and len(repr(text[:n])) + 1 > limit:
        n -= 1
    return repr(text[:n]) + "…"
