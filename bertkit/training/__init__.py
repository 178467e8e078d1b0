"""Training: ``BertModule`` (the LightningModule), callbacks, checkpoints, run folders, progress,
summaries and plots."""
