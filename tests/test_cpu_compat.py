"""The CPU compatibility layer: every fix works without CUDA and changes nothing with CUDA.

``install()`` patches process-global state for good, so the test that applies every fix runs in
a fresh interpreter; the others run here and patch only what pytest's ``monkeypatch`` undoes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest


def _run(code: str) -> str:
    env = {**os.environ, "RLVR_CPU_COMPAT": "1"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _patchable_state() -> dict[str, Any]:
    """Everything ``install()`` may patch, as it is now."""
    import torch
    import torch.distributed as dist
    import verl.trainer.ppo.rollout_corr_helper as corr
    import verl.utils.memory_utils as memory
    import verl.utils.profiler.performance as perf
    import verl.workers.fsdp_workers as workers
    from torch.distributed.tensor import DTensor
    from verl.workers.actor.dp_actor import DataParallelPPOActor as Actor
    from verl.workers.rollout import base

    return {
        "threads": torch.get_num_threads(),
        "collectives": (dist.reduce_scatter_tensor, dist.all_gather_into_tensor),
        "full_tensor": DTensor.full_tensor,
        "empty_cache": (memory.aggressive_empty_cache, workers.aggressive_empty_cache),
        "actor": (Actor._forward_micro_batch, Actor.update_policy),
        "bypass": corr.apply_rollout_correction,
        "init_process_group": dist.init_process_group,
        "autocast": torch.autocast,
        "torch.cpu": sorted(vars(torch.cpu)),
        "timing_gather": perf.topk_reduce_ratio_min_max,
        "workers.timing_gather": workers.topk_reduce_ratio_min_max,
        "CPUOffloadPolicy": workers.CPUOffloadPolicy,
        "rollouts": dict(base._ROLLOUT_REGISTRY),
    }


def _rollout(path: Any, **config: Any) -> Any:
    """The HF rollout for the model at ``path``, built as verl 0.6.1 builds rollouts, in fp32 as
    hardware/cpu.yaml sets it (verl's own default is bfloat16)."""
    from omegaconf import OmegaConf

    from rlvr.cpu.rollout import HFSyncRollout

    rollout = {"_target_": "verl.workers.config.RolloutConfig", "name": "hf", "mode": "sync"}
    rollout["dtype"] = "float32"
    model = {"_target_": "verl.workers.config.HFModelConfig", "path": str(path)}
    return HFSyncRollout(
        OmegaConf.create({**rollout, **config}), OmegaConf.create(model), device_mesh=None
    )


def test_noop_when_cuda_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from verl.utils.fsdp_utils import CPUOffloadPolicy
    from verl.workers.rollout import base

    from rlvr.cpu import compat as cpu_compat

    before = _patchable_state()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cpu_compat, "applied_fixes", [])  # as in a fresh worker
    assert cpu_compat.install() == []
    assert _patchable_state() == before
    assert ("hf", "sync") not in base._ROLLOUT_REGISTRY
    assert before["CPUOffloadPolicy"] is CPUOffloadPolicy


