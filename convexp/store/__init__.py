"""The run store: content-addressed run directories (runs.py) named by run_names.py, run records
(record.py), checkpoints by reference (checkpoint.py) and a planned fine-tuning run's record
(rundirs.py; the runs are planned by the tasks: tasks/pretraining/runs.py, tasks/finetune_runs.py)."""
