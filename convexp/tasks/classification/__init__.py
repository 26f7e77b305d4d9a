"""Sentence(-pair) classification: GLUE, SentEval probing, custom tasks.

Data flows down this list; each imports only those above it:

  registry.py           the registry: ``Task``, GLUE's nine tasks, SentEval's ten probing tasks,
                        ``register`` (new families), ``get_task``
  synthetic_glue.py     GLUE-shaped tasks from the synthetic language
  synthetic_probing.py  probing-shaped tasks from the synthetic language
  glue_files.py         GLUE from the hub, a classic TSV folder or a save_to_disk folder
  senteval.py           SentEval's probing files
  custom.py             a user's sentence(-pair) task from CSV / JSON-lines files
  loading.py            load_task / prepare_task: {split: Dataset} from the configured source
  encoding.py           tokenize_task (cached), collate
  scores.py             metrics, task scores, GLUE averages, collapsed runs
  results.py            seed statistics, the chosen grid setting, scores in a paper's style
  submissions.py        the GLUE server's files

The stage: stage.py (`convexp finetune glue|probing`), evaluate.py (dev metrics, predictions),
summary.py (an invocation's summary over seeds).
"""
