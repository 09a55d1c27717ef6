"""Ray worker setup for every recipe run (``rlvr.train.verl_hooks.install``, Ray's setup hook).

Set in ``configs/grpo.yaml``, so it runs in each Ray worker process (TaskRunner included) before
verl's code does. It must not import torch or verl: Ray runs the hook *before* it sets the
worker's ``CUDA_VISIBLE_DEVICES`` (that happens when the actor's task starts), and
``verl.utils.device`` calls ``torch.cuda.is_available()`` at import, which would pin CUDA to
every GPU of the node and put every rank on GPU 0 (verl issue 1752). So the hook only registers
patches that run right after the module they patch is first imported, by which time Ray has
assigned the devices.

The patches:

- always: wandb losing the last steps. verl 0.6.1 calls ``wandb.finish()`` only in its tracker's
  ``__del__``, which does not run before Ray ends the TaskRunner, so queued history never
  reaches the run file. ``RayPPOTrainer.fit`` is wrapped to finish the run.
- always: where verl's ``file`` logger writes. ``VERL_FILE_LOGGER_PATH`` cannot come from the
  config's runtime env (verl merges ``ray_kwargs.ray_init.runtime_env`` away from the config's
  root without resolving it, so an interpolation would arrive as the literal ``${...}``): the
  same ``fit`` wrapper sets it in the TaskRunner from the resolved ``paths.metrics``
  (``configs/grpo.yaml``), on whichever node the TaskRunner runs.
- always: the run report (``rlvr.report``) written once the last step is logged, its figures
  logged to wandb with that step (``Tracking.log`` wrapped; ``fit`` returning is too late, as
  verl's tracker finishes the wandb run when ``fit``'s locals go).
- always: rollout dumps kept bounded. With ``trainer.rollout_data_dir`` set (configs/grpo.yaml)
  verl writes every step's rollouts and never deletes any; ``_dump_generations`` is wrapped to
  keep only what ``rollout_dumps`` says (the report reads them).
- always: verl 0.6.1's ``file`` logger (``verl.utils.tracking.FileLogger``) itself. Its ``log``
  is a bare ``json.dumps``, which raises ``TypeError: Object of type Tensor is not JSON
  serializable`` on the first training step: verl's own ``global_seqlen/*`` metrics
  (``log_seqlen_unbalance``, run by the default ``trainer.balance_batch`` on GPU and CPU alike)
  are 0-d torch tensors, and validation can give ``np.float32`` (Agent-R1 issue 83). Fixed
  upstream after 0.6.1 (verl PR 4811, "fix: json encode error in filelogger"). The patched
  ``log`` turns numpy/torch values into Python numbers (``.tolist()``, which is ``.item()`` for a
  scalar) and flushes each line (verl's only flushes when the tracker is collected, which need
  not happen before Ray ends the TaskRunner or a run is killed); ``__init__`` creates the file's
  folder (verl only does for its default place, not for ``VERL_FILE_LOGGER_PATH``) and appends,
  so a resumed run adds its steps to the same file instead of truncating it. The class's method
  signatures are checked first: if verl changed them the patch raises rather than guess.
- with ``RLVR_CPU_COMPAT=1`` (set by the CPU overlays) and no CUDA: ``rlvr.cpu.compat``.
- with ``RLVR_TRACE_DIR`` set (the CPU rehearsal): one JSON line per process recording
  ``CUDA_VISIBLE_DEVICES`` at hook time and when torch is first imported, so a rehearsal can
  prove the ordering above on every rank.
- with ``RLVR_HIDE_GPUS=1`` (the CPU rehearsal, also on a GPU node): right after torch's first
  import, once Ray has given the rank its (fake) GPU and the trace has recorded it,
  ``CUDA_VISIBLE_DEVICES`` is blanked. torch reads it only when CUDA first initialises, so the
  rank sees no GPU and takes the CPU path (``rlvr.cpu.compat``, the HF rollout) on a laptop and
  on a GPU node alike, where the fake ids would otherwise name real GPUs.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

CPU_COMPAT_ENV = "RLVR_CPU_COMPAT"
TRACE_DIR_ENV = "RLVR_TRACE_DIR"
HIDE_GPUS_ENV = "RLVR_HIDE_GPUS"
FILE_LOGGER_PATH_ENV = "VERL_FILE_LOGGER_PATH"  # read by verl's FileLogger
METRICS_PATH_KEY = "paths.metrics"  # the config key that sets it
# verl 0.6.1's FileLogger methods and their parameters; anything else is a verl we have not read.
FILE_LOGGER_SHAPE = {
    "__init__": ("self", "project_name", "experiment_name"),
    "log": ("self", "data", "step"),
    "finish": ("self",),
}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a named module's code has executed, on its first import."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.callbacks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader = spec.loader
        callbacks = self.callbacks.pop(fullname)

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                for callback in callbacks:
                    callback(module)

        spec.loader = _Loader()
        return spec


_finder = _AfterImport()


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    _finder.callbacks.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def install() -> None:
    """The setup hook. Imports neither torch nor verl (see the module docstring)."""
    from rlvr.train.config import register_resolvers

    # The TaskRunner resolves the config again (objective/dapo.yaml's ${rlvr.div:...}).
    register_resolvers()
    if os.environ.get(TRACE_DIR_ENV):
        _trace("hook")
        after_import("torch", lambda module: _trace("torch_imported"))
    if os.environ.get(HIDE_GPUS_ENV) == "1":
        after_import("torch", lambda module: _hide_gpus())
    after_import("verl.trainer.ppo.ray_trainer", _wrap_fit)
    # objective options verl's registry serves (algorithm.adv_estimator: grpo_drop_constant)
    after_import("verl.trainer.ppo.ray_trainer", lambda module: _register_estimators())
    after_import("verl.utils.tracking", _fix_file_logger)
    after_import("verl.utils.tracking", _report_at_last_step)
    if os.environ.get(CPU_COMPAT_ENV) == "1":
        # verl's package import pulls in torch; the CPU fixes patch both.
        after_import("verl", lambda module: _install_cpu_compat())


def _register_estimators() -> None:
    from rlvr.train import advantages

    advantages.register()


def _install_cpu_compat() -> None:
    from rlvr.cpu import compat as cpu_compat

    cpu_compat.install()


def _hide_gpus() -> None:
    """After the trace recorded Ray's assignment: no GPU for torch in this process."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if os.environ.get(TRACE_DIR_ENV):
        _trace("gpus_hidden")


