"""Collectives on gloo as FSDP2 (torch 2.8) uses them on a CPU: right, and quick on one rank.

- ``reduce_scatter_on_gloo``, correctness: gloo's ``reduce_scatter_tensor`` with
  ``ReduceOp.AVG`` returns the sum (torch 2.8.0: 4 ranks holding 1, 2, 3, 4 get 10, not 2.5),
  while its ``all_reduce`` averages. FSDP2 averages fp32/bf16 gradients with AVG over its
  reduce-scatter group, so every multi-rank CPU run took gradients N times too large (under HSDP
  the shard group's size, the replicas' all-reduce being right), and a 1-node and a 2-node
  rehearsal disagreed 2x. NCCL averages; GPU runs never take this path.
  ``tests/test_cpu_collectives.py`` shows torch's result beside this one.
- ``reduce_scatter_on_gloo``, speed: FSDP reduce-scatters every gradient and all-gathers the
  weights through gloo, which copies through its own buffers even for a group of one rank; for
  one rank the result is the input, copied directly.
- ``single_rank_full_tensor``: ``DTensor.full_tensor`` (verl's weight sync before every
  rollout) on a one-rank mesh went through gloo, whose worker thread copied the weights with its
  own OpenMP pool; with more libgomp threads than cores libgomp throttles its spin-waiting, and
  the compute threads then sleep and wake at every barrier (~800 futex waits per decode step).
  On one rank the full tensor is the local one, copied in the calling thread.

Installed by ``rlvr.cpu.compat.install`` (CPU only); each checks torch's parameters first.
"""

from __future__ import annotations

import functools
from typing import Any

from rlvr.common.verl_guards import require_parameters

_require_parameters = functools.partial(require_parameters, owner="rlvr/cpu/collectives.py")


def reduce_scatter_on_gloo() -> None:
    """Reduce-scatter and all-gather as FSDP2 uses them, right on gloo and quick on one rank.

    - An average over several ranks: gloo sums instead (module docstring), so sum and divide.
    - A synchronous reduce-scatter (sum or average) or all-gather over a group of one rank is a
      copy of the input: gloo copies through its own buffers even then.
    Anything else goes to torch as before."""
    import torch.distributed as dist

    reduce_scatter, all_gather = dist.reduce_scatter_tensor, dist.all_gather_into_tensor
    if getattr(reduce_scatter, "_rlvr_cpu", False):
        return
    _require_parameters(reduce_scatter, ("output", "input", "op", "group", "async_op"))
    _require_parameters(all_gather, ("output_tensor", "input_tensor", "group", "async_op"))
    identity = (dist.ReduceOp.SUM, dist.ReduceOp.AVG)

    @functools.wraps(reduce_scatter)
    def reduce_scatter_tensor(
        output: Any,
        input: Any,
        op: Any = dist.ReduceOp.SUM,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        size = dist.get_world_size(group)
        if not async_op and op in identity and size == 1:
            output.copy_(input.view_as(output))
            return None
        if op == dist.ReduceOp.AVG and size > 1:
            if async_op:  # FSDP2 waits on it (torch 2.8): no caller here needs the async form
                raise RuntimeError("rlvr.cpu.collectives: asynchronous AVG reduce-scatter on gloo")
            reduce_scatter(output, input, op=dist.ReduceOp.SUM, group=group)
            output.div_(size)
            return None
        return reduce_scatter(output, input, op=op, group=group, async_op=async_op)

    @functools.wraps(all_gather)
    def all_gather_into_tensor(
        output_tensor: Any, input_tensor: Any, group: Any = None, async_op: bool = False
    ) -> Any:
        if not async_op and dist.get_world_size(group) == 1:
            output_tensor.copy_(input_tensor.view_as(output_tensor))
            return None
        return all_gather(output_tensor, input_tensor, group=group, async_op=async_op)

    reduce_scatter_tensor._rlvr_cpu = True  # type: ignore[attr-defined]
    dist.reduce_scatter_tensor = reduce_scatter_tensor
    dist.all_gather_into_tensor = all_gather_into_tensor


def single_rank_full_tensor() -> None:
    """``full_tensor`` of a DTensor on a one-rank CPU mesh: a copy of its local tensor, made in
    this thread (see the module docstring); anything else, or a call that autograd records, goes
    to torch as before."""
    import torch
    from torch.distributed.tensor import DTensor

    original = DTensor.full_tensor
    if getattr(original, "_rlvr_cpu", False):
        return
    _require_parameters(original, ("self", "grad_placements"))

    @functools.wraps(original)
    def full_tensor(self: Any, *, grad_placements: Any = None) -> Any:
        single = self.device_mesh.size() == 1 and self.device_mesh.device_type == "cpu"
        recorded = torch.is_grad_enabled() and self.requires_grad
        if single and grad_placements is None and not recorded:
            return self.to_local().clone()
        return original(self, grad_placements=grad_placements)

    full_tensor._rlvr_cpu = True  # type: ignore[attr-defined]
    DTensor.full_tensor = full_tensor  # type: ignore[method-assign]
