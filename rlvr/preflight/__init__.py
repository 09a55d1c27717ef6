"""Checks made before verl starts: data, batching, the steps a run will train, whose
checkpoints it would resume, the hub cache, the Ray cluster, memory and disk. Hard facts (a
batch that does not divide, a missing file, 0 steps, another run's checkpoints) refuse a run;
the memory plan, an estimate, warns unless RLVR_STRICT_MEMORY=1."""
