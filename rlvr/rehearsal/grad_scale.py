"""Does verl's actor update take a gradient of the right size under an experiment's batching?

Runs the recipes' actor update (``rlvr.train.token_mean``: verl 0.6.1's own
``DataParallelPPOActor.update_policy``, made a token mean over the mini batch) in this process,
on one rank's share of a synthetic rollout batch, with the experiment's batching
(``ppo_mini_batch_size`` normalised as ``fsdp_workers.py`` does for the experiment's world size,
``use_dynamic_bsz``, micro batches, ``ppo_epochs``), and compares the gradient norm verl reports
for each optimizer step (``actor/grad_norm``, measured before clipping) with one computed here in
plain torch: the gradient of the mini batch's token-mean policy-gradient loss,
``-sum(A * log p) / tokens``. They agree when the loss-scale factors of every mini batch sum to
1; with verl's own actor (``actor_class``, the negative control) a mini batch larger than the
rank's rows gives ``rows / mini_rows`` of the reference (0.25 for 64 prompts under verl's
default mini batch of 256).

Chosen so that the reference can be written down, and changing nothing the scale depends on:
every response has the same length (then verl's row-weighted micro batch means add up to the
mini batch's token mean), the loss is the plain one (vanilla clip, ``token-mean``, no KL or
entropy term), the optimizer is SGD with lr 0 (weights stay put, so every mini batch is
compared at the same weights), fp32, no remove-padding (no row is padded). Under
``use_dynamic_bsz`` the token budget is cut so that each mini batch splits into at least 3 micro
batches: the budget decides how rows are grouped, not how they are weighted.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config.batching import Batching, batching

PROMPT_TOKENS, RESPONSE_TOKENS = 4, 8
TOLERANCE = 1e-3  # fp32; a wrong scale is off by a factor, not a rounding


@dataclass
class ScaleResult:
    batching: Batching
    ratios: list[float]  # verl's gradient norm / the reference's, one per optimizer step
    micro_batches: int  # in the first mini batch

    @property
    def ok(self) -> bool:
        return bool(self.ratios) and all(abs(r - 1) <= TOLERANCE for r in self.ratios)

    def line(self) -> str:
        worst = max(self.ratios, key=lambda r: abs(r - 1)) if self.ratios else math.nan
        return (
            f"{self.batching.line()}; verl's gradient / reference = {worst:.4f} over "
            f"{len(self.ratios)} update(s), {self.micro_batches} micro batches each"
        )


def _actor_config(config: Any, rows: int, mini_rows: int) -> Any:
    """The experiment's actor section with the normalised mini batch and the plain loss."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    section = OmegaConf.to_container(config.actor_rollout_ref.actor, resolve=True)
    actor: Any = OmegaConf.create(section)
    actor.ppo_mini_batch_size = mini_rows  # as fsdp_workers.py normalises it, per rank
    if actor.use_dynamic_bsz:
        # >= 3 micro batches per mini batch (see the module docstring).
        tokens = min(mini_rows, rows) * (PROMPT_TOKENS + RESPONSE_TOKENS)
        actor.ppo_max_token_len_per_gpu = max(tokens // 3, PROMPT_TOKENS + RESPONSE_TOKENS)
    actor.policy_loss.loss_mode = "vanilla"
    actor.loss_agg_mode = "token-mean"
    actor.use_kl_loss = False
    actor.entropy_coeff = 0.0
    actor.use_torch_compile = False
    actor.fsdp_config.dtype = "float32"
    # Rows carry no padding here; remove-padding needs flash-attn's kernels, which CPUs lack.
    actor.use_remove_padding = False
    return omega_conf_to_dataclass(actor)


def _batch(rows: int, vocab: int, seed: int) -> Any:
    import torch
    from verl import DataProto

    gen = torch.Generator().manual_seed(seed)
    width = PROMPT_TOKENS + RESPONSE_TOKENS
    input_ids = torch.randint(3, vocab, (rows, width), generator=gen)
    advantages = torch.randn(rows, 1, generator=gen).expand(rows, RESPONSE_TOKENS).contiguous()
    tensors = {
        "input_ids": input_ids,
        "attention_mask": torch.ones(rows, width, dtype=torch.long),
        "position_ids": torch.arange(width).expand(rows, width).contiguous(),
        "responses": input_ids[:, PROMPT_TOKENS:].contiguous(),
        "response_mask": torch.ones(rows, RESPONSE_TOKENS),
        "advantages": advantages,
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def _log_probs(model: Any, batch: Any) -> Any:
    """Per-token log-probabilities of the responses, in plain torch."""
    import torch

    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    logits = out.logits[:, PROMPT_TOKENS - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, batch["responses"].unsqueeze(-1))[..., 0]


def _reference_norm(model: Any, batch: Any) -> float:
    """The norm of the gradient of ``-sum(A * log p) / tokens`` over the whole mini batch."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    log_probs = _log_probs(model, batch)
    mask = batch["response_mask"]
    loss = -(batch["advantages"] * log_probs * mask).sum() / mask.sum()
    grads = torch.autograd.grad(loss, params)
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))


def _single_process_group() -> bool:
    """verl's actor asks for its rank: a one-process gloo group if none exists (True: ours)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return True


def check(
    config: Any,
    model_dir: Path,
    world_size: int | None = None,
    seed: int = 0,
    actor_class: type | None = None,
) -> ScaleResult:
    """Run the recipes' actor update (``actor_class``: verl's own ``DataParallelPPOActor`` for a
    negative control) on one rank's rows and compare each step's gradient with the reference."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from rlvr.train.token_mean import TokenMeanActor

    actor_class = actor_class or TokenMeanActor
    plan = batching(config, world_size)
    rows, mini_rows = plan.rows_per_rank, plan.mini_rows_per_rank
    if rows <= 0 or mini_rows <= 0:
        raise ValueError(f"{plan.line()}: a rank gets no rows")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    data = _batch(rows, int(model.config.vocab_size), seed)
    with torch.no_grad():
        data.batch["old_log_probs"] = _log_probs(model, data.batch)
    ours = _single_process_group()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # verl prints its settings on rank 0
            actor = actor_class(
                _actor_config(config, rows, mini_rows),
                model,
                torch.optim.SGD(model.parameters(), lr=0.0),
            )
        with warnings.catch_warnings():  # known and harmless here: fp32 autocast on a CPU
            warnings.filterwarnings("ignore", message="In CPU autocast", category=UserWarning)
            metrics = actor.update_policy(data)
        micro = _micro_batches(actor, data.split(mini_rows)[0])
    finally:
        if ours:
            dist.destroy_process_group()
    reference = [_reference_norm(model, chunk.batch) for chunk in data.split(mini_rows)]
    reference *= plan.epochs
    norms = metrics["actor/grad_norm"]
    if len(norms) != len(reference):
        raise RuntimeError(f"verl took {len(norms)} optimizer steps, expected {len(reference)}")
    ratios = [verl / ref for verl, ref in zip(norms, reference, strict=True)]
    return ScaleResult(plan, ratios, micro)


def _micro_batches(actor: Any, mini_batch: Any) -> int:
    """How many micro batches verl cut the first mini batch into (as ``update_policy`` does)."""
    from verl.utils.seqlen_balancing import prepare_dynamic_batch

    if actor.config.use_dynamic_bsz:
        return len(prepare_dynamic_batch(mini_batch, actor.config.ppo_max_token_len_per_gpu)[0])
    return len(mini_batch.split(actor.config.ppo_micro_batch_size_per_gpu))
