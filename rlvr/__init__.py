"""rlvr: the library behind the recipes.

Layers, each importing only the ones before it (tests/test_layers.py): common -> data -> tasks
-> models -> config -> cpu -> report -> planning -> tinker -> preflight -> train -> rehearsal ->
evaluation -> sweep. ``tinker`` trains through the Tinker API instead of verl. ``report``
reads a run's records (verl's per-step metrics, rollout dumps) into curves, health alarms and
report.md; training ends by writing one. ``rewards/`` (standard library only) sits below them all.
"""
