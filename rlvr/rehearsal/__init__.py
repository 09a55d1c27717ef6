"""The rehearsal of a GPU experiment: the same composed config shrunk to CPU (or one GPU), run
through real verl, with checks that compare gradients, bytes and topologies against independent
computations. Not needed to read or run a recipe."""