@pytest.mark.no_cuda
def test_fixes_apply_and_work_without_cuda() -> None:
    """In a fresh process, as a Ray worker of the CPU path: the setup hook (rlvr/cpu/hook.py)
    installs every fix when verl is first imported, and each works."""
    out = _run(
        """
        from rlvr.cpu import hook, compat as cpu_compat
        hook.install()  # RLVR_CPU_COMPAT=1: the CPU overlays' setting
        import verl  # the hook's callback installs the fixes now
        import os, torch, torch.distributed as dist
        applied = cpu_compat.applied_fixes
        assert applied == ["gloo_process_groups", "cpu_device_functions", "no_cpu_autocast",
                           "shape_correct_timing_gather", "no_ref_offload", "register_hf_rollout",
                           "bypass_mode_config", "cpu_threads", "no_gc_per_rollout",
                           "reduce_scatter_on_gloo", "single_rank_full_tensor",
                           "packed_actor_forward"], applied
        assert cpu_compat.install() == []  # once per process
        from verl.workers.rollout import base
        assert ("hf", "sync") in base._ROLLOUT_REGISTRY

        # 1. verl's backend string initialises a gloo group
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
        dist.init_process_group(backend="cpu:gloo,cpu:nccl", rank=0, world_size=1)
        assert dist.get_backend() == "gloo"
        out = torch.zeros(4); dist.reduce_scatter_tensor(out, torch.arange(4.0))
        assert out.tolist() == [0, 1, 2, 3]  # one rank: a copy, as gloo would give
        dist.all_gather_into_tensor(out, torch.ones(4)); assert out.tolist() == [1] * 4

        # 1b. full_tensor on one rank: the same values, a new tensor, copied in this thread (gloo
        # copies in its worker thread, whose own OpenMP pool would throttle libgomp's spinning)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
        torch.ones(1 << 20).mul_(2)  # this thread's OpenMP pool exists before counting
        threads = len(os.listdir("/proc/self/task"))
        mesh = init_device_mesh("cpu", (1,))
        weight = torch.randn(1 << 20)
        for placement in (Shard(0), Replicate()):
            sharded = distribute_tensor(weight, mesh, [placement])
            full = sharded.full_tensor()
            assert type(full) is torch.Tensor and torch.equal(full, weight)
            assert full.data_ptr() != sharded.to_local().data_ptr()
        partial = torch.distributed.tensor.DTensor.from_local(weight, mesh, [Partial()])
        assert torch.equal(partial.full_tensor(), weight)
        assert len(os.listdir("/proc/self/task")) == threads
        grad = distribute_tensor(weight, mesh, [Shard(0)]).requires_grad_()
        grad.full_tensor().sum().backward()  # recorded by autograd: torch's own path
        assert torch.equal(grad.grad.full_tensor(), torch.ones_like(weight))

        # 2. the timing gather verl runs after each generation works on gloo
        from verl.utils.profiler import performance
        ratio, low, high = performance.topk_reduce_ratio_min_max(1.5)
        assert (low, high) == (1.5, 1.5), (ratio, low, high)

        # 3. CUDA-style device functions exist on torch.cpu
        state = torch.cpu.get_rng_state(); torch.cpu.manual_seed(3); torch.cpu.set_rng_state(state)
        assert torch.cpu.memory_allocated() == 0 and torch.cpu.mem_get_info()[1] > 0
        torch.cpu.empty_cache()

        # 4. CPU autocast is off: matmuls stay fp32
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32

        # 5. the forced ref offload becomes no offload
        import verl.workers.fsdp_workers as w
        assert w.CPUOffloadPolicy(pin_memory=True) is None

        # 6. the HF rollout is registered for (hf, sync)
        from verl.workers.rollout import get_rollout_class
        from rlvr.cpu.rollout import HFSyncRollout
        assert get_rollout_class("hf", "sync") is HFSyncRollout

        # 7. verl 0.6.1's bypass mode writes an undeclared key into the struct config
        import pytest; from omegaconf import OmegaConf; from verl import DataProto
        from verl.trainer.ppo.rollout_corr_helper import apply_rollout_correction
        batch = DataProto.from_dict({"rollout_log_probs": torch.ones(1, 2)})
        loss = OmegaConf.create({"loss_mode": "vanilla"}); OmegaConf.set_struct(loss, True)
        apply_rollout_correction(batch, OmegaConf.create({"bypass_mode": True}), loss)
        assert torch.equal(batch.batch["old_log_probs"], batch.batch["rollout_log_probs"])
        with pytest.raises(ValueError, match="use_policy_gradient"):
            apply_rollout_correction(batch, {"use_policy_gradient": True}, loss)
        dist.destroy_process_group()
        print("patched")
        """
    )
    assert "patched" in out


