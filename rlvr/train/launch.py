"""What ``scripts/train.sh`` runs once pre-flight has passed: verl's driver
(``rlvr.train.main``) under a supervisor, then the LoRA merge; for a Tinker experiment
(``hardware: tinker``), the Tinker loop (``rlvr.tinker.train``) under the same supervisor,
which tees either one's output to the run's log.

Usage (the launcher's ``exec``): python -m rlvr.train.launch EXPERIMENT LOG [overrides...]

The supervisor (``rlvr.common.supervision``) is what makes stopping a run stop all of it:
SIGINT, SIGTERM or SIGHUP to the launcher stops the driver, Ray's daemons, agents and workers,
says so in one line and exits 128 + the signal; a driver that dies any other way has what it
left behind stopped. Without ``RAY_ADDRESS`` the run gets its own Ray temp dir (under /tmp,
short: Ray's socket paths must fit 107 bytes), so its Ray processes can be told from any other
Ray on the machine; on a cluster (``RAY_ADDRESS``) only the driver's own processes are this
run's, and Ray ends the job's workers when the driver goes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlvr.common.signals import sigterm_as_interrupt
from rlvr.common.supervision import run_supervised, stop_with_parent

ROOT = Path(__file__).resolve().parents[2]
NAME = "train"
TEMP_DIR_KEY = "ray_kwargs.ray_init._temp_dir"
# Ray workers do not inherit the launcher's environment when Ray runs as a cluster: the
# variables that shape a run travel in the job's runtime env. (WANDB_API_KEY does not: verl
# prints the runtime env; on a cluster run `wandb login` on each node instead.) HF_HUB_OFFLINE
# is not forwarded: configs/grpo.yaml sets it for every worker (rlvr/preflight/hub_cache.py).
FORWARDED_VARIABLES = (
    "WANDB_MODE", "WANDB_DIR", "WANDB_ENTITY", "WANDB_RUN_GROUP", "HF_HOME", "HF_HUB_CACHE",
    "HF_ENDPOINT", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "RLVR_TRACE_DIR",
)  # fmt: skip


def forwarded(environ: Mapping[str, str]) -> list[str]:
    """Hydra overrides putting the set ``FORWARDED_VARIABLES`` into Ray's runtime env, quoted
    for Hydra's grammar (backslashes and single quotes escaped)."""
    overrides = []
    for name in FORWARDED_VARIABLES:
        value = environ.get(name, "")
        if value:
            quoted = value.replace("\\", "\\\\").replace("'", "\\'")
            overrides.append(f"++ray_kwargs.ray_init.runtime_env.env_vars.{name}='{quoted}'")
    return overrides


def own_ray_temp_dir(overrides: Sequence[str], environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """The run's Ray temp dir (its processes' marker) and the override to add for it: the one
    the overrides already set, a new one when Ray starts locally, none on a cluster."""
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key == TEMP_DIR_KEY and value:
            return value, []
    if environ.get("RAY_ADDRESS"):
        return "", []
    folder = tempfile.mkdtemp(prefix="rlvr-ray-", dir="/tmp")
    return folder, [f"++{TEMP_DIR_KEY}={folder}"]


def driver_command(experiment: str, overrides: Sequence[str]) -> list[str]:
    return [
        sys.executable, "-m", "rlvr.train.main", f"--config-path={ROOT / 'configs'}",
        f"--config-name={experiment}", f"paths.root={ROOT}", *overrides,
    ]  # fmt: skip


def tinker_command(experiment: str, overrides: Sequence[str]) -> list[str]:
    """The Tinker run (``rlvr.tinker.train``): this machine samples, grades and writes; no Ray."""
    return [sys.executable, "-m", "rlvr.tinker.train", experiment, *overrides]


def tinker_experiment(experiment: str, overrides: Sequence[str]) -> bool:
    """Whether the experiment trains through the Tinker API (rlvr/tinker/) rather than verl."""
    from rlvr.config.compose import compose
    from rlvr.tinker.recipe import is_tinker

    return is_tinker(compose(experiment, list(overrides)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="a configs/*.yaml experiment")
    parser.add_argument("log", type=Path, help="the run's log file (appended to)")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides")
    args = parser.parse_args(argv)
    stop_with_parent()
    if tinker_experiment(args.experiment, args.overrides):
        return run_supervised(
            tinker_command(args.experiment, args.overrides), args.log, name=NAME,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, driver="the Tinker loop",
            quiet_on_stop=False,  # no Ray: its one line says where a rerun resumes
        ).returncode  # fmt: skip
    temp_dir, own = own_ray_temp_dir(args.overrides, os.environ)
    command = driver_command(args.experiment, [*forwarded(os.environ), *own, *args.overrides])
    done = run_supervised(command, args.log, markers=[temp_dir], name=NAME)
    if done.stop_signal is not None:
        return done.returncode
    merged = merge_lora(args.experiment, args.overrides)
    return done.returncode or (1 if merged else 0)


def merge_lora(experiment: str, overrides: Sequence[str]) -> int:
    """LoRA checkpoints hold adapters only: give each one a merged actor/huggingface (a no-op
    for full fine-tuning), also after a failed run, whose saved checkpoints are still good."""
    from rlvr.train import lora_merge

    merge = ["--experiment", experiment, *overrides]
    try:
        with sigterm_as_interrupt():
            return lora_merge.main(merge)
    except SystemExit as exc:  # its parser's one-line refusal, already printed
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        print(
            f"{NAME}: interrupted in the LoRA merge; finish it with: python -m"
            f" rlvr.train.lora_merge {' '.join(merge)}",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
