"""The SFT warm start's experiments (``configs/sft/*.yaml``): compose one, run verl's own batch
checks on it, and say where its model lands.

``python -m rlvr.train.sft_config EXPERIMENT [overrides...]`` prints ``PROCESSES DEVICE OUTPUT_DIR``
(what ``scripts/launch_sft.sh`` starts torchrun with) or exits 2 with one line naming the
problem; with ``--model`` it prints the newest checkpoint's ``huggingface`` folder instead.
"""

from __future__ import annotations

import contextlib
import copy
import io
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rlvr.common.checkpoints import TRACKER_FILE
from rlvr.common.messages import first_line
from rlvr.common.paths import CONFIG_DIR
from rlvr.config.compose import ConfigError, _close

SFT_DIR = CONFIG_DIR / "sft"
BASE = "sft"


def sft_experiments() -> list[str]:
    """Names of the SFT experiments (configs/sft/*.yaml except the base)."""
    return sorted(p.stem for p in SFT_DIR.glob("*.yaml") if p.stem != BASE)


def compose_sft(
    experiment: str, overrides: list[str] | None = None, root: str | Path | None = None
) -> Any:
    """The experiment's full config as ``launch_sft.sh`` builds it (``paths.root`` set)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    names = sft_experiments()
    if experiment not in names:
        raise ConfigError(
            f"unknown SFT experiment {experiment!r}{_close(experiment, names)}; the SFT "
            f"experiments (configs/sft/*.yaml) are: {', '.join(names)}"
        )
    root_override = [f"paths.root={Path(root or CONFIG_DIR.parent).resolve()}"]
    try:
        with initialize_config_dir(config_dir=str(SFT_DIR), version_base=None):
            return compose(config_name=experiment, overrides=root_override + list(overrides or []))
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"{experiment}: {first_line(exc)}") from None


def processes(config: Any) -> int:
    return int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)


def validate(config: Any) -> None:
    """verl 0.6.1's own batch checks (``FSDPSFTTrainer._normalize_config_bsz``), run on a copy
    with the data-parallel size the launcher will start; AssertionError when they fail."""
    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    world = processes(config)
    mesh = SimpleNamespace(size=lambda dim=0: world, get_rank=lambda: 0)
    stand_in = SimpleNamespace(
        config=copy.deepcopy(config), device_mesh=mesh, ulysses_device_mesh=None
    )
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints "Normalize batch size by dp"
        FSDPSFTTrainer._normalize_config_bsz(stand_in)  # type: ignore[arg-type]


def problems(config: Any) -> list[str]:
    """What would stop the run in its first minute, one line each."""
    found = []
    try:
        validate(config)
    except AssertionError as exc:
        found.append(
            f"data.train_batch_size {config.data.train_batch_size} must split evenly over "
            f"{processes(config)} processes into micro batches of "
            f"data.micro_batch_size_per_gpu {config.data.micro_batch_size_per_gpu} ({exc})"
        )
    for key in ("train_files", "val_files"):
        path = Path(str(config.data[key]))
        if not path.is_file():
            found.append(f"data.{key}: {path} does not exist; write it with data prep's --sft")
    model = Path(str(config.model.partial_pretrain)).expanduser()
    local = model.is_absolute() or str(model).startswith(".")  # else a hub id, fetched by HF
    if local and not (model / "config.json").is_file():
        found.append(f"model.partial_pretrain: no model at {model} (scripts/build_model.py)")
    return found


def latest_model(config: Any) -> Path | None:
    """The newest checkpoint's loadable ``huggingface`` folder, or None before any."""
    folder = Path(str(config.trainer.default_local_dir))
    tracker = folder / TRACKER_FILE
    if not tracker.is_file():
        return None
    model = folder / f"global_step_{tracker.read_text().strip()}" / "huggingface"
    return model if (model / "config.json").is_file() else None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    want_model = "--model" in args
    args = [a for a in args if a != "--model"]
    if not args or args[0].startswith("-"):
        print("usage: python -m rlvr.train.sft_config EXPERIMENT [overrides...] [--model]")
        return 2
    try:
        config = compose_sft(args[0], args[1:])
    except ConfigError as exc:
        print(f"launch_sft.sh: {exc}", file=sys.stderr)
        return 2
    if want_model:
        model = latest_model(config)
        if model is None:
            print(f"launch_sft.sh: no SFT model under {config.trainer.default_local_dir}")
            return 1
        print(model)
        return 0
    found = problems(config)
    for line in found:
        print(f"launch_sft.sh: {line}", file=sys.stderr)
    if found:
        return 2
    print(processes(config), config.trainer.device, config.trainer.default_local_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
