"""Estimates made before a run: GPU and host memory, checkpoint disk, and which GPU recipe fits a
machine. Pre-flight reads them; reading or running a recipe never needs them."""
