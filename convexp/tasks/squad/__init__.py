"""Extractive question answering (SQuAD v1.1 / v2.0): data.py (reading), features.py (windows),
decode.py (spans), metrics.py (the official scripts' EM / F1), runs.py (the runs of an invocation),
stage.py (`convexp finetune squad`), evaluate.py."""
