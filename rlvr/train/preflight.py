"""Checks a launcher runs before Ray starts, so a typo fails in seconds, not after cluster start-up.

Usage: python -m rlvr.train.preflight EXPERIMENT [hydra overrides...]   (exit 1 with the problems)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from rlvr import tasks
from rlvr.data.prep import DATA_COLUMNS
from rlvr.models.hub import HUB_ID
from rlvr.tasks import TaskSpec
from rlvr.train.checkpoint_budget import estimate, human


def _data_problems(config: Any, task: TaskSpec | None) -> list[str]:
    """Each data file exists, is Parquet with verl's columns, and holds rows of the task the
    reward grades (GSM8K rows under the Countdown reward would all score 0, silently)."""
    import pyarrow.parquet as pq

    problems = []
    hint = f"; create it with: {task.prep_command}" if task else ""
    for key in ("train_files", "val_files"):
        files = config.data[key]
        for path in [files] if isinstance(files, str) else list(files):
            if not Path(path).is_file():
                problems.append(f"data.{key}: {path} does not exist{hint}")
                continue
            try:
                table = pq.read_table(path, columns=["data_source"])
                schema = pq.read_schema(path)
            except Exception as exc:
                problems.append(f"data.{key}: {path} is not readable Parquet ({exc}){hint}")
                continue
            missing = [c for c in DATA_COLUMNS if c not in schema.names]
            if missing:
                problems.append(f"data.{key}: {path} lacks column(s) {missing}{hint}")
                continue
            sources = sorted({str(s) for s in table.column("data_source").to_pylist()})
            if task and sources != [task.data_source]:
                problems.append(
                    f"data.{key}: {path} holds data_source {sources}, but the reward grades "
                    f"{task.name} ({task.data_source!r}); point data.{key} at {task.name} data"
                    f"{hint}"
                )
    return problems


def check(config: Any, visible_gpus: int | None = None) -> list[str]:
    """Problems with a composed config, as messages; empty when it is ready to launch."""
    task = tasks.for_config(config)
    problems = _data_problems(config, task)

    model_path = str(config.actor_rollout_ref.model.path)
    if not Path(model_path).expanduser().exists() and not HUB_ID.match(model_path):
        problems.append(
            f"actor_rollout_ref.model.path: {model_path} is neither a local folder nor a hub id "
            "(org/name)"
        )

    wanted = int(config.trainer.n_gpus_per_node)
    if config.actor_rollout_ref.rollout.name != "hf":  # the CPU path advertises one Ray GPU
        if visible_gpus is None:
            import torch

            visible_gpus = torch.cuda.device_count()
        if visible_gpus < wanted:
            problems.append(
                f"trainer.n_gpus_per_node={wanted} but this node sees {visible_gpus} GPU(s); pick "
                "a hardware overlay that fits (hardware=cpu without GPUs)"
            )

    reward = config.custom_reward_function
    try:
        spec = importlib.util.spec_from_file_location("_preflight_reward", reward.path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {reward.path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        result = getattr(module, reward.name)(
            "preflight", "", None, None, **dict(reward.get("reward_kwargs", {}))
        )
        if not isinstance(result, dict) or "score" not in result:
            raise TypeError(f"{reward.name} returned {result!r}, not a dict with 'score'")
    except Exception as exc:
        problems.append(f"custom_reward_function: {reward.path}: {type(exc).__name__}: {exc}")
    problems.extend(_checkpoint_problems(config))
    return problems


def _checkpoint_problems(config: Any) -> list[str]:
    """Print the checkpoint disk budget; a problem when it cannot fit (a full disk mid-run
    kills the job at a save, after hours of training)."""
    budget = estimate(config)
    print(f"pre-flight: {budget.line()}")
    for warning in budget.warnings:
        print(f"pre-flight: warning: {warning}", file=sys.stderr)
    needed = budget.needed
    if needed is None or needed <= budget.free_bytes:
        return []
    keep = config.trainer.get("max_actor_ckpt_to_keep")
    keep = "unset: every checkpoint is kept" if keep is None else keep
    return [
        f"trainer.default_local_dir: {budget.kept} checkpoint(s) need {human(needed)} but "
        f"{budget.directory} has {human(budget.free_bytes)} free; free space there, lower "
        f"trainer.max_actor_ckpt_to_keep (now {keep}), or point "
        "paths.checkpoints=/a/bigger/disk"
    ]


def main(argv: list[str] | None = None) -> int:
    from rlvr.train.config import compose

    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    config = compose(args[0], args[1:])
    problems = check(config)
    for problem in problems:
        print(f"pre-flight: {problem}", file=sys.stderr)
    if not problems:
        task = tasks.for_config(config)
        print(
            f"pre-flight: {args[0]} ok (task {task.name if task else 'unregistered'}, "
            f"{config.trainer.nnodes} node(s) x {config.trainer.n_gpus_per_node} GPU(s), "
            f"model {config.actor_rollout_ref.model.path})"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
