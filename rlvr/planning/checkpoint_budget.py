"""How much disk a run's actor checkpoints will take, from its composed config, before it starts.

Mirrors verl 0.6.1 (FSDP strategy):
- steps: ``RayPPOTrainer._create_dataloader``: ``len(train_dataloader) * total_epochs`` with
  ``drop_last=True``, replaced by ``trainer.total_training_steps`` when set; ``fit`` still stops
  when the epochs run out, so a larger ``total_training_steps`` never reaches its last step.
- saves: ``fit`` saves when ``save_freq > 0`` and (step % save_freq == 0 or the last step).
- kept: ``FSDPCheckpointManager.save_checkpoint`` (rank 0) deletes the oldest before writing the
  next, so at most ``max_actor_ckpt_to_keep`` exist at once; None or <= 0 keeps all.
- bytes: each rank ``torch.save``s its model shard and optimizer state (params are
  ``fsdp_config.model_dtype``, fp32 by default; AdamW keeps two moments of that dtype per
  trainable param). With ``0 < fsdp_size < world`` verl builds a 2-D (HSDP) mesh,
  ``(world // fsdp_size, fsdp_size)`` (``create_device_mesh`` in fsdp_workers.py): every
  replica holds and saves the whole sharded state, so shards count once per replica (the
  2-node experiment writes two copies). ``hf_model`` (rank 0 only) adds one full copy in the
  same dtype; LoRA adds
  ``lora_adapter/`` (fsdp_workers.save_checkpoint) while the shards still hold the full base,
  and after the run rlvr.train.lora_merge adds a merged model to each kept LoRA checkpoint.
Ignored as small: extra state (scheduler, RNG), tokenizer, config and the dataloader's data.pt.
The whole budget is assumed to land on one filesystem (a shared one on multi-node runs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.common.disk_full import free_bytes
from rlvr.common.disk_full import human_bytes as human  # preflight imports it from here
from rlvr.common.files import read_safetensors_header
from rlvr.models.architectures import (
    TABLE,
    for_model_path,
    lora_parameters_per_rank,
    parameter_count,
)

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
# After a LoRA run, rlvr.train.lora_merge writes every kept checkpoint's actor/huggingface as
# the base with the adapter merged, in the base's dtype; hub bases here (Qwen) are published
# in bf16.
MERGED_DTYPE_DEFAULT = "bfloat16"


@dataclass(frozen=True)
class ModelSize:
    """Parameters of the base model, and those LoRA adds per unit of rank on all linear layers."""

    parameters: int
    lora_params_per_rank: int | None
    source: str


@dataclass
class Budget:
    directory: Path  # trainer.default_local_dir
    free_bytes: int  # on the filesystem that will hold it
    steps: int | None  # None: unknown (train Parquet missing)
    saved: int | None
    kept: int | None  # checkpoints on disk at once
    per_checkpoint: int | None  # bytes; None: parameter count unknown
    merged: int  # bytes of the LoRA post-run merged model, one per kept checkpoint
    warnings: list[str] = field(default_factory=list)
    replicas: int = 1  # HSDP copies of the sharded state, each saved

    @property
    def needed(self) -> int | None:
        if self.kept is None or self.per_checkpoint is None:
            return None
        return self.kept * (self.per_checkpoint + self.merged)

    def line(self) -> str:
        """One human line: count x size = total under directory (free ...)."""
        kept = "?" if self.kept is None else str(self.kept)
        per = "? B" if self.per_checkpoint is None else human(self.per_checkpoint + self.merged)
        merged = f" (incl. {human(self.merged)} merged model)" if self.merged else ""
        if self.replicas > 1:
            merged += f" (shards saved by each of {self.replicas} HSDP replicas)"
        total = "?" if self.needed is None else human(self.needed)
        return (
            f"checkpoints: {kept} kept x {per}{merged} = {total} under {self.directory} "
            f"(free {human(self.free_bytes)})"
        )


def safetensors_size(folder: Path) -> ModelSize | None:
    """Counts from the JSON headers of ``folder/*.safetensors`` (no tensor data is read).

    Tied weights are stored once, as the model holds them. LoRA's all-linear targets are the
    2-D weights inside decoder layers (peft leaves out embeddings and the output layer).
    """
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    parameters = lora_per_rank = 0
    for path in files:
        for name, tensor in read_safetensors_header(path).items():
            if name == "__metadata__":
                continue
            shape = tensor["shape"]
            count = 1
            for dim in shape:
                count *= dim
            parameters += count
            if len(shape) == 2 and ".layers." in name and name.endswith(".weight"):
                lora_per_rank += shape[0] + shape[1]  # A is r x in, B is out x r
    return ModelSize(parameters, lora_per_rank, f"safetensors headers in {folder}")


def model_size(config: Any) -> ModelSize | None:
    """A local folder's safetensors headers, else the shape its config.json or the architectures
    table gives (rlvr/models/architectures.py), keyed by the model path the config holds now."""
    path = str(config.actor_rollout_ref.model.path)
    folder = Path(path).expanduser()
    if folder.is_dir() and (size := safetensors_size(folder)) is not None:
        return size
    found = for_model_path(path)
    if found is None:
        return None
    arch, source = found
    return ModelSize(parameter_count(arch), lora_parameters_per_rank(arch), source)


def train_rows(config: Any) -> int | None:
    """Rows verl's train dataset starts from: Parquet metadata, capped by train_max_samples.

    An upper bound: filter_overlong_prompts can only drop rows.
    """
    import pyarrow.parquet as pq

    files = config.data.train_files
    rows = 0
    for path in [files] if isinstance(files, str) else list(files):
        if not Path(path).is_file():
            return None
        rows += pq.ParquetFile(path).metadata.num_rows
    max_samples = int(config.data.get("train_max_samples", -1) or -1)
    return min(rows, max_samples) if max_samples > 0 else rows


def training_steps(config: Any) -> tuple[int | None, bool]:
    """(steps the run takes, whether ``fit`` reaches its last-step save)."""
    planned = config.trainer.get("total_training_steps")
    rows = train_rows(config)
    batch = int(config.data.get("gen_batch_size") or config.data.train_batch_size)
    bound = None if rows is None else rows // batch * int(config.trainer.total_epochs)
    if planned is None:
        return bound, True
    if bound is not None and bound < int(planned):
        return bound, False  # the epochs run out first: no is_last_step
    return int(planned), True


def checkpoints_saved(steps: int, save_freq: int, reaches_last: bool) -> int:
    if save_freq <= 0 or steps <= 0:
        return 0
    return steps // save_freq + int(reaches_last and steps % save_freq != 0)


def max_kept(config: Any) -> int | None:
    """verl's rotation limit: None when it keeps everything."""
    trainer = config.trainer
    if trainer.get("remove_previous_ckpt_in_save", False):
        return 1
    keep = trainer.get("max_actor_ckpt_to_keep")
    return keep if isinstance(keep, int) and keep > 0 else None


def lora_rank(config: Any) -> int:
    """The actor's LoRA rank; 0 for full fine-tuning."""
    return int(config.actor_rollout_ref.model.get("lora_rank", 0) or 0)


def world_size(config: Any) -> int:
    return int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)


def shard_size(config: Any) -> int:
    """Ranks the actor's state is sharded over: ``fsdp_size`` under HSDP, else the world."""
    world = world_size(config)
    shard = int(config.actor_rollout_ref.actor.fsdp_config.get("fsdp_size", -1) or -1)
    return shard if 0 < shard < world else world


def replicas(config: Any) -> int:
    """Copies of the sharded actor state: ``world // fsdp_size`` under HSDP, else 1."""
    return world_size(config) // shard_size(config)


def checkpoint_bytes(config: Any, size: ModelSize) -> tuple[int, list[str]]:
    """Bytes of one actor checkpoint (all ranks together), and warnings on what is guessed."""
    actor = config.actor_rollout_ref.actor
    width = DTYPE_BYTES[str(actor.fsdp_config.get("model_dtype") or "fp32")]
    contents = set(actor.checkpoint.save_contents)
    warnings = []
    lora = 0
    rank = lora_rank(config)
    if rank > 0:
        if size.lora_params_per_rank is None:
            warnings.append("LoRA adapter size unknown (no lora_params_per_rank): not counted")
        else:
            # All-linear: an upper bound for a narrower target_modules list.
            lora = rank * size.lora_params_per_rank
    total = size.parameters + lora
    trainable = lora if rank > 0 else size.parameters
    sharded = 0
    if "model" in contents:
        sharded += width * total  # the shards hold the frozen base too
    if "optimizer" in contents:
        sharded += 2 * width * trainable  # AdamW: exp_avg and exp_avg_sq
    per = sharded * replicas(config)
    if "hf_model" in contents:
        per += width * total
    if rank > 0:
        per += width * lora  # lora_adapter/adapter_model.safetensors
    return per, warnings


def merged_bytes(config: Any, size: ModelSize) -> int:
    """The LoRA post-run merged model of one checkpoint: the base in its own dtype."""
    if lora_rank(config) <= 0:
        return 0
    dtype = MERGED_DTYPE_DEFAULT
    model_config = Path(str(config.actor_rollout_ref.model.path)).expanduser() / "config.json"
    if model_config.is_file():
        declared = json.loads(model_config.read_text())
        dtype = str(declared.get("torch_dtype") or declared.get("dtype") or dtype)
    return DTYPE_BYTES.get(dtype, 4) * size.parameters


def estimate(config: Any) -> Budget:
    """The checkpoint budget of a composed config (``rlvr.config.compose.compose``).

    Checkpoints an earlier run left in the directory are not subtracted: verl's rotation list
    starts empty in every run, so it never deletes them, and ``free`` already excludes them.
    """
    directory = Path(str(config.trainer.default_local_dir)).expanduser()
    free = free_bytes(directory)
    steps, reaches_last = training_steps(config)
    save_freq = int(config.trainer.save_freq)
    saved = None
    if steps is not None or save_freq <= 0:
        saved = checkpoints_saved(steps or 0, save_freq, reaches_last)
    keep = max_kept(config)
    kept = keep if saved is None else (saved if keep is None else min(saved, keep))
    budget = Budget(directory, free, steps, saved, kept, None, 0)
    if kept is None:
        budget.warnings.append(
            "checkpoint count unknown: the train Parquet is missing, and neither "
            "trainer.total_training_steps nor trainer.max_actor_ckpt_to_keep is set"
        )
    size = model_size(config)
    if size is None:
        budget.warnings.append(
            f"parameter count unknown for {config.actor_rollout_ref.model.path} (no local "
            f"safetensors or config.json, no row in {TABLE}'s _ROWS: add one): checkpoint size not "
            "checked"
        )
        return budget
    budget.per_checkpoint, warnings = checkpoint_bytes(config, size)
    budget.replicas = replicas(config)
    budget.merged = merged_bytes(config, size)
    budget.warnings.extend(warnings)
    return budget
