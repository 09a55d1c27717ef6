"""How a rollout batch becomes optimizer steps, and the rules that keep the gradient scale right.

verl 0.6.1 turns ``data.train_batch_size`` prompts x ``rollout.n`` responses into updates this way:

- the batch is split evenly over the data-parallel ranks (``world // ulysses_sp``);
- each rank normalises ``actor.ppo_mini_batch_size`` to rows, ``mini * n // dp``
  (``ActorRolloutRefWorker.__init__`` in ``verl/workers/fsdp_workers.py``) and takes one
  optimizer step per chunk of that many rows (``DataParallelPPOActor.update_policy``);
- under ``use_dynamic_bsz`` each micro batch's loss is scaled by ``rows / mini_rows``
  (``dp_actor.py``), so the factors of a mini batch sum to 1 only when the rank holds at least
  ``mini_rows`` rows. verl checks ``train_batch_size >= ppo_mini_batch_size`` only when
  ``use_dynamic_bsz`` is false (``ActorConfig.validate``): with dynamic batches a mini batch
  larger than the batch silently shrinks every gradient (0.25x for 64 prompts under verl's
  default mini batch of 256), which ``grad_clip`` and the logged losses then misread.

The rules here hold whatever ``use_dynamic_bsz`` says; pre-flight, the rehearsal and
``tests/test_config.py`` apply them to every experiment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MINI = "actor_rollout_ref.actor.ppo_mini_batch_size"


@dataclass(frozen=True)
class Batching:
    """One run's batch arithmetic, in prompts and in rows (responses) per data-parallel rank."""

    train_batch: int  # prompts per rollout batch
    mini_batch: int  # prompts per optimizer step
    group_size: int  # rollout.n
    data_parallel: int  # ranks the batch is split over
    epochs: int  # actor.ppo_epochs

    @property
    def rows_per_rank(self) -> int:
        return self.train_batch * self.group_size // self.data_parallel

    @property
    def mini_rows_per_rank(self) -> int:
        """verl's normalised ``ppo_mini_batch_size`` (fsdp_workers.py)."""
        return self.mini_batch * self.group_size // self.data_parallel

    @property
    def updates_per_batch(self) -> int:
        """Optimizer steps per rollout batch (``update_policy``'s mini batches x epochs)."""
        chunks = -(-self.rows_per_rank // max(self.mini_rows_per_rank, 1))
        return chunks * self.epochs

    def problems(self) -> list[str]:
        """What breaks the gradient scale or verl's even split; empty when the batching is sound."""
        found = []
        if self.mini_rows_per_rank <= 0:
            found.append(
                f"{MINI} {self.mini_batch} x rollout.n {self.group_size} must be at least the "
                f"{self.data_parallel} data-parallel ranks; raise it"
            )
        elif self.mini_batch > self.train_batch:
            found.append(
                f"{MINI} {self.mini_batch} > data.train_batch_size "
                f"{self.train_batch}: each update's loss-scale factors sum to "
                f"{self.train_batch / self.mini_batch:.3g}, not 1 (set ppo_mini_batch_size <= "
                f"train_batch_size)"
            )
        elif self.train_batch % self.mini_batch:
            found.append(
                f"data.train_batch_size {self.train_batch} is not a multiple of "
                f"{MINI} {self.mini_batch}: the last update of each batch "
                f"gets a smaller gradient"
            )
        for name, prompts in (("data.train_batch_size", self.train_batch), (MINI, self.mini_batch)):
            if prompts * self.group_size % self.data_parallel:
                found.append(
                    f"{name} {prompts} x rollout.n {self.group_size} = "
                    f"{prompts * self.group_size} responses do not split evenly over "
                    f"{self.data_parallel} data-parallel ranks"
                )
        return found

    def line(self) -> str:
        """One human line: what an update is made of."""
        return (
            f"{self.train_batch} prompts x {self.group_size} a batch, {self.updates_per_batch} "
            f"update(s) of {self.mini_batch} prompts ({self.mini_rows_per_rank} rows on each of "
            f"{self.data_parallel} ranks)"
        )


def batching(config: Any, world_size: int | None = None) -> Batching:
    """The batching of a composed config, at its own world size unless ``world_size`` says."""
    actor = config.actor_rollout_ref.actor
    world = world_size or int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    sequence_parallel = int(actor.get("ulysses_sequence_parallel_size", 1) or 1)
    return Batching(
        train_batch=int(config.data.train_batch_size),
        mini_batch=int(actor.ppo_mini_batch_size),
        group_size=int(config.actor_rollout_ref.rollout.n),
        data_parallel=max(world // sequence_parallel, 1),
        epochs=int(actor.get("ppo_epochs", 1) or 1),
    )
