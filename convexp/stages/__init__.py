"""Stages: pre-training, fine-tuning, probing. Each builds data + model + a Lightning Trainer,
runs, and writes its results into the run store."""