def _trace(event: str) -> None:
    """Append this process's device view to ``$RLVR_TRACE_DIR/<pid>.jsonl``."""
    record = {
        "event": event,
        "pid": os.getpid(),
        "time": time.time(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch_loaded": "torch" in sys.modules,
        "rank": os.environ.get("RANK"),
        "world_size": os.environ.get("WORLD_SIZE"),
        "raylet_pid": os.environ.get("RAY_RAYLET_PID"),
        "executable": sys.executable,
    }
    path = os.path.join(os.environ[TRACE_DIR_ENV], f"{os.getpid()}.jsonl")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def _wrap_fit(module: ModuleType) -> None:
    """``RayPPOTrainer.fit``: point the file logger at ``paths.metrics``, finish wandb after;
    ``_dump_generations``: bound the rollout dumps."""
    trainer_class = module.RayPPOTrainer
    original = trainer_class.fit
    if getattr(original, "_rlvr_finishes_wandb", False):
        return
    _bound_rollout_dumps(trainer_class)

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        metrics = set_metrics_path(self.config)
        # The run's folder: where paths.metrics is (default_local_dir, or a sweep's point).
        run_dir = os.path.dirname(metrics) if metrics else self.config.trainer.default_local_dir
        _run_end.clear()
        _run_end.update(step=int(self.total_training_steps), run_dir=run_dir, done=False)
        try:
            result = original(self, *args, **kwargs)
            if not _run_end["done"]:  # stopped before its last step: report what it logged
                end_of_run_report(run_dir)
            return result
        finally:
            wandb = sys.modules.get("wandb")
            if wandb is not None and wandb.run is not None:
                wandb.finish()
            if wandb is not None:
                # finish() returns once the run is handed to wandb's service process, which may
                # still be writing the run file; Ray ends the TaskRunner without atexit hooks, so
                # wait for the service here (a rehearsal once found the file cut at 32 KiB).
                wandb.teardown()

    fit._rlvr_finishes_wandb = True  # type: ignore[attr-defined]
    trainer_class.fit = fit


# The running fit's last step and folder, for the report logged with that step (below).
_run_end: dict[str, Any] = {}
# verl 0.6.1's Tracking.log parameters.
TRACKING_LOG_PARAMS = ("self", "data", "step", "backend")


def _report_at_last_step(module: ModuleType) -> None:
    """``Tracking.log``: once the last step's metrics are logged (the file logger has written
    them), the run report, its figures logged with that step. It cannot wait for ``fit`` to
    return: verl's tracker is a local of ``fit`` whose ``__del__`` finishes the wandb run."""
    tracking = module.Tracking
    original = tracking.log
    if getattr(original, "_rlvr_reports", False):
        return
    params = tuple(inspect.signature(original).parameters)
    if params != TRACKING_LOG_PARAMS:
        raise RuntimeError(
            f"rlvr: verl's Tracking.log{params} is not 0.6.1's {TRACKING_LOG_PARAMS}; update "
            "rlvr/train/verl_hooks.py"
        )

    @functools.wraps(original)
    def log(self: Any, data: Any, step: int, backend: Any = None) -> None:
        original(self, data, step, backend)
        if _run_end and not _run_end["done"] and backend is None and step >= _run_end["step"]:
            _run_end["done"] = True
            end_of_run_report(_run_end["run_dir"], step)

    log._rlvr_reports = True  # type: ignore[attr-defined]
    tracking.log = log


def end_of_run_report(run_dir: str, step: int | None = None) -> None:
    """The run report (``scripts/report.py``: report.md, curves, health alarms) written beside
    the checkpoints when training ends, its figures logged to the wandb run when there is one.
    A report that cannot be made is a printed line, never a failed run."""
    try:
        from rlvr.report import build

        report = build(run_dir)
    except Exception as exc:  # the run itself is done and saved
        print(f"rlvr: no run report for {run_dir}: {type(exc).__name__}: {exc}", flush=True)
        return
    fired = ", ".join(alarm.key for alarm in report.fired) or "none"
    print(f"rlvr: run report {report.path} (alarms fired: {fired})", flush=True)
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        images = {f"report/{name}": wandb.Image(str(path)) for name, path in report.figures.items()}
        wandb.log(images, step=step)


# verl 0.6.1's RayPPOTrainer._dump_generations; another signature is a verl we have not read.
DUMP_GENERATIONS_PARAMS = (
    "self",
    "inputs",
    "outputs",
    "gts",
    "scores",
    "reward_extra_infos_dict",
    "dump_path",
)


def _bound_rollout_dumps(trainer_class: type) -> None:
    """After each rollout dump (``<rollout_data_dir>/<step>.jsonl``), delete the step files that
    ``rollout_dumps`` (configs/grpo.yaml) does not keep. Validation dumps are left alone."""
    original = trainer_class._dump_generations  # type: ignore[attr-defined]
    params = tuple(inspect.signature(original).parameters)
    if params != DUMP_GENERATIONS_PARAMS:
        raise RuntimeError(
            f"rlvr: verl's RayPPOTrainer._dump_generations{params} is not 0.6.1's "
            f"{DUMP_GENERATIONS_PARAMS}; update rlvr/train/verl_hooks.py"
        )

    @functools.wraps(original)
    def dump(self: Any, *args: Any, **kwargs: Any) -> Any:
        extras = kwargs.get("reward_extra_infos_dict")
        if isinstance(extras, dict):
            # verl's dapo reward manager records tensors (overlong_reward), which json.dumps in
            # verl's dump refuses: plain numbers, as the file logger fix does.
            kwargs["reward_extra_infos_dict"] = {
                key: [_plain(item) for item in values] if isinstance(values, list) else values
                for key, values in extras.items()
            }
        result = original(self, *args, **kwargs)
        bounds = self.config.get("rollout_dumps") or {}
        rollout_dir = self.config.trainer.get("rollout_data_dir")
        dump_path = kwargs.get("dump_path", args[-1] if len(args) == 6 else None)
        if bounds and rollout_dir and dump_path == rollout_dir:
            prune_step_files(rollout_dir, int(bounds["keep_last"]), int(bounds["keep_every"]))
        return result

    trainer_class._dump_generations = dump  # type: ignore[attr-defined]


def _plain(value: Any) -> Any:
    """A torch or numpy scalar as a Python number; anything else unchanged."""
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


def prune_step_files(folder: str, keep_last: int, keep_every: int) -> list[str]:
    """Delete ``<step>.jsonl`` files in ``folder`` except the newest ``keep_last`` steps and
    every step divisible by ``keep_every`` (0: none); returns the deleted names."""
    steps = sorted(
        int(name[: -len(".jsonl")])
        for name in os.listdir(folder)
        if name.endswith(".jsonl") and name[: -len(".jsonl")].isdigit()
    )
    newest = set(steps[-keep_last:]) if keep_last > 0 else set()
    deleted = []
    for step in steps:
        if step in newest or (keep_every > 0 and step % keep_every == 0):
            continue
        os.remove(os.path.join(folder, f"{step}.jsonl"))
        deleted.append(f"{step}.jsonl")
    return deleted


def set_metrics_path(config: Any) -> str | None:
    """``VERL_FILE_LOGGER_PATH`` = the resolved ``paths.metrics``, when the config has one (it
    decides over an inherited value, so the sweep always finds its file); returns it."""
    from omegaconf import OmegaConf

    path = OmegaConf.select(config, METRICS_PATH_KEY, default=None)
    if path is None:
        return None
    os.environ[FILE_LOGGER_PATH_ENV] = str(path)
    return str(path)


def _json_default(value: Any) -> Any:
    """For ``json.dumps``: numpy and torch values (scalars, arrays, tensors) as Python ones."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _check_file_logger(logger_class: Any) -> None:
    """Refuse to patch a FileLogger that is not verl 0.6.1's (see FILE_LOGGER_SHAPE)."""
    found = {
        name: tuple(inspect.signature(method).parameters)
        for name in FILE_LOGGER_SHAPE
        if callable(method := getattr(logger_class, name, None))
    }
    if found != FILE_LOGGER_SHAPE:
        raise RuntimeError(
            "verl.utils.tracking.FileLogger is not the one rlvr/train/verl_hooks.py patches "
            f"(expected methods {FILE_LOGGER_SHAPE}, found {found}); check whether this verl "
            "still needs the patch (fixed upstream by verl PR 4811) and update the hook"
        )


def _fix_file_logger(module: ModuleType) -> None:
    logger_class: Any = getattr(module, "FileLogger", None)
    _check_file_logger(logger_class)
    if getattr(logger_class.log, "_rlvr_plain_json", False):
        return

    def __init__(self: Any, project_name: str, experiment_name: str) -> None:
        self.project_name = project_name
        self.experiment_name = experiment_name
        self.filepath = os.environ.get(FILE_LOGGER_PATH_ENV) or os.path.join(
            os.path.expanduser(os.environ.get("VERL_FILE_LOGGER_ROOT", ".")),
            project_name,
            f"{experiment_name}.jsonl",
        )
        os.makedirs(os.path.dirname(os.path.abspath(self.filepath)), exist_ok=True)
        print(f"file logger: appending to {self.filepath}")
        self.fp = open(self.filepath, "a", encoding="utf-8")  # noqa: SIM115 (closed by finish)

    def log(self: Any, data: dict[str, Any], step: int) -> None:
        record = {"step": step, "data": data}
        self.fp.write(json.dumps(record, default=_json_default) + "\n")
        self.fp.flush()

    log._rlvr_plain_json = True  # type: ignore[attr-defined]
    logger_class.__init__ = __init__
    logger_class.log = log
