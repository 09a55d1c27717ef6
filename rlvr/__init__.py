"""rlvr: the library behind the recipes.

Layers, each importing only the ones before it: common -> data -> tasks -> models -> cpu ->
train -> evaluation -> sweep. ``rewards/`` (standard library only) sits below them all.
"""
