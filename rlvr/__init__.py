"""rlvr: the library behind the recipes.

Layers, each importing only the ones before it: common -> data -> tasks -> models -> cpu ->
report -> train -> evaluation -> sweep. ``report`` reads a run's records (verl's per-step
metrics, rollout dumps) into curves, health alarms and report.md; training ends by writing
one. ``rewards/`` (standard library only) sits below them all.
"""