def test_threads_are_the_ranks_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from rlvr.cpu import compat as cpu_compat

    monkeypatch.delenv(cpu_compat.THREADS_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))  # 8 cores
    assert [cpu_compat.cpu_threads(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    monkeypatch.setenv(cpu_compat.THREADS_ENV, "3")
    assert cpu_compat.cpu_threads(8) == 3


def _grpo_micro_batch(vocab: int, shared: int = 0) -> dict:
    """Two prompts x two responses, left-padded prompts of 12/9 tokens in 16 columns whose first
    ``shared`` tokens are the same, responses of 8, 3, 1 and 5 tokens right-padded to 8, with
    verl's position ids."""
    import torch

    torch.manual_seed(0)
    prompt_width, width = 16, 24
    prompt_lengths, response_lengths = (12, 12, 9, 9), (8, 3, 1, 5)
    ids = torch.randint(3, vocab, (4, width))
    ids[2, 7 : 7 + shared] = ids[0, 4 : 4 + shared]
    ids[1, :prompt_width], ids[3, :prompt_width] = ids[0, :prompt_width], ids[2, :prompt_width]
    mask = torch.zeros(4, width, dtype=torch.long)
    for b, (p, r) in enumerate(zip(prompt_lengths, response_lengths, strict=True)):
        mask[b, prompt_width - p : prompt_width + r] = 1
    ids[mask == 0] = 0
    positions = (mask[:, :prompt_width].cumsum(-1) - 1).clamp(min=0)
    positions = torch.cat([positions, positions[:, -1:] + torch.arange(1, 9)], dim=1)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions,
            "responses": ids[:, prompt_width:]}  # fmt: skip


@pytest.mark.no_cuda
@pytest.mark.parametrize("shared", [0, 5, 9])  # none, a few-shot-like prefix, a whole prompt
def test_packed_forward_equals_verls_padded_one(tmp_path, monkeypatch, shared) -> None:
    """The packed forward (each prompt once, no padding, a prefix the prompts share once) gives
    verl's log probs, entropies and parameter gradients, through the wrapped
    ``_forward_micro_batch``."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    from rlvr.cpu import compat as cpu_compat
    from rlvr.cpu import packing
    from rlvr.models.tiny import build_model

    monkeypatch.setattr(torch, "autocast", torch.autocast)
    cpu_compat._no_cpu_autocast()
    verl_forward = DataParallelPPOActor._forward_micro_batch
    monkeypatch.setattr(DataParallelPPOActor, "_forward_micro_batch", verl_forward)
    cpu_compat._packed_actor_forward()
    path = build_model(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
    actor = SimpleNamespace(
        actor_module=model, use_remove_padding=False, use_fused_kernels=False,
        use_ulysses_sp=False, device_name="cpu", param_dtype=torch.float32,
        config=SimpleNamespace(entropy_checkpointing=False),
    )  # fmt: skip
    batch = _grpo_micro_batch(model.config.vocab_size, shared)
    valid = batch["attention_mask"][:, 16:].float()
    layout = packing.PackedLayout.of(batch)
    assert layout is not None
    rows, width = layout.input_ids.shape  # one row behind a shared prefix, else one per prompt
    assert (rows, width) == ((1, 12 + 9 - shared + 17) if shared else (2, 12 + 8 + 3))
    results = []
    for forward in (verl_forward, DataParallelPPOActor._forward_micro_batch):
        model.zero_grad()
        entropy, log_probs = forward(actor, batch, temperature=0.7, calculate_entropy=True)
        ((log_probs * valid).sum() + (entropy * valid).sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        results.append((entropy.detach() * valid, log_probs.detach() * valid, grads))
    (e_verl, lp_verl, g_verl), (e_packed, lp_packed, g_packed) = results
    torch.testing.assert_close(lp_packed, lp_verl, rtol=0, atol=1e-5)
    torch.testing.assert_close(e_packed, e_verl, rtol=0, atol=1e-5)
    torch.testing.assert_close(g_packed, g_verl, rtol=1e-4, atol=1e-5)  # summation order
    assert (lp_packed[valid == 0] == 0).all()


@pytest.mark.no_cuda
def test_packed_log_probs_of_a_bf16_model_are_taken_in_fp32(tmp_path) -> None:
    """A model computing in bf16 (quickstart.sh --grpo_precision bf16) gives fp32 log probs:
    log_softmax of its own logits upcast, as a padded forward computes them here. bf16 log probs
    (what verl's padded path returns without flash-attn's fp32 cross entropy) round a log prob
    of -2 to +-0.008, and the policy ratio with it."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.cpu import packing
    from rlvr.models.tiny import build_model

    path = build_model(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype="bfloat16")
    batch = _grpo_micro_batch(model.config.vocab_size, shared=5)
    result = packing.response_log_probs(model, batch, temperature=0.7, calculate_entropy=False)
    assert result is not None
    _, log_probs = result
    assert log_probs.dtype == torch.float32
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits
    per_token = (logits[:, 15:-1].float() / 0.7).log_softmax(-1)
    expected = per_token.gather(-1, batch["responses"][..., None])[..., 0]
    valid = batch["attention_mask"][:, 16:].bool()
    # bf16 attention over a packed row vs a padded one: the logits agree to bf16 rounding
    torch.testing.assert_close(log_probs[valid], expected[valid], rtol=0, atol=0.1)
    assert (log_probs[~valid] == 0).all()
    assert not torch.equal(log_probs[valid], log_probs[valid].bfloat16().float())  # not rounded


def test_hf_rollout_takes_actor_weights(tmp_path) -> None:
    import asyncio

    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.models.tiny import build_model

    base = build_model(tmp_path / "a", seed=0)
    other = AutoModelForCausalLM.from_pretrained(build_model(tmp_path / "b", seed=1))
    rollout = _rollout(base, response_length=8, prompt_length=16)
    weights = other.state_dict()
    before = rollout.module.state_dict()
    assert any(not torch.equal(before[name], weights[name]) for name in weights)
    asyncio.run(rollout.update_weights(iter(weights.items())))
    for name, tensor in rollout.module.state_dict().items():
        assert torch.equal(tensor, weights[name]), name
    with pytest.raises(KeyError, match="not in the rollout model"):
        asyncio.run(rollout.update_weights(iter([("no.such.weight", torch.zeros(1))])))


def test_hf_rollout_computes_in_the_configured_dtype(tmp_path) -> None:
    """``rollout.dtype`` is the rollout model's dtype (quickstart.sh --grpo_precision bf16 sets
    bfloat16): the actor's fp32 weights arrive rounded to it."""
    import asyncio

    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.models.tiny import build_model

    path = build_model(tmp_path / "a", seed=0)
    rollout = _rollout(path, response_length=8, prompt_length=16, dtype="bfloat16")
    assert {p.dtype for p in rollout.module.parameters()} == {torch.bfloat16}
    weights = AutoModelForCausalLM.from_pretrained(build_model(tmp_path / "b", seed=1)).state_dict()
    asyncio.run(rollout.update_weights(iter(weights.items())))
    for name, tensor in rollout.module.state_dict().items():
        assert torch.equal(tensor, weights[name].to(torch.bfloat16)), name
    # Negative control: the fp32 rollout keeps fp32 weights.
    fp32 = _rollout(path, response_length=8, prompt_length=16)
    assert {p.dtype for p in fp32.module.parameters()} == {torch.float32}


def test_hf_rollout_adopts_fresh_full_tensors_and_copies_views(tmp_path) -> None:
    import asyncio

    import torch

    from rlvr.models.tiny import build_model

    rollout = _rollout(build_model(tmp_path / "a", seed=0), response_length=8, prompt_length=16)
    name, param = next(iter(rollout.module.named_parameters()))
    fresh = torch.randn_like(param)
    asyncio.run(rollout.update_weights(iter([(name, fresh)])))
    adopted = dict(rollout.module.named_parameters())[name]
    assert adopted.data_ptr() == fresh.data_ptr()  # taken, not copied
    # Negative control: a view into a larger buffer is copied, never aliased.
    buffer = torch.randn(param.numel() + 7)
    view = buffer[7:].view_as(param)
    asyncio.run(rollout.update_weights(iter([(name, view)])))
    copied = dict(rollout.module.named_parameters())[name]
    assert copied.data_ptr() != view.data_ptr() and torch.equal(copied, view)


def test_hf_rollout_merges_lora_like_peft(tmp_path) -> None:
    """LoRA updates (A/B matrices only, as verl sends them) give PEFT's merged weights, and a
    second update replaces the first adapter rather than stacking on it."""
    import asyncio

    import torch
    from peft import LoraConfig, get_peft_model
    from peft.utils.save_and_load import get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from rlvr.models.tiny import build_model

    path = build_model(tmp_path / "a", seed=0)
    rollout = _rollout(path, response_length=8, prompt_length=16)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    for seed in (1, 2):
        torch.manual_seed(seed)
        peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(path), config)
        adapters = get_peft_model_state_dict(peft_model)
        assert all(".lora_" in name for name in adapters)
        asyncio.run(
            rollout.update_weights(iter(adapters.items()), peft_config=config, base_sync_done=True)
        )
        merged = peft_model.merge_and_unload().state_dict()
        for name, tensor in rollout.module.state_dict().items():
            torch.testing.assert_close(tensor, merged[name], rtol=1e-5, atol=1e-6, msg=name)
    with pytest.raises(KeyError, match="no LoRA"):
        asyncio.run(rollout.update_weights(iter([]), peft_config=config, base_sync_done=True))


