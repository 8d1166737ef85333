"""Training: the loop (``loop.train``), the one update it and every benchmark run (``update``), the captured
(CUDA-graph) update (``graphed``) and the run's config and flags (``train_config``)."""
