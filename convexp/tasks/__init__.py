"""The tasks, one folder each: its data, its Lightning stage, its evaluation.

  pretraining/      MLM or ELECTRA pre-training (``convexp pretrain``)
  classification/   GLUE, SentEval probing and custom sentence(-pair) tasks (``convexp finetune glue|probing``)
  squad/            extractive question answering, SQuAD v1.1 / v2.0 (``convexp finetune squad``)

What every stage shares is in ``convexp/train/``, the data every task shares in ``convexp/data/``.
"""
