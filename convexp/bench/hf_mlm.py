"""What Hugging Face's ``run_mlm.py`` (transformers' language-modeling example) does to a text
corpus before training, written here for ``convexp bench data``: a fast tokenizer applied with
``datasets.map(batched=True, num_proc=N)`` (its ``tokenize_function``: special tokens added per
document, ``return_special_tokens_mask=True``), then every batch of 1,000 tokenised documents
concatenated and cut into blocks of ``max_seq_length`` (its ``group_texts``, the remainder of each
batch dropped), again with ``num_proc=N``. Both maps write their results to Arrow cache files, as
the script's do.
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path


def run_mlm_blocks(corpus: Path, vocab: Path, seq_len: int, num_proc: int, cache_dir: Path) -> int:
    """Tokenise and group the JSON-lines ``corpus`` as run_mlm.py does; returns the number of blocks."""
    import datasets
    from transformers import BertTokenizerFast

    raw = datasets.load_dataset("json", data_files=str(corpus), split="train", cache_dir=str(cache_dir))
    tokenizer = BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)

    def tokenize_function(examples):
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    def group_texts(examples):
        joined = {k: list(chain(*examples[k])) for k in examples}
        total = (len(joined["input_ids"]) // seq_len) * seq_len
        return {k: [t[i : i + seq_len] for i in range(0, total, seq_len)] for k, t in joined.items()}

    tokenized = raw.map(tokenize_function, batched=True, num_proc=num_proc, remove_columns=raw.column_names,
                        load_from_cache_file=False)  # fmt: skip
    blocks = tokenized.map(group_texts, batched=True, num_proc=num_proc, load_from_cache_file=False)
    return len(blocks)
