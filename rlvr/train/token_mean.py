"""The actor every recipe run updates with: verl 0.6.1's ``DataParallelPPOActor`` whose
``token-mean`` loss is the mean over the tokens of the whole mini batch, whatever micro batches
verl cuts it into, and whose logged losses are that mean.

verl 0.6.1's ``update_policy`` (``dp_actor.py``) takes each micro batch's token mean and scales it
by ``rows / ppo_mini_batch_size`` under dynamic micro batches (``1 / gradient_accumulation``
otherwise), so a token's weight depends on how many tokens share its micro batch. Two things go
wrong with that:

1. A group filter (``grpo_drop_constant``, ``rlvr.train.advantages``) zeroes the dropped rows'
   ``response_mask``: a kept token then weighs more the more dropped rows share its micro batch
   (about 9x max/min at Countdown's 8-GPU shape with 8 of 64 groups kept), and a micro batch of
   dropped rows only fails verl's ``rollout_corr`` metrics (``assert response_mask.any()``).
2. Each micro batch's loss is logged times its scale and the step's log is the mean over micro
   batches, so ``actor/pg_loss`` and ``actor/kl_loss`` read 1/M of the loss (M micro batches;
   fixed upstream after 0.6.1 by summing, verl PR 4711).

``TokenMeanActor.update_policy`` calls verl's own ``update_policy`` on the same rows (less the
dropped groups' rows, where that changes nothing but the work: ``rows_to_update``; on one rank a
batch of several mini batches goes to it one mini batch a call, ``mini_batches_alone``), after:

- computing verl's partition of each mini batch into micro batches (verl's own
  ``prepare_dynamic_batch``, or the fixed split) and so each micro batch's scale ``s``;
- counting the kept tokens ``K`` of each mini batch over every data-parallel rank (one
  all-reduce), and replacing ``response_mask`` by per-token weights: ``T * dp / (K * s)`` on kept
  tokens (``T`` the response width), ``EPS`` times that on dropped ones (so no micro batch is
  empty of weight, and the metrics that average over the mask stay defined);
- aggregating with ``seq-mean-token-sum-norm``, verl's ``sum(loss * mask) / T``, which is linear
  in those weights. A kept token's loss then enters each rank's gradient with weight ``dp / K``
  and, after FSDP averages the ranks, ``1 / K``: the token mean over the mini batch's kept tokens
  (entropy and KL terms too). ``pg_clipfrac`` and the other masked means see one weight per
  micro batch, so they mean what they meant.

and then replaces the logged per-micro-batch ``actor/pg_loss`` and ``actor/kl_loss`` by each mini
batch's sum, averaged over the ranks: the mini batch's token-mean loss. On the CPU path it also
reports ``actor/entropy`` from the rollout's entropies (``rollout_entropy``).

With ``skip_constant_batches`` (the runs whose estimator is ``grpo_drop_constant``) a step whose
advantages are all zero on every rank (no group's rewards differ) runs no update at all and logs
``actor/skipped_update: 1``, rather than an update driven by the KL term alone.

Other ``loss_agg_mode`` values and Ulysses sequence parallelism keep verl's own weighting; the
dropped rows' ``EPS`` weight and the summed logs apply to them too. The recipes' workers build
this actor (``recipe_worker``, used by ``rlvr.train.trainer.RecipeTaskRunner``); the lines of
verl it relies on are checked by ``check_verl``.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from verl import DataProto
from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, register
from verl.utils.seqlen_balancing import prepare_dynamic_batch
from verl.workers.actor.dp_actor import DataParallelPPOActor

OWNER = "rlvr/train/token_mean.py"
TOKEN_MEAN = "token-mean"
SUM_MODE = "seq-mean-token-sum-norm"  # verl: sum(loss * mask) / mask.shape[-1]
EPS = 1e-6  # a dropped token's weight relative to a kept one
SKIPPED_KEY = "actor/skipped_update"
SUMMED_METRICS = ("actor/pg_loss", "actor/kl_loss")
# The lines of verl 0.6.1 this module is written against (see the module docstring).
UPDATE_POLICY_LINES = (
    "mini_batches = data.split(self.config.ppo_mini_batch_size)",
    "max_token_len = self.config.ppo_max_token_len_per_gpu * self.ulysses_sequence_parallel_size",
    "micro_batches, _ = prepare_dynamic_batch(mini_batch, max_token_len=max_token_len)",
    "micro_batches = mini_batch.split(self.config.ppo_micro_batch_size_per_gpu)",
    "loss_scale_factor = response_mask.shape[0] / self.config.ppo_mini_batch_size",
    "loss_scale_factor = 1 / self.gradient_accumulation",
    'micro_batch_metrics["actor/pg_loss"] = pg_loss.detach().item() * loss_scale_factor',
    'micro_batch_metrics["actor/kl_loss"] = kl_loss.detach().item() * loss_scale_factor',
    # mini_batches_alone: a call per mini batch keeps verl's old log probs through this switch
    'if hasattr(self.config, "use_rollout_log_probs") and self.config.use_rollout_log_probs:',
    'old_log_prob = model_inputs["old_log_probs"]',
)
AGG_LOSS_LINE = "loss = torch.sum(seq_losses) / loss_mask.shape[-1]"


def micro_batches(actor: Any, mini_batch: DataProto) -> tuple[list[list[int]], list[float]]:
    """verl's cut of ``mini_batch`` into micro batches (each one's rows) and each one's loss
    scale, as ``update_policy`` makes them (the same calls on the same rows)."""
    config = actor.config
    mini_rows = config.ppo_mini_batch_size
    if config.use_dynamic_bsz:
        max_token_len = config.ppo_max_token_len_per_gpu * actor.ulysses_sequence_parallel_size
        _, rows = prepare_dynamic_batch(mini_batch, max_token_len=max_token_len)
        return [list(r) for r in rows], [len(r) / mini_rows for r in rows]
    size = config.ppo_micro_batch_size_per_gpu
    accumulation = mini_rows // size
    starts = range(0, len(mini_batch), size)
    rows = [list(range(s, min(s + size, len(mini_batch)))) for s in starts]
    return rows, [1 / accumulation] * len(rows)


def token_weights(
    keep: Any, real: Any, cut: list[list[int]], scales: list[float], kept: float, dp: int
) -> Any:
    """Per-token weights that make verl's ``sum(loss * w) / T * scale``, summed over the micro
    batches of ``cut`` and averaged over ``dp`` ranks, the mean over the ``kept`` tokens of the
    mini batch on every rank. ``keep``: the kept tokens (1/0), ``real``: every response token."""
    import torch

    width = keep.shape[-1]
    weights = torch.zeros_like(keep, dtype=torch.float32)
    dropped = (real > 0) & (keep <= 0)
    for rows, scale in zip(cut, scales, strict=True):
        weight = width * dp / (max(kept, 1.0) * scale)
        weights[rows] = weight * (keep[rows] > 0) + EPS * weight * dropped[rows]
    return weights


def _all_reduce(values: list[float], op: str) -> list[float]:
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return values
    from verl.utils.device import get_device_name

    tensor = torch.tensor(values, dtype=torch.float64, device=get_device_name())
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return [float(v) for v in tensor.cpu()]


def _data_parallel_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


class TokenMeanActor(DataParallelPPOActor):
    """verl's actor with the token-mean loss and logs of the module docstring."""

    skip_constant_batches = False

    def update_policy(self, data: DataProto) -> dict[str, Any]:
        if self.skip_constant_batches and _all_reduce(
            [float(data.batch["advantages"].abs().max())], "max"
        ) == [0.0]:
            print("rlvr: no group's rewards differ on any rank: update skipped", flush=True)
            return {SKIPPED_KEY: 1.0}
        alone = self.mini_batches_alone(data)
        return self._update_each(alone, data) if alone else self._update(data)

    def _update(self, data: DataProto) -> dict[str, Any]:
        """verl's ``update_policy`` on ``data`` (less its dropped rows where ``rows_to_update``
        leaves them out) with the token weights and summed logs of the module docstring."""
        asked_data, data = data, self.rows_to_update(data)
        mini_batches = data.split(self.config.ppo_mini_batch_size)
        cuts = [micro_batches(self, mini) for mini in mini_batches]
        masks = [mini.batch["response_mask"] for mini in mini_batches]
        exact = self.config.loss_agg_mode == TOKEN_MEAN and self.ulysses_sequence_parallel_size == 1
        dp = _data_parallel_size() if exact else 1
        kept = _all_reduce([float((mask > 0).sum()) for mask in masks], "sum")
        weighted = []
        for mini, (cut, scales), mask, count in zip(mini_batches, cuts, masks, kept, strict=True):
            real = mini.batch["attention_mask"][:, -mask.shape[-1] :]
            if exact:
                weighted.append(token_weights(mask, real, cut, scales, count, dp))
            else:  # verl's weighting; dropped tokens only keep a micro batch from being empty
                keep = (mask > 0).float()
                weighted.append(keep + EPS * ((real > 0) & (mask <= 0)).float())
        import torch

        batch = data.batch.copy()  # shallow: the caller's mask stays as it was
        batch["response_mask"] = torch.cat(weighted).float()
        config = dataclasses.replace(self.config, loss_agg_mode=SUM_MODE) if exact else None
        asked, self.config = self.config, config or self.config
        try:
            weighted_data = DataProto(
                batch=batch, non_tensor_batch=data.non_tensor_batch, meta_info=data.meta_info
            )
            metrics = super().update_policy(weighted_data)
        finally:
            self.config = asked
        counts = [len(cut) for cut, _ in cuts] * int(self.config.ppo_epochs)
        for key in SUMMED_METRICS:
            if key in metrics:
                metrics[key] = _summed(metrics[key], counts, _data_parallel_size())
        metrics[SKIPPED_KEY] = 0.0
        rollout_entropy(asked_data, self.config.loss_agg_mode, metrics)
        return metrics

    def mini_batches_alone(self, data: DataProto) -> list[DataProto]:
        """``data``'s mini batches, when each can be updated by a call of its own and so lose its
        dropped rows (``rows_to_update``): one rank, one epoch, several mini batches of which one
        drops rows; otherwise none (verl's own loop over them)."""
        if _data_parallel_size() != 1 or self.config.ppo_epochs != 1:
            return []
        if len(data) <= self.config.ppo_mini_batch_size:
            return []
        minis = data.split(self.config.ppo_mini_batch_size)
        return minis if any(_partly_kept(mini) is not None for mini in minis) else []

    def _update_each(self, minis: list[DataProto], data: DataProto) -> dict[str, Any]:
        """verl's loop over ``minis``, a call (one optimizer step) each: as verl's, every call
        takes the batch's ``old_log_probs`` (verl's one-mini-batch shortcut would take the
        current log probs), and a mini batch without signal still steps (the skip is the whole
        batch's, ``update_policy``)."""
        asked = self.config
        self.config = dataclasses.replace(asked, use_rollout_log_probs=True)
        try:
            results = [self._update(mini) for mini in minis]
        finally:
            self.config = asked
        merged: dict[str, Any] = {}
        for metrics in results:  # verl's lists, in its order; each call's entropy is redone
            for key, value in metrics.items():
                if isinstance(value, list):
                    merged.setdefault(key, []).extend(value)
        merged[SKIPPED_KEY] = 0.0
        rollout_entropy(data, self.config.loss_agg_mode, merged)
        return merged

    def rows_to_update(self, data: DataProto) -> DataProto:
        """``data`` without the rows of dropped groups (a zero ``response_mask``), which weigh
        nothing in the loss (``EPS``) and cost a forward and a backward each: half the rows of a
        quickstart step. Only where leaving them out changes nothing else: one rank (no other
        rank's micro batches to match) and one mini batch (``mini_batches_alone`` hands them
        over one at a time); otherwise, or when no row or every row is dropped, ``data``."""
        if _data_parallel_size() != 1 or len(data) > self.config.ppo_mini_batch_size:
            return data
        kept = _partly_kept(data)
        return data if kept is None else data.select_idxs(kept)