def test_hf_rollout_generates_like_plain_generate(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollout's responses equal plain greedy ``generate`` (guards the position-ids bug)."""
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl import DataProto

    from rlvr.cpu import compat as cpu_compat
    from rlvr.models.tiny import build_model

    # The two CPU fixes HFRollout's generate path needs (fp32 instead of bf16 autocast, and
    # ``torch.cpu.empty_cache``), undone after the test; other tests never see them.
    monkeypatch.setattr(torch, "autocast", torch.autocast)
    cpu_compat._no_cpu_autocast()
    monkeypatch.setattr(torch.cpu, "empty_cache", lambda: None, raising=False)

    seen_kwargs: list[set[str]] = []
    original_generate = transformers.GenerationMixin.generate

    def spy(self, *args, **kwargs):
        seen_kwargs.append(set(kwargs))
        return original_generate(self, *args, **kwargs)

    monkeypatch.setattr(transformers.GenerationMixin, "generate", spy)

    path = build_model(tmp_path / "m", seed=3)
    tokenizer = AutoTokenizer.from_pretrained(path)
    reference = AutoModelForCausalLM.from_pretrained(path)
    rollout = _rollout(path, response_length=12, prompt_length=32, do_sample=False)
    texts = ["Using the numbers 2, 3, 7", "reach the target 13 with"]
    encoded = [tokenizer(t)["input_ids"] for t in texts]
    width = max(map(len, encoded))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded])
    attention = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    prompts = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention, "position_ids": positions},
        non_tensors={"dummy": np.zeros(2)},
        meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": pad, "do_sample": False},
    )
    out = rollout.generate_sequences(prompts)
    expected = reference.generate(
        input_ids=input_ids,
        attention_mask=attention,
        max_new_tokens=12,
        do_sample=False,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
    )
    for row in range(2):
        got, want = out.batch["responses"][row].tolist(), expected[row, width:].tolist()
        assert got[: len(want)] == want, (got, want)
    assert seen_kwargs and all("position_ids" not in kw for kw in seen_kwargs), seen_kwargs


