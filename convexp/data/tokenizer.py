"""Tokenizers: train an uncased WordPiece or Unigram model, or load a pretrained one.

Tokenizer config keys (``conf/tokenizer/*.yaml``; missing keys take ``TOKENIZER_DEFAULTS``):

  kind          wordpiece | unigram | pretrained
  vocab_size    maximum vocabulary size of a trained tokenizer, specials included (a small
                corpus may give fewer: read ``Tokenizer.vocab_size``); pretrained: when set,
                the size the file must have (a check that the right vocabulary was given)
  lowercase     lower-case (and, for WordPiece, strip accents) before tokenizing
  path          pretrained only: a tokenizer.json, a BERT vocab.txt, a directory holding one,
                or a hub model name (e.g. ``bert-base-uncased``: its vocab.txt is downloaded
                with huggingface_hub into the Hugging Face cache, once)
  train_docs    train on the first train_docs training documents (null: all; streaming: 100,000)

Trained tokenizers of both kinds have the same special tokens at the same ids:
``[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4``, so pad is 0 for Unigram too (BERT's convention,
unlike SentencePiece's usual pad -1/unk 0). Pretrained tokenizers keep their own ids, found by
name: [PAD]/<pad>, [UNK]/<unk>, [CLS]/<s>, [SEP]/</s>, [MASK]/<mask>.

WordPiece is BERT's uncased recipe (BertNormalizer, BertPreTokenizer, "##" continuation,
WordPiece decoder); Unigram is SentencePiece's (NFKC, lowercase, Metaspace "▁" word
boundaries). Training is made reproducible: the ``tokenizers`` WordPiece trainer numbers
characters in hash order and breaks ties between merges by id, so the alphabet is pinned
before training (one pass more over the texts); the Unigram trainer sums scores in parallel, so
scores are rounded to 1e-8. After training both vocabularies are re-numbered: specials, then
tokens sorted (WordPiece: alphabetically; Unigram: by score).

Known limitation: the ``tokenizers`` Unigram trainer seeds its pieces from the distinct words
of the corpus, so a frequent word that is not part of another word (common in the small
synthetic language, rare in English) may be split into characters; prefer WordPiece there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .errors import TokenizerError
from .text_files import readable

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
KINDS = ("wordpiece", "unigram", "pretrained")
TOKENIZER_DEFAULTS = {
    "kind": "wordpiece",
    "vocab_size": 30522,
    "lowercase": True,
    "path": None,
    "train_docs": None,
}
_ROLE_NAMES = {  # role -> token names to look for, first match wins
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "mask": ("[MASK]", "<mask>"),
}


class Tokenizer:
    """A ``tokenizers.Tokenizer`` (``.backend``) plus the ids pre-training needs.

    Attributes: vocab_size, pad_id, unk_id, cls_id, sep_id, mask_id, special_ids (a set).
    """

    def __init__(self, backend):
        backend.no_padding()
        backend.no_truncation()  # hub tokenizer.json files often truncate at 512
        self.backend = backend
        vocab = backend.get_vocab(with_added_tokens=True)
        ids = {}
        for role, names in _ROLE_NAMES.items():
            found = [vocab[n] for n in names if n in vocab]
            if not found:
                raise TokenizerError(
                    f"tokenizer has no {role} token (looked for {', '.join(names)}); "
                    f"use a BERT-style vocabulary with {' '.join(SPECIAL_TOKENS)}"
                )
            ids[role] = found[0]
        self.pad_id, self.unk_id, self.cls_id = ids["pad"], ids["unk"], ids["cls"]
        self.sep_id, self.mask_id = ids["sep"], ids["mask"]
        self.special_ids: set[int] = set(ids.values())
        self.vocab_size: int = max(vocab.values()) + 1  # embedding rows needed (ids may have gaps)

    @property
    def kind(self) -> str:
        """The model type, lower case: "wordpiece", "unigram", "bpe", ..."""
        return type(self.backend.model).__name__.lower()

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens (``encode_batch_fast``: no character
        offsets, ~15% faster, where ``tokenizers`` has it)."""
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return [e.ids for e in encode(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def continuation_mask(self):
        """A bool tensor [vocab_size]: True where a token continues a word (WordPiece "##x",
        SentencePiece pieces without a leading "▁"), for whole-word masking; specials are False.
        None for a tokenizer without word boundaries in its tokens (e.g. byte-level BPE)."""
        import torch

        d = json.loads(self.to_json())
        if d["model"]["type"] == "WordPiece":
            prefix = d["model"].get("continuing_subword_prefix") or "##"

            def continues(token):
                return token.startswith(prefix)
        elif (marker := _metaspace_replacement(d.get("pre_tokenizer"))) is not None:

            def continues(token):
                return not token.startswith(marker)
        else:
            return None
        mask = torch.zeros(self.vocab_size, dtype=torch.bool)
        for token, i in self.backend.get_vocab(with_added_tokens=True).items():
            mask[i] = i not in self.special_ids and continues(token)
        return mask

    @property
    def lowercase(self) -> bool:
        """Whether the normalizer lower-cases (BertNormalizer's flag, or a Lowercase step)."""
        norm = json.loads(self.backend.to_str()).get("normalizer") or {}
        steps = norm.get("normalizers", [norm]) if norm.get("type") == "Sequence" else [norm]
        return any(s.get("type") == "Lowercase" or s.get("lowercase") is True for s in steps)

    def hf_config(self, max_length: int) -> dict:
        """``tokenizer_config.json`` for Hugging Face's ``AutoTokenizer`` (it reads the
        ``tokenizer.json`` beside it): the longest input, the special tokens, lower-casing."""
        token = self.backend.id_to_token
        return {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": int(max_length),
            "do_lower_case": self.lowercase,
            "pad_token": token(self.pad_id),
            "unk_token": token(self.unk_id),
            "cls_token": token(self.cls_id),
            "sep_token": token(self.sep_id),
            "mask_token": token(self.mask_id),
            "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        }

    def to_json(self) -> str:
        """The serialised tokenizer (what identifies it in cache keys)."""
        return self.backend.to_str()

    def save(self, directory) -> Path:
        """Write ``tokenizer.json`` (and ``vocab.txt`` for WordPiece) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))
        if self.kind == "wordpiece":
            vocab = self.backend.get_vocab(with_added_tokens=True)
            by_id = sorted(vocab, key=vocab.get)
            if [vocab[t] for t in by_id] == list(range(len(by_id))):  # vocab.txt can only hold 0..V-1
                (directory / "vocab.txt").write_text("".join(t + "\n" for t in by_id), encoding="utf-8")
        return directory

    @classmethod
    def load(cls, path, lowercase: bool = True) -> Tokenizer:
        """Load a tokenizer.json, a BERT vocab.txt (``lowercase`` applies), a directory with one,
        or the vocab.txt of a hub model (a name that is not a local path, see ``hub_vocab``)."""
        from tokenizers import Tokenizer as Backend

        p = tokenizer_file(path)
        if p is None:
            p = hub_vocab(str(path))
        try:
            if p.suffix == ".json":
                return cls(Backend.from_file(str(p)))
            if p.suffix == ".txt":
                return cls(_bert_wordpiece(p, lowercase))
        except TokenizerError:
            raise
        except Exception as e:  # malformed file
            raise TokenizerError(
                f"cannot read tokenizer {p}: {' '.join(str(e).split())[:200]}; check the file"
            ) from e
        raise TokenizerError(f"unsupported tokenizer file {p.name!r}; use a tokenizer.json or a vocab.txt")


def check_tokenizer(path, key: str) -> None:
    """A local tokenizer file (or folder) that exists, can be read and loads (the check made before
    a stage's heavy imports: tokenizers alone); a hub name is left to the stage. ``key``: the
    option that names it, for the line that refuses an unreadable file."""
    file = tokenizer_file(path)
    if file is not None:
        readable(file, key)
        Tokenizer.load(path)


def tokenizer_file(path) -> Path | None:
    """The local file a tokenizer path names (a tokenizer.json or vocab.txt, or the folder holding
    one), None for a hub model name; TokenizerError when there is none. Reads nothing."""
    p = Path(path).expanduser()
    if not p.exists() and _is_hub_name(str(path)):
        return None
    if p.is_dir():
        found = [p / n for n in ("tokenizer.json", "vocab.txt") if (p / n).is_file()]
        if not found:
            raise TokenizerError(f"no tokenizer.json or vocab.txt in {p}; set tokenizer.path to a tokenizer file")
        p = found[0]
    if not p.is_file():
        raise TokenizerError(
            f"no such tokenizer file or folder: {p}; set tokenizer.path to a tokenizer.json or vocab.txt"
        )
    return p


def _is_hub_name(ref: str) -> bool:
    """Could ``ref`` be a hub repository id (``org/name`` or a legacy ``name``), not a file path?"""
    if not ref or ref.startswith(("/", ".", "~")) or "\\" in ref or ref.count("/") > 1:
        return False
    return Path(ref).suffix not in (".txt", ".json")


def hub_vocab(name: str) -> Path:
    """The local path of hub model ``name``'s vocab.txt: from the Hugging Face cache, else
    downloaded (``huggingface_hub.hf_hub_download``; HF_HUB_OFFLINE=1 allows the cache only)."""
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id=name, filename="vocab.txt"))
    except Exception as e:  # noqa: BLE001 - offline, unknown repo, no vocab.txt: all fixable by the user
        cause = " ".join(str(e).split())[:160] or type(e).__name__
        raise TokenizerError(
            f"cannot get the vocab.txt of hub model {name!r} ({cause}); go online (unset HF_HUB_OFFLINE) "
            f"or set tokenizer.path to a local vocab.txt"
        ) from e


def tokenizer_settings(cfg) -> dict:
    """Tokenizer config with defaults, validated. A pretrained tokenizer's vocab_size is None
    unless the config gives it (it is then checked against the file)."""
    from .corpus import to_dict, with_defaults

    s = with_defaults(cfg, TOKENIZER_DEFAULTS, "tokenizer", TokenizerError)
    if s["kind"] == "pretrained" and "vocab_size" not in to_dict(cfg):
        s["vocab_size"] = None
    if s["kind"] not in KINDS:
        raise TokenizerError(
            f"unknown tokenizer kind {s['kind']!r}; set tokenizer.kind to one of: {', '.join(KINDS)}"
        )
    if s["kind"] == "pretrained" and not s["path"]:
        raise TokenizerError(
            "tokenizer.path is required for kind 'pretrained'; set it to a tokenizer.json or vocab.txt"
        )
    if s["kind"] != "pretrained" and int(s["vocab_size"]) <= len(SPECIAL_TOKENS):
        raise TokenizerError(
            f"tokenizer.vocab_size {s['vocab_size']} must exceed the 5 special tokens; use e.g. 2000 or more"
        )
    return s


def build_tokenizer(cfg, texts_iterator_factory: Callable[[], Iterator[str | list[str]]]) -> Tokenizer:
    """Load (kind pretrained) or train a tokenizer.

    texts_iterator_factory: a zero-argument callable returning an iterator over the training
    texts (strings, or lists of strings as batches); it is not called for pretrained tokenizers.
    """
    from tokenizers import trainers

    s = tokenizer_settings(cfg)
    if s["kind"] == "pretrained":
        tokenizer = Tokenizer.load(s["path"], lowercase=bool(s["lowercase"]))
        if s["vocab_size"] is not None and tokenizer.vocab_size != int(s["vocab_size"]):
            raise TokenizerError(
                f"tokenizer {s['path']} has {tokenizer.vocab_size} tokens, not tokenizer.vocab_size="
                f"{s['vocab_size']}; give the intended vocabulary or set tokenizer.vocab_size=null"
            )
        return tokenizer
    if s["kind"] == "wordpiece":
        backend = _bert_wordpiece(None, bool(s["lowercase"]))
        texts = texts_iterator_factory()
        # Listing the alphabet (and its "##" forms) up front gives every character a fixed id,
        # which makes the trainer's tie-breaking, hence the vocabulary, reproducible.
        pinned = _alphabet(texts_iterator_factory(), backend.normalizer)
        pinned += ["##" + c for c in pinned]
        trainer = trainers.WordPieceTrainer(
            vocab_size=int(s["vocab_size"]),
            special_tokens=[*SPECIAL_TOKENS, *pinned],
            continuing_subword_prefix="##",
            show_progress=False,
        )
    else:
        backend, texts = _sentencepiece_unigram(bool(s["lowercase"])), texts_iterator_factory()
        trainer = trainers.UnigramTrainer(
            vocab_size=int(s["vocab_size"]),
            special_tokens=list(SPECIAL_TOKENS),
            unk_token="[UNK]",
            show_progress=False,
        )
    backend.train_from_iterator(texts, trainer)
    backend = _canonical(backend)
    _add_bert_template(backend)
    return Tokenizer(backend)


def _bert_wordpiece(vocab_file: Path | None, lowercase: bool):
    """BERT's WordPiece pipeline, empty (to be trained) or with the vocabulary of a vocab.txt."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, normalizers, pre_tokenizers

    if vocab_file is None:
        model = models.WordPiece(unk_token="[UNK]")
    else:
        vocab = {}
        for i, token in enumerate(Path(vocab_file).read_text(encoding="utf-8").splitlines()):
            vocab.setdefault(token, i)  # id = line number, as BERT reads it
        if "[UNK]" not in vocab:
            raise TokenizerError(
                f"{vocab_file} has no [UNK] token; use a BERT vocab.txt (one token per line)"
            )
        model = models.WordPiece(vocab=vocab, unk_token="[UNK]")
    backend = Backend(model)
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    if vocab_file is not None:
        backend.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])  # never split "[MASK]" etc.
        if all(t in vocab for t in ("[CLS]", "[SEP]")):
            _add_bert_template(backend)
    return backend


def _sentencepiece_unigram(lowercase: bool):
    """SentencePiece's Unigram pipeline (to be trained)."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, normalizers, pre_tokenizers

    backend = Backend(models.Unigram())
    norms = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    backend.normalizer = normalizers.Sequence(norms)
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return backend


def _alphabet(texts, normalizer) -> list[str]:
    """The sorted characters of the texts after normalisation (whitespace excluded)."""
    raw: set[str] = set()
    for item in texts:
        for t in [item] if isinstance(item, str) else item:
            raw.update(t)
    chars = {c for r in raw for c in normalizer.normalize_str(r)}
    return sorted(c for c in chars if not c.isspace())


def _canonical(backend):
    """The same tokenizer with a reproducible serialisation (see the module docstring)."""
    from tokenizers import Tokenizer as Backend

    d = json.loads(backend.to_str())
    model = d["model"]
    if model["type"] == "WordPiece":
        rest = sorted(t for t in model["vocab"] if t not in SPECIAL_TOKENS)
        model["vocab"] = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *rest])}
    elif model["type"] == "Unigram":
        scores = {piece: round(score, 8) for piece, score in _sort_required_chars(model["vocab"])}
        rest = sorted((p for p in scores if p not in SPECIAL_TOKENS), key=lambda p: (-scores[p], p))
        model["vocab"] = [[p, scores[p]] for p in [*SPECIAL_TOKENS, *rest]]
        model["unk_id"] = SPECIAL_TOKENS.index("[UNK]")
    # Only the real specials stay "added tokens" (the pinned alphabet was a training device).
    d["added_tokens"] = [t for t in d["added_tokens"] if t["content"] in SPECIAL_TOKENS]
    for tok in d["added_tokens"]:
        tok["id"] = SPECIAL_TOKENS.index(tok["content"])
    return Backend.from_str(json.dumps(d))


def _sort_required_chars(vocab: list) -> list:
    """The Unigram trainer appends the characters it needs for coverage with scores
    s, s - 1e-4, s - 2e-4, ... in hash order: give each such run its characters in sorted order."""
    vocab = [list(v) for v in vocab]
    chars = [i for i, (piece, _) in enumerate(vocab) if len(piece) == 1]  # other pieces may sit between
    run: list[int] = []
    for i in [*chars, None]:
        if i is not None and run and abs(vocab[run[-1]][1] - vocab[i][1] - 1e-4) < 1e-7:
            run.append(i)
            continue
        if len(run) > 1:
            for k, piece in zip(run, sorted(vocab[k][0] for k in run)):
                vocab[k][0] = piece
        run = [i]
    return vocab


def _metaspace_replacement(pre_tokenizer: dict | None) -> str | None:
    """The word-start marker of a Metaspace pre-tokenizer (possibly inside a Sequence), else None."""
    if not pre_tokenizer:
        return None
    if pre_tokenizer.get("type") == "Metaspace":
        return pre_tokenizer.get("replacement", "▁")
    for inner in pre_tokenizer.get("pretokenizers", []):
        if (found := _metaspace_replacement(inner)) is not None:
            return found
    return None


def _add_bert_template(backend) -> None:
    """[CLS] A [SEP] (B [SEP]) when a caller asks for special tokens (e.g. fine-tuning)."""
    from tokenizers import processors

    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