def _partly_kept(data: DataProto) -> Any:
    """Which rows of ``data`` a group filter kept (a nonzero ``response_mask``); None when it kept
    every row or none."""
    kept = (data.batch["response_mask"] > 0).any(dim=-1)
    return None if bool(kept.all()) or not bool(kept.any()) else kept


def rollout_entropy(data: DataProto, loss_agg_mode: str, metrics: dict[str, Any]) -> None:
    """``actor/entropy`` from the rollout's per-token entropies when the batch carries them (the
    CPU path's HF rollout, ``rlvr.cpu.rollout``) and verl's metrics lack it: in bypass mode verl
    skips the old-log-prob pass that reports it. verl's formula there: ``agg_loss`` of the
    entropies with the actor's ``loss_agg_mode`` over this rank's batch and response mask."""
    from verl.trainer.ppo.core_algos import agg_loss

    from rlvr.cpu.rollout import ROLLOUT_ENTROPY_KEY

    entropy = data.batch.get(ROLLOUT_ENTROPY_KEY, None)
    if entropy is None or "actor/entropy" in metrics:
        return
    mask = data.batch["response_mask"]
    metrics["actor/entropy"] = agg_loss(entropy, mask, loss_agg_mode).item()


def _summed(values: list[float], counts: list[int], ranks: int) -> list[float]:
    """Per-micro-batch values summed per mini batch (``counts``: micro batches of each, in
    verl's order), each sum averaged over the ranks."""
    if sum(counts) != len(values):
        raise RuntimeError(
            f"rlvr: verl logged {len(values)} micro batches, {sum(counts)} expected; update {OWNER}"
        )
    sums, start = [], 0
    for count in counts:
        sums.append(sum(values[start : start + count]))
        start += count
    return [total / ranks for total in _all_reduce(sums, "sum")]