@pytest.mark.no_cuda
@pytest.mark.parametrize("run_seed", [None, 7], ids=["default_seed", "engine_kwargs_seed"])
def test_hf_rollout_shares_prompts_and_returns_log_probs(
    tmp_path, monkeypatch: pytest.MonkeyPatch, run_seed: int | None
) -> None:
    """Repeated prompts (prefilled once, left padding trimmed) sample what plain ``generate``
    samples with the same seed (the rollout's own: the run's ``engine_kwargs.hf.seed``, else
    ``SAMPLING_SEED``, per rank and call), the output keeps verl's widths, and
    ``rollout_log_probs`` and the entropies equal a recompute as verl's actor does it
    (``log_softmax(logits / T)``)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    from verl import DataProto
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    from rlvr.cpu import compat as cpu_compat
    from rlvr.cpu.rollout import ROLLOUT_ENTROPY_KEY, SAMPLING_SEED, sampling_seed
    from rlvr.models.sampling import InverseCdfSampler
    from rlvr.models.tiny import build_model

    monkeypatch.setattr(torch, "autocast", torch.autocast)
    cpu_compat._no_cpu_autocast()
    monkeypatch.setattr(torch.cpu, "empty_cache", lambda: None, raising=False)
    path = build_model(tmp_path / "m", seed=3)
    engine = {} if run_seed is None else {"engine_kwargs": {"hf": {"seed": run_seed}}}
    rollout = _rollout(path, response_length=10, prompt_length=24, temperature=0.8,
                       calculate_log_probs=True, **engine)  # fmt: skip
    batch = _grpo_micro_batch(200)
    ids, mask = batch["input_ids"][:, :16], batch["attention_mask"][:, :16]
    positions = batch["position_ids"][:, :16]
    prompts = DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": positions},
        non_tensors={"dummy": np.zeros(4)},
        meta_info={"eos_token_id": 2, "pad_token_id": 0},
    )
    before = torch.get_rng_state()
    out = rollout.generate_sequences(prompts)
    assert torch.equal(torch.get_rng_state(), before)  # its own stream: the global one untouched
    base = SAMPLING_SEED if run_seed is None else run_seed
    torch.manual_seed(sampling_seed(rank=0, call=1, base=base))  # the stream it sampled from
    model = AutoModelForCausalLM.from_pretrained(path)
    # sampled as the rollout samples: rlvr/models/sampling.py (tests/test_sampling.py)
    kwargs = {"do_sample": False, "logits_processor": [InverseCdfSampler(0.8)]}
    plain = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10,
                           pad_token_id=0, eos_token_id=2, **kwargs)  # fmt: skip
    responses = out.batch["responses"]
    assert torch.equal(responses[:, : plain.size(1) - 16], plain[:, 16:])
    assert out.batch["input_ids"].shape == (4, 26) and torch.equal(out.batch["prompts"], ids)
    assert out.meta_info["temperature"] == 0.8
    inputs = {key: out.batch[key] for key in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        logits = model(**inputs).logits[:, -11:-1] / 0.8
    valid = inputs["attention_mask"][:, 16:].float()
    for key, value in (("rollout_log_probs", logprobs_from_logits(logits, responses)),
                       (ROLLOUT_ENTROPY_KEY, entropy_from_logits(logits))):  # fmt: skip
        torch.testing.assert_close(out.batch[key], value * valid, rtol=0, atol=1e-5, msg=key)
