"""Data: corpora, tokenizers, packed pre-training blocks and GLUE (``datasets`` + ``tokenizers``).

Modules (import them directly; this package imports nothing so that ``import convexp.data.x``
stays cheap):

  synthetic.py    the built-in synthetic corpus; unigram_entropy
  corpus.py       load_corpus(cfg): synthetic | hub | local files -> Dataset with a `text` column
  tokenizer.py    build_tokenizer / Tokenizer: trained WordPiece or Unigram, or a pretrained file
  packing.py      pack token streams into fixed-length [CLS] A [SEP] B [SEP] blocks (pure Python)
  pretraining.py  prepare_pretraining_data: corpus -> tokenizer -> packed, cached train/val blocks
  glue.py         GLUE: task registry, loading (hub, classic TSV, disk, synthetic), tokenising,
                  metrics, GLUE scores, server submissions
  probing.py      SentEval's ten probing tasks (BERMO Table 1) in GLUE's registry: SentEval
                  files, synthetic stand-ins
  errors.py       DataError and its subclasses (all UserError)
"""
