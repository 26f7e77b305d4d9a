"""Pre-training: examples from a corpus, the objectives, the batches and the stage.

  sentences.py          split_sentences: documents -> sentences (for sentence-pair examples)
  packing.py            pre-training examples (pure Python): token streams packed into fixed-length
                        [CLS] A [SEP] B [SEP] blocks, or Chang et al.'s one sentence pair per example
  chunks.py             examples made per chunk of documents (the unit of a parallel build, a streaming
                        reader's share and a resume), stored compactly (uint16 ids, length, B's start)
  build.py              the prepared build: chunks made on every core, written compactly to Arrow
  pretraining.py        prepare_pretraining_data: corpus -> tokenizer -> cached train/val examples
  streaming.py          prepare_streaming: a streaming corpus's examples, made as it is read
  readers.py            streaming readers: each rank and loader worker tokenises its own share;
                        their positions, kept in checkpoints (resume at once)
  objectives.py         MLM and ELECTRA as plain torch (no Lightning)
  batches.py            batches fetched, stacked and masked off the training thread
  stage.py              `convexp pretrain`
"""
