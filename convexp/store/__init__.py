"""The run store: content-addressed run directories (runs.py) named by run_names.py, run records
(record.py), checkpoints by reference (checkpoint.py) and the runs a stage command will make
(rundirs.py; the fine-tuning runs are planned by tasks/finetune_runs.py)."""
