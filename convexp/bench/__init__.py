"""Benchmarks (``convexp bench``): convexp against what a researcher would use instead, measured in
the same invocation. ``step``: the training step and the attention modules against Hugging Face;
``finetune``: a whole fine-tuning job against a plain ``transformers`` loop (plain_finetune.py)."""
