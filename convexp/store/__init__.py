"""The run store: content-addressed run directories (runs.py), run records (record.py),
checkpoints by reference (checkpoint.py) and the runs a stage command will make (rundirs.py)."""
