# rlvr: shared library for the rlvr-recipes project
