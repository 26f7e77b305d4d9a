"""The chunk store of a streaming corpus: each chunk's examples kept on disk by the reader that makes
them, so that a later pass, a requeued or resumed run, or another run of the same data reads them
instead of downloading and tokenising the chunk's documents again (``data.store_chunks``, default
true; false for a corpus larger than the disk: the store holds every training example once, ~2
bytes a token, ``build.prepared_bytes``).

Folder ``<outputs>/cache/chunks-<key>/`` (``streaming.prepare_streaming``), the key hashing
everything the rows depend on: the corpus (its settings, revision and local files), the validation
documents held out of each shard, the tokenizer, ``seq_len``, the example layout, the seed,
``CHUNK_DOCS`` and the examples' format version; not who reads it (the reader count, ``num_proc``):
chunk (s, j)'s rows are the same whichever reader makes them (``chunks.py``), so a store filled on 8
GPUs serves a resume on 4.

  <s>/<j>.arrow   chunk j of source shard s: its compact rows, one Arrow stream (``build.py``'s
                  format: a ``datasets`` file)
  <s>/shard.json  written when a reader has read shard s through from its start: ``chunks`` (n),
                  ``docs`` (its training documents) and ``sources`` (the shard's ``state_dict()``
                  at each chunk's start: None for chunk 0), what a reader needs to go through the
                  shard without reading it, or to read one missing chunk alone

Every file is written under a temporary name and renamed into place: a file that exists is whole.
In a pass each chunk is made by one reader; two writers of the same file (a reader in a later pass,
another run) write the same bytes. A store that cannot be written (a full disk) is said once per
reader in one line; the reader goes on without it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from .build import ArrowRows
from .chunks import CompactExamples, compact_columns, id_dtype

STORE_VERSION = 1  # part of the store's key: bump when its files change


class ChunkStore:
    """The stored chunks of one streaming corpus's training examples (see the module docstring)."""

    def __init__(self, root: Path, seq_len: int, vocab_size: int, labelled: bool):
        self.root, self.seq_len, self.vocab_size, self.labelled = Path(root), seq_len, vocab_size, labelled
        self.failed: str | None = None  # why writing failed (said once, then nothing more is written)

    def shard(self, s: int) -> dict | None:
        """Shard ``s``'s record (``chunks``, ``docs``, ``sources``), or None until a reader read it through."""
        try:
            return json.loads((self.root / str(s) / "shard.json").read_text())
        except FileNotFoundError:
            return None

    def chunk(self, s: int, j: int) -> CompactExamples | None:
        """Chunk (s, j)'s examples, or None when not stored."""
        import pyarrow as pa

        try:
            with pa.OSFile(str(self.root / str(s) / f"{j}.arrow")) as f:
                table = pa.ipc.open_stream(f).read_all()
        except FileNotFoundError:
            return None
        columns = {name: table.column(name).combine_chunks() for name in compact_columns(self.labelled)}
        ids = columns.pop("input_ids").flatten().to_numpy().astype(id_dtype(self.vocab_size), copy=False)
        rest = {name: c.to_numpy(zero_copy_only=False) for name, c in columns.items()}
        return CompactExamples(
            ids.reshape(-1, self.seq_len), rest["length"].astype(np.uint16, copy=False),
            rest["b_start"].astype(np.uint16, copy=False), rest.get("pair_label"),
        )  # fmt: skip

    def put_chunk(self, s: int, j: int, examples: CompactExamples) -> None:
        """Store chunk (s, j)'s examples."""

        def write(path: Path) -> None:
            rows = ArrowRows(path, self.seq_len, self.vocab_size, self.labelled)
            try:
                rows.write(examples)
            finally:
                rows.close()

        self._put(self.root / str(s) / f"{j}.arrow", write)

    def put_shard(self, s: int, sources: list, docs: int) -> None:
        """Record shard ``s`` as read through: its chunks' starting states ``sources`` and ``docs`` documents."""
        record = {"chunks": len(sources), "docs": docs, "sources": sources}
        self._put(self.root / str(s) / "shard.json", lambda path: path.write_text(json.dumps(record)))

    def _put(self, path: Path, write) -> None:
        if self.failed is not None:
            return
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            os.close(fd)
            write(Path(tmp))
            os.replace(tmp, path)
        except OSError as e:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            self.failed = f"{type(e).__name__}: {e}"
            print(
                f"note: the chunk store {self.root} cannot be written ({self.failed}): this reader goes on "
                "without it (data.store_chunks=false for a corpus larger than the disk)",
                file=sys.stderr,
            )
