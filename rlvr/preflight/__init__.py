"""Checks made before verl starts: data, batching, the hub cache, the Ray cluster, memory and
disk. Hard facts (a batch that does not divide, a missing file) refuse a run."""
