"""gloo's collectives as FSDP2 (torch 2.8) calls them, before and after rlvr/cpu/collectives.py:
torch's own result beside the fixed one, and FSDP2's gradient against the ranks' mean by hand."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 4
# One xdist worker runs the module, so its four spawned ranks (four_ranks) start once, not once
# per worker that gets one of its tests.
pytestmark = [pytest.mark.no_cuda, pytest.mark.xdist_group("cpu_collectives")]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))


def _inputs(rank: int) -> torch.Tensor:
    return torch.randn(5, 8, generator=torch.Generator().manual_seed(100 + rank))


def _fsdp_grad_norm(rank: int, mesh_shape: tuple[int, ...]) -> float:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = _model()
    names = ("fsdp",) if len(mesh_shape) == 1 else ("ddp", "fsdp")
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=names)
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model(_inputs(rank)).pow(2).mean().backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def _worker(rank: int, port: int, results: dict) -> None:
    from rlvr.cpu import collectives

    address = f"tcp://127.0.0.1:{port}"
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=WORLD)
    found = {}
    for name in ("torch", "fixed"):
        if name == "fixed":
            collectives.reduce_scatter_on_gloo()
        out = torch.empty(2)
        dist.reduce_scatter_tensor(out, torch.full((2 * WORLD,), rank + 1.0), op=dist.ReduceOp.AVG)
        found[name] = out.tolist()
    found["fsdp"] = _fsdp_grad_norm(rank, (WORLD,))
    found["hsdp"] = _fsdp_grad_norm(rank, (2, WORLD // 2))
    results[rank] = found
    dist.destroy_process_group()


def _by_hand() -> float:
    """The data-parallel gradient computed without torch.distributed: the ranks' mean."""
    model = _model()
    total = [torch.zeros_like(p) for p in model.parameters()]
    for rank in range(WORLD):
        model.zero_grad()
        model(_inputs(rank)).pow(2).mean().backward()
        total = [t + p.grad for t, p in zip(total, model.parameters(), strict=True)]
    return float(torch.sqrt(sum((t / WORLD).pow(2).sum() for t in total)))


@pytest.fixture(scope="module")
def four_ranks() -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    results = mp.Manager().dict()
    # fork, not spawn: the ranks inherit the imported torch instead of importing it four times.
    mp.start_processes(_worker, args=(port, results), nprocs=WORLD, join=True, start_method="fork")
    return dict(results[0])


def test_gloo_reduce_scatter_averages_once_fixed(four_ranks: dict) -> None:
    mean = sum(range(1, WORLD + 1)) / WORLD  # 2.5
    # torch 2.8's gloo sums where FSDP2 asks for the average: if this starts failing, torch fixed
    # it and rlvr/cpu/collectives.py's AVG branch can go
    assert four_ranks["torch"] == [mean * WORLD] * 2
    assert four_ranks["fixed"] == [mean] * 2


@pytest.mark.parametrize("mesh", ["fsdp", "hsdp"])
def test_fsdp2_gradient_is_the_ranks_mean(four_ranks: dict, mesh: str) -> None:
    """FSDP2 on 4 gloo ranks, plain (1 x 4) and hybrid-sharded (2 x 2), against the mean of the
    ranks' gradients computed by hand (unfixed: 4x and 2x)."""
    assert four_ranks[mesh] == pytest.approx(_by_hand(), rel=1e-5)
