"""Whose checkpoints are these? A run's identity, written into its checkpoint folder when it
starts (``RecipeTrainer.fit``), and read by pre-flight before the next run resumes from them.

verl's ``resume_mode: auto`` resumes from the newest ``global_step_N`` in
``trainer.default_local_dir`` whatever wrote it: a run with another model, task, topology or
LoRA rank pointed at the same folder loads those weights (or fails in the workers, minutes
later, on a shape mismatch) instead of starting fresh. Pre-flight refuses that, and a folder
holding checkpoints without an identity (not written by a run of these recipes, or before they
wrote one), naming the two ways out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr import tasks
from rlvr.common.checkpoints import saved_steps
from rlvr.common.files import write_json_atomic
from rlvr.planning.checkpoint_budget import lora_rank

IDENTITY_FILE = "rlvr_run.json"
WAYS_OUT = (
    "point this run elsewhere (trainer.default_local_dir=... or trainer.experiment_name=...) or "
    "start fresh over them (trainer.resume_mode=disable)"
)


def identity(config: Any) -> dict[str, Any]:
    """What must match for a checkpoint to be this run's: the weights' shape and meaning."""
    task = tasks.for_config(config)
    trainer = config.trainer
    return {
        "model": str(config.actor_rollout_ref.model.path),
        "task": task.name if task is not None else None,
        "nodes_x_gpus": f"{trainer.nnodes}x{trainer.n_gpus_per_node}",
        "lora_rank": lora_rank(config),
        "experiment": str(trainer.get("experiment_name")),
    }


def write_identity(config: Any) -> Path | None:
    """Write the run's identity into its checkpoint folder, atomically (a crash leaves the old
    file or the new one, never half of one). A run that saves no checkpoint (``save_freq`` <= 0)
    into a folder that does not exist writes nothing: there is nothing to resume, and a sweep's
    or test's folders stay as empty as they asked."""
    folder = Path(str(config.trainer.default_local_dir))
    if int(config.trainer.save_freq) <= 0 and not folder.exists():
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / IDENTITY_FILE
    write_json_atomic(path, identity(config))
    return path


def _saved_identity(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def identity_problems(config: Any) -> list[str]:
    """One line when this run would resume from checkpoints another run left."""
    if config.trainer.get("resume_mode") == "disable":
        return []
    folder = Path(str(config.trainer.default_local_dir))
    steps = saved_steps(folder) if folder.is_dir() else []
    if not steps:
        return []
    held = f"trainer.default_local_dir: {folder} holds checkpoints up to global_step_{steps[-1]}"
    saved = _saved_identity(folder / IDENTITY_FILE)
    if saved is None:
        return [
            f"{held} but no readable {IDENTITY_FILE} saying which run wrote them, and verl would "
            f"resume from them; {WAYS_OUT}"
        ]
    now = identity(config)
    differ = [f"{key} {saved.get(key)} there, {value} now" for key, value in now.items()
              if saved.get(key) != value]  # fmt: skip
    if not differ:
        return []
    return [f"{held} of another run ({'; '.join(differ)}), which verl would resume; {WAYS_OUT}"]
