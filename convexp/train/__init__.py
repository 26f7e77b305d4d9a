"""What every stage shares: seeding, loggers, the Trainer and the optimiser (common.py), speed
options (accel.py), training health (health.py), the progress bar, the CSV logger, W&B's mode,
resumable example streams and the fine-tuning LightningModule base (task_module.py)."""
