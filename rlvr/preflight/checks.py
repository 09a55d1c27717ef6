"""Checks a launcher runs before Ray starts, so a typo fails in seconds, not after cluster start-up.

Usage: python -m rlvr.preflight.checks EXPERIMENT [hydra overrides...]   (exit 2 with the problems)

Refused here (docs/TRAINING.md, "Errors"): an unknown experiment or override key, data files
that are missing, not Parquet or of another task, a model path that will not load (a hub id
not in this node's HF cache: the workers run offline, ``hub_cache``), numeric
settings verl rejects only after Ray starts, reward kwargs the reward does not take, too few
GPUs, a running Ray cluster verl would join silently, a run that would train 0 steps
(``steps``), checkpoints of another run it would resume from (``run_identity``), and
checkpoints that cannot fit the disk.
A GPU run whose memory plan (rlvr/planning/memory_plan.py, an estimate) does not fit the GPU is
a warning; with RLVR_STRICT_MEMORY=1 in the environment it is refused too. A CPU run in bf16
on a CPU that only emulates it (``rlvr.cpu.precision``: slower there than fp32) is a warning too.
The data-file checks are in ``preflight_data``, the Ray one in ``ray_cluster``; the numeric and
verl config checks here also serve the sweep runner (rlvr/sweep/runner.py).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import math
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlvr import tasks
from rlvr.common.checkpoints import TRACKER_FILE, UnreadableTracker, saved_steps, tracked_step
from rlvr.common.messages import first_line
from rlvr.config.batching import batching
from rlvr.cpu.precision import emulated_bf16_warning
from rlvr.models.hub import model_path_problem
from rlvr.planning.checkpoint_budget import estimate, human
from rlvr.preflight import hub_cache
from rlvr.preflight.data import data_problems
from rlvr.preflight.ray_cluster import ray_plan
from rlvr.preflight.run_identity import identity_problems
from rlvr.preflight.steps import zero_step_problems
from rlvr.tasks import TaskSpec
from rlvr.tinker.preflight import is_tinker, tinker_problems

MAX_COUNT = 2**31 - 1  # torch and vLLM index lengths and batch sizes with int32


def _count(config: Any, key: str, allow_none: bool = False) -> str | None:
    """A problem when the dotted ``key`` is not a whole number > 0 (a count or a length)."""
    value = OmegaConf.select(config, key)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return f"{key}={value}: must be a whole number > 0"
    if value > MAX_COUNT:
        return f"{key}={value}: must be at most {MAX_COUNT}"
    return None


def _rate(config: Any, key: str) -> str | None:
    """A problem when the dotted ``key`` is not a finite number > 0 (a learning rate)."""
    value = OmegaConf.select(config, key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not value > 0
    ):
        return f"{key}={value}: must be a finite number > 0"
    return None


def numeric_problems(config: Any) -> list[str]:
    """Settings verl 0.6.1 rejects only inside its Ray workers (rollout.n=0 fails the
    mini-batch normalisation of ``fsdp_workers``), or that train nothing (lr 0)."""
    actor = "actor_rollout_ref.actor"
    counts = [
        "data.train_batch_size",
        "data.max_prompt_length",
        "data.max_response_length",
        f"{actor}.ppo_mini_batch_size",
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
    ]
    optional = [
        f"{actor}.ppo_micro_batch_size_per_gpu",
        f"{actor}.ulysses_sequence_parallel_size",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    ]
    problems = [p for k in counts if (p := _count(config, k)) is not None]
    problems += [p for k in optional if (p := _count(config, k, allow_none=True)) is not None]
    if (problem := _rate(config, f"{actor}.optim.lr")) is not None:
        problems.append(problem)
    n = config.actor_rollout_ref.rollout.n
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_COUNT:
        problems.append(f"actor_rollout_ref.rollout.n={n}: must be a whole number >= 1")
    elif n < 2 and config.algorithm.adv_estimator == "grpo":
        problems.append(
            "actor_rollout_ref.rollout.n=1: GRPO compares a group of responses per prompt; "
            "with one its advantage is the raw score; set rollout.n >= 2"
        )
    if problems:
        return problems
    return _batch_split_problems(config)


def _batch_split_problems(config: Any) -> list[str]:
    """verl's worker-side split (rlvr/config/batching.py: whole mini batches, even over the
    ranks), and ``ppo_micro_batch_size_per_gpu`` dividing the per-rank mini batch."""
    plan = batching(config)
    if found := plan.problems():
        return found
    per_rank = plan.mini_rows_per_rank
    micro = config.actor_rollout_ref.actor.get("ppo_micro_batch_size_per_gpu")
    if micro is not None and per_rank % int(micro) != 0:
        return [
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}: must divide the "
            f"per-rank mini batch ppo_mini_batch_size x rollout.n / ranks = {per_rank}"
        ]
    return []


def verl_problems(config: Any) -> list[str]:
    """verl's own config checks (``rlvr.config.compose.validate``), run now rather than in the
    driver after Ray starts; its message, one line."""
    from rlvr.config.compose import validate

    try:
        # verl prints a success banner and warns about its profiler: noise around one line
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate(copy.deepcopy(config))
    except Exception as exc:
        return [f"verl refuses this config: {first_line(exc)}"]
    return []


def _reward_problems(config: Any, task: TaskSpec | None) -> list[str]:
    """Reward kwargs checked by name and value, then one call as verl will make it."""
    reward = config.custom_reward_function
    kwargs: dict[str, Any] = dict(reward.get("reward_kwargs") or {})
    if task is not None:
        try:
            task.check_reward_kwargs(kwargs)
        except tasks.TaskError as exc:
            return [f"custom_reward_function.reward_kwargs: {exc}"]
    try:
        spec = importlib.util.spec_from_file_location("_preflight_reward", reward.path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {reward.path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        result = getattr(module, reward.name)("preflight", "", None, None, **kwargs)
        if not isinstance(result, dict) or "score" not in result:
            raise TypeError(f"{reward.name} returned {result!r}, not a dict with 'score'")
    except Exception as exc:
        return [f"custom_reward_function: {reward.path}: {type(exc).__name__}: {first_line(exc)}"]
    return []


OVERLONG_BUFFER_KEY = "reward_model.reward_kwargs.overlong_buffer_cfg.len"


def _overlong_buffer_problems(config: Any) -> list[str]:
    """verl's DAPO manager penalises the last ``len`` tokens of the response budget; a buffer as
    long as the budget penalises every response (objective/dapo.yaml's 204 is for 1024 tokens).
    One that fits but is not the paper's last fifth is only pointed out."""
    settings = OmegaConf.select(config, "reward_model.reward_kwargs.overlong_buffer_cfg")
    if settings is None or not settings.get("enable"):
        return []
    if _count(config, "data.max_response_length") is not None:
        return []  # numeric_problems reports it
    if (problem := _count(config, OVERLONG_BUFFER_KEY)) is not None:
        return [problem]
    buffer, budget = int(settings.len), int(config.data.max_response_length)
    if buffer >= budget:
        return [
            f"{OVERLONG_BUFFER_KEY}={buffer} must be below data.max_response_length={budget} "
            f"(DAPO's last fifth: set {OVERLONG_BUFFER_KEY}={budget // 5})"
        ]
    if buffer != budget // 5:
        print(
            f"pre-flight: note: {OVERLONG_BUFFER_KEY}={buffer}, not the last fifth of "
            f"data.max_response_length={budget} ({budget // 5}) that DAPO uses"
        )
    return []


def _gpu_problems(config: Any, visible_gpus: int | None) -> list[str]:
    if config.actor_rollout_ref.rollout.name == "hf":  # the CPU path advertises one Ray GPU
        return []
    if _count(config, "trainer.n_gpus_per_node") is not None:
        return []  # numeric_problems reports it
    wanted = int(config.trainer.n_gpus_per_node)
    if visible_gpus is None:
        import torch

        visible_gpus = torch.cuda.device_count()
    if visible_gpus < wanted:
        fitting = _experiments_for(config, visible_gpus)
        hint = f", or an experiment for that many: {', '.join(fitting)}" if fitting else ""
        return [
            f"trainer.n_gpus_per_node={wanted} but this node sees {visible_gpus} GPU(s); pick "
            f"a hardware overlay that fits (hardware=cpu without GPUs){hint}"
        ]
    return []


def _experiments_for(config: Any, gpus: int) -> list[str]:
    """The GPU experiments of the same task that run on one node of ``gpus`` GPUs."""
    from rlvr.config.compose import compose, experiments

    task = tasks.for_config(config)
    if gpus < 1 or task is None:
        return []
    found = []
    for name in experiments():
        other = compose(name)
        fits = other.trainer.nnodes == 1 and other.trainer.n_gpus_per_node <= gpus
        on_gpus = other.actor_rollout_ref.rollout.name == "vllm"
        if fits and on_gpus and tasks.for_config(other) == task:
            found.append(name)
    return found


STRICT_MEMORY_ENV = "RLVR_STRICT_MEMORY"  # 1: a plan over the GPU refuses the run


def strict_memory(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a memory plan that does not fit refuses the run (``RLVR_STRICT_MEMORY=1``)
    rather than warning; ValueError (one line) for a value that is neither."""
    value = (os.environ if environ is None else environ).get(STRICT_MEMORY_ENV, "").strip()
    if value.lower() in ("", "0", "false", "no"):
        return False
    if value.lower() in ("1", "true", "yes"):
        return True
    raise ValueError(f"{STRICT_MEMORY_ENV}={value}: use 1 (refuse) or 0 (warn, the default)")


def _memory_problems(config: Any) -> list[str]:
    """Print the GPU run's memory table (rlvr/planning/memory_plan.py). A plan that cannot fit
    the GPU this machine has (or the one the hardware overlay declares) is an estimate, not a
    fact: one warning line, and the run goes on; a problem only with ``RLVR_STRICT_MEMORY=1``."""
    from rlvr.planning.memory_plan import plan, unplanned

    try:
        strict = strict_memory()
    except ValueError as exc:
        return [str(exc)]
    try:
        memory = plan(config)
    except (KeyError, TypeError, ValueError) as exc:
        print(f"pre-flight: warning: memory not planned: {first_line(exc)}", file=sys.stderr)
        return []
    if memory is None:
        if (why := unplanned(config)) is not None:
            print(f"pre-flight: warning: memory not planned: {why}", file=sys.stderr)
        return []
    for line in memory.lines():
        print(f"pre-flight: {line}")
    if strict or not memory.problems:
        return memory.problems
    gib = 1024**3
    capacity = memory.machine.gpu_bytes
    peak = f"peak estimate ~{memory.peak.bytes / gib:.1f} GiB per GPU ({memory.peak.name})"
    if capacity:
        margin = (capacity - memory.peak.bytes) / gib
        peak += f" against {capacity / gib:.1f} GiB, margin {margin:+.1f} GiB"
    print(
        f"pre-flight: warning: memory plan (an estimate) says it may not fit: {peak}; "
        f"{'; '.join(memory.problems)}. Starting anyway; {STRICT_MEMORY_ENV}=1 refuses instead",
        file=sys.stderr,
    )
    return []


def _warn_lora_lr(config: Any) -> None:
    """The lr is the experiment's, not the adapter's: adapter=lora32 on a full fine-tuning recipe
    keeps its ~1e-6, where LoRA barely moves (its recipes here run at 1e-4)."""
    actor = config.actor_rollout_ref
    lr = float(actor.actor.optim.lr)
    if int(actor.model.get("lora_rank") or 0) > 0 and lr < 1e-5:
        print(
            f"pre-flight: warning: LoRA at lr {lr:g}, a full fine-tuning rate; LoRA's recipes "
            "run at 1e-4: actor_rollout_ref.actor.optim.lr=1e-4",
            file=sys.stderr,
        )


def check(config: Any, visible_gpus: int | None = None) -> list[str]:
    """Problems with a composed config, as messages; empty when it is ready to launch."""
    try:
        task = tasks.for_config(config)
    except tasks.TaskError as exc:  # an overlay naming a task the registry lacks
        return [f"{tasks.TASK_KEY}: {exc}"]
    if is_tinker(config):  # rlvr/tinker/: no GPU, Ray or local model to check
        local = data_problems(config, task) + _reward_problems(config, task)
        return tinker_problems(config, local + zero_step_problems(config))
    problems = data_problems(config, task)
    model_path = str(config.actor_rollout_ref.model.path)
    model_problem = model_path_problem(model_path)
    if model_problem is not None:
        problems.append(f"actor_rollout_ref.model.path: {model_path} {model_problem}")
    elif (uncached := hub_cache.problem(config)) is not None:
        problems.append(uncached)  # the workers run offline (configs/grpo.yaml)
    numeric = numeric_problems(config)
    problems += numeric or verl_problems(config)  # verl's own messages once ours are clear
    problems += _gpu_problems(config, visible_gpus)
    if not numeric:
        _warn_lora_lr(config)
        if (slow_bf16 := emulated_bf16_warning(config)) is not None:
            print(f"pre-flight: warning: {slow_bf16}", file=sys.stderr)
        problems += _memory_problems(config)
    problems += _overlong_buffer_problems(config)
    problems += _reward_problems(config, task)
    plan, ray_problem = ray_plan(config)
    print(f"pre-flight: ray: {plan}")
    if ray_problem is not None:
        problems.append(ray_problem)
    problems += _resume_problems(config) + identity_problems(config)
    problems += zero_step_problems(config)  # silent until the data reads and the numbers are sound
    if not problems:  # the budget reads the data and the model: only once they are sound
        problems.extend(_checkpoint_problems(config))
    return problems


def _resume_problems(config: Any) -> list[str]:
    """A tracker verl's resume cannot read (``int()`` on it fails inside Ray): one left empty by
    a crash between verl's open and write, with the fix named."""
    if config.trainer.get("resume_mode") != "auto":
        return []
    folder = Path(str(config.trainer.default_local_dir))
    try:
        tracked_step(folder)
        return []
    except UnreadableTracker:
        pass
    steps = saved_steps(folder, holding="actor")
    tracker = folder / TRACKER_FILE
    problem = f"{tracker}: not a step number verl can resume from (a crash while verl wrote it)"
    if not steps:
        return [f"{problem}; delete it to start fresh"]
    newest = steps[-1]
    return [
        f"{problem}; write {newest} into it to resume from global_step_{newest}, the newest "
        "checkpoint, or delete it to start fresh"
    ]


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
    from rlvr.config.compose import experiment_cli

    try:
        experiment, config = experiment_cli(argv, __doc__, "pre-flight")
    except SystemExit as done:
        return int(done.code or 0)
    problems = check(config)
    for problem in problems:
        print(f"pre-flight: {problem}", file=sys.stderr)
    if not problems:
        task, trainer, tinker = tasks.for_config(config), config.trainer, is_tinker(config)
        where = f"{trainer.nnodes} node(s) x {trainer.n_gpus_per_node} GPU(s)"
        print(
            f"pre-flight: {experiment} ok (task {task.name if task else 'unregistered'}, "
            f"{'through the Tinker API' if tinker else where}, model "
            f"{config.actor_rollout_ref.model.path})"
            + ("" if tinker else f"\npre-flight: {batching(config).line()}")
        )
    return 2 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
