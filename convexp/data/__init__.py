"""Data: corpora, tokenizers, pre-training examples and fine-tuning tasks (``datasets`` + ``tokenizers``).

Modules (import them directly; this package imports nothing so that ``import convexp.data.x``
stays cheap). Pre-training:

  grammar.py            the synthetic language: lexicon, word lists, phrase builder
  synthetic.py          the built-in synthetic corpus (documents of that language); unigram_entropy
  corpus.py             load_corpus(cfg): synthetic | hub | local files -> Dataset with a `text` column
  tokenizer.py          build_tokenizer / Tokenizer: trained WordPiece or Unigram, or a pretrained file
  sentences.py          split_sentences: documents -> sentences (for sentence-pair examples)
  packing.py            pre-training examples (pure Python): token streams packed into fixed-length
                        [CLS] A [SEP] B [SEP] blocks, or Chang et al.'s one sentence pair per example
  pretraining.py        prepare_pretraining_data: corpus -> tokenizer -> cached train/val examples

Fine-tuning tasks (data flows down this list; each imports only those above it):

  tasks.py              the registry: ``Task``, GLUE's nine tasks, SentEval's ten probing tasks,
                        ``register`` (new families), ``get_task``
  synthetic_glue.py     GLUE-shaped tasks from the synthetic language
  synthetic_probing.py  probing-shaped tasks from the synthetic language
  glue_files.py         GLUE from the hub, a classic TSV folder or a save_to_disk folder
  senteval.py           SentEval's probing files
  custom.py             a user's sentence(-pair) task from CSV / JSON-lines files
  loading.py            load_task / prepare_task: {split: Dataset} from the configured source
  encoding.py           tokenize_task (cached), collate
  scores.py             metrics, task scores, GLUE averages, collapsed runs
  submissions.py        the GLUE server's files

  errors.py             DataError and its subclasses (all UserError)
"""