def recipe_worker(worker_class: Any, skip_constant_batches: bool) -> Any:
    """``worker_class`` (verl's FSDP ``ActorRolloutRefWorker`` or its async twin) whose actor is a
    ``TokenMeanActor``; ``init_model`` keeps verl's dispatch (one call to every rank)."""
    one_to_all = getattr(Dispatch, "ONE_TO_ALL")  # noqa: B009 (verl's enum is built at run time)
    inherited = getattr(worker_class.init_model, MAGIC_ATTR, None)
    if not inherited or inherited.get("dispatch_mode") != one_to_all:
        raise RuntimeError(f"rlvr: verl's init_model is not dispatched ONE_TO_ALL; update {OWNER}")

    actor_class: Any = type(
        "TokenMeanActor", (TokenMeanActor,), {"skip_constant_batches": skip_constant_batches}
    )

    class RecipeWorker(worker_class):
        token_mean_actor = actor_class

        @register(dispatch_mode=one_to_all)
        def init_model(self) -> None:
            super().init_model()
            if getattr(self, "_is_actor", False):
                verls: Any = getattr(self, "actor")  # noqa: B009 (set by verl's init_model)
                self.actor = self.token_mean_actor(
                    config=verls.config,
                    actor_module=verls.actor_module,
                    actor_optimizer=verls.actor_optimizer,
                )

    RecipeWorker.__name__ = RecipeWorker.__qualname__ = worker_class.__name__
    return RecipeWorker


def _inner(function: Any, name: str) -> Any:
    """The function a verl decorator's wrapper holds (``GPUMemoryLogger`` keeps no
    ``__wrapped__``), or ``function`` itself."""
    held = [cell.cell_contents for cell in getattr(function, "__closure__", None) or ()]
    inner = [f for f in held if inspect.isfunction(f) and f.__name__ == name]
    return inner[0] if len(inner) == 1 else function


def check_verl() -> None:
    """Refuse a verl whose update or loss aggregation is not the one read here."""
    from verl.trainer.ppo import core_algos

    source = inspect.getsource(_inner(DataParallelPPOActor.update_policy, "update_policy"))
    for line in UPDATE_POLICY_LINES:
        if line not in source:
            raise RuntimeError(
                f"rlvr: verl's update_policy no longer contains {line!r}; update {OWNER}"
            )
    if AGG_LOSS_LINE not in inspect.getsource(core_algos.agg_loss):
        raise RuntimeError(f"rlvr: verl's agg_loss changed {SUM_MODE}; update {OWNER}")


check_verl()
