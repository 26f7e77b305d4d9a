"""Reports of finished runs: analysis figures (attention maps, concentration C, learned kernels)."""
