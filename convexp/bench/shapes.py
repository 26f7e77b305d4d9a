"""The shapes the benchmarks time, as data (no torch): the command checks its options against
them before importing anything heavy."""

# the CUDA step table (cuda_step.py): (model preset, batch, sequence length)
STEP_SHAPES = (("convbert_small", 128, 128), ("electra_small", 128, 128), ("convbert_base", 32, 512))
