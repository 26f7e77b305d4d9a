"""Data every task shares: corpora, tokenizers, the synthetic language, length batches, digests
(``datasets`` + ``tokenizers``).

Modules (import them directly; this package imports nothing so that ``import convexp.data.x``
stays cheap):

  grammar.py            the synthetic language: lexicon, word lists, phrase builder
  synthetic.py          the built-in synthetic corpus (documents of that language); unigram_entropy
  corpus.py             load_corpus(cfg): synthetic | hub | local files -> Dataset with a `text` column
  tokenizer.py          build_tokenizer / Tokenizer: trained WordPiece or Unigram, or a pretrained file
  length_batches.py     batches of rows of similar length (training and evaluation)
  digests.py            content digests of local input files (part of run ids)
  text_files.py         a user's text file read (a binary one refused) and quoted short in error lines

  errors.py             DataError and its subclasses (all UserError)

A task's own data lives with its task: ``convexp/tasks/{pretraining,classification,squad}/``.
"""
