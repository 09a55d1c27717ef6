"""benchmarks/cpu_model_math.py in-process on the tiny model: the step's shape is what it times
(packed as rlvr/cpu/packing.py packs it; the flops follow the packed tokens), every figure is
printed, and bad shapes are refused."""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

import pytest
from script_loading import load_file_module

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark() -> ModuleType:
    return load_file_module("cpu_model_math", ROOT / "benchmarks" / "cpu_model_math.py")


@pytest.mark.parametrize(
    "micro_batches,tokens",
    [
        ("2", 2 * (5 + 3 * 4)),  # a prompt per micro batch: it once, then its 3 responses
        ("1", 2 + 2 * 3 + 2 * 3 * 4),  # both behind their 2 shared tokens: one row
    ],
)
def test_prints_every_figure_of_the_packed_step(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str], micro_batches: str, tokens: int
) -> None:
    shape = ["--prompts", "2", "--prompt_tokens", "5", "--n", "3", "--response_tokens", "4"]
    argv = ["--model", str(tiny_model_dir), *shape, "--shared_tokens", "2", "--repeats", "1"]
    assert load_benchmark().main([*argv, "--micro_batches", micro_batches]) == 0
    printed = capsys.readouterr().out
    batches = f"in {micro_batches} packed micro batches"
    assert f"step: 2 prompts x 3 {batches} ({tokens} tokens)" in printed
    rows = {line[:28].strip(): line[28:].split() for line in printed.splitlines()[5:]}
    passes = ["forward (ref pass)", "forward+backward (update)", "clip + AdamW step (update)"]
    assert list(rows) == ["fp32 matmul 2048^3", *passes]
    assert all(len(cells) == 2 for cells in rows.values())  # seconds, GFLOP/s
    assert float(rows["fp32 matmul 2048^3"][0]) > 0  # the tiny model's own rows print ~0.00
    assert rows["clip + AdamW step (update)"][1] == "-" and rows["forward (ref pass)"][1] != "-"


def test_fsdp2_adds_a_column_and_leaves_no_process_group(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch.distributed as dist

    argv = ["--model", str(tiny_model_dir), "--prompt_tokens", "5", "--shared_tokens", "2"]
    assert load_benchmark().main([*argv, "--n", "2", "--response_tokens", "3", "--fsdp2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[4].split() == ["what", "seconds", "GFLOP/s", "FSDP2", "s", "GFLOP/s"]
    update = lines[7][28:].split()
    assert lines[7].startswith("forward+backward (update)") and len(update) == 4
    assert not dist.is_initialized()


def test_wrap_as_verl_shards_each_layer_and_the_root(tiny_model_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    assert not isinstance(model, FSDPModule)  # negative control
    load_benchmark().wrap_as_verl(model)
    try:
        assert isinstance(model, FSDPModule)
        assert all(isinstance(layer, FSDPModule) for layer in model.model.layers)
        assert not isinstance(model.model.embed_tokens, FSDPModule)  # tied: the root's
    finally:
        dist.destroy_process_group()


def test_weight_flops_are_the_matmuls_torch_counts(tiny_model_dir: Path) -> None:
    """The forward's weight flops against torch's own count of the packed forward's matmuls
    (``FlopCounterMode``; it has no count for the CPU attention kernel, added separately), on
    micro batches of one prompt each: it once, then its 2 responses."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM

    from rlvr.cpu.packing import response_log_probs

    bench = load_benchmark()
    argv = ["--model", str(tiny_model_dir), "--n", "2", "--micro_batches", "4", "--repeats", "1"]
    args = bench.parse_args(argv)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    tokens, found = bench.step_figures(model, args)
    assert tokens == 4 * (100 + 2 * 14)
    with FlopCounterMode(display=False) as counted, torch.no_grad():
        for _ in range(4):
            batch = bench.micro_batch(args, 1, model.config.vocab_size)
            response_log_probs(model, batch, 1.0, calculate_entropy=False)
    matmuls = counted.get_total_flops()  # mm and addmm (the tiny model's projections have biases)
    width, kept = 100 + 2 * 14, 2 * 14 + 1  # the last prompt position, then each response token
    weights, attention = bench.forward_flops_of(model, [(1, width, kept)] * 4)
    assert weights == pytest.approx(matmuls, rel=1e-2)
    config = model.config
    assert attention == 4 * 4 * config.hidden_size * config.num_hidden_layers * width**2
    figures = {name: flops for name, _, flops in found}
    assert figures["forward (ref pass)"] == weights + attention
    assert figures["forward+backward (update)"] == 3 * (weights + attention)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--n", "0"], "--n must be at least 1"),
        (["--shared_tokens", "100"], "--shared_tokens must be from 0"),
        (["--prompts", "3", "--micro_batches", "2"], "--micro_batches must divide --prompts"),
        (["--model", "/nonexistent"], "no config.json"),
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        load_benchmark().parse_args(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_fsdp2_column_runs_the_workers_collectives(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``workers_collectives`` FSDP2's one-rank gathers and reductions are the step's
    direct copies, not gloo's (counted at torch's own functions), with the same gradients; on
    leaving, torch's functions are back."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    calls: list[str] = []

    def counted(name: str) -> object:
        original = getattr(dist, name)

        @functools.wraps(original)  # the collectives check torch's parameters
        def call(*args: object, **kwargs: object) -> object:
            calls.append(name)
            return original(*args, **kwargs)

        return call

    for name in ("reduce_scatter_tensor", "all_gather_into_tensor"):
        monkeypatch.setattr(dist, name, counted(name))
    gloos = dist.reduce_scatter_tensor, dist.all_gather_into_tensor
    bench = load_benchmark()
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    ids = torch.tensor([[1, 5, 7, 9, 2]])

    def gradients() -> list[torch.Tensor]:
        model(input_ids=ids).logits.sum().backward()
        found = [weight.grad.full_tensor().clone() for weight in model.parameters()]
        model.zero_grad(set_to_none=True)
        return found

    bench.wrap_as_verl(model)
    try:
        through_gloo = gradients()
        assert {"reduce_scatter_tensor", "all_gather_into_tensor"} <= set(calls)  # control
        calls.clear()
        with bench.workers_collectives():
            direct = gradients()
        assert calls == []
        assert (dist.reduce_scatter_tensor, dist.all_gather_into_tensor) == gloos
    finally:
        dist.destroy_process_group()
    assert all(torch.equal(a, b) for a, b in zip(through_gloo, direct, strict=True))
