"""A sweep's specification: the grid (``--grid KEY=V1,V2``), its points and their run names.

An axis is any Hydra key or config group: ``--grid objective=grpo,dapo`` passes
``objective=dapo`` to the launcher as written, which picks configs/objective/dapo.yaml.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Short grid names for the two axes the TuFT guide sweeps; any full Hydra key works too.
ALIASES = {
    "lr": "actor_rollout_ref.actor.optim.lr",
    "lora_rank": "actor_rollout_ref.model.lora_rank",
    "lora_alpha": "actor_rollout_ref.model.lora_alpha",
    "rollout_n": "actor_rollout_ref.rollout.n",
    "kl_coef": "actor_rollout_ref.actor.kl_loss_coef",
    "entropy_coeff": "actor_rollout_ref.actor.entropy_coeff",
}
SAFE_VALUE = re.compile(r"[^A-Za-z0-9.+-]")


class SweepError(Exception):
    """A bad grid or a sweep folder that does not match: scripts print it and exit 2."""


@dataclass(frozen=True)
class GridAxis:
    name: str  # as the user wrote it, e.g. "lora_rank"
    key: str  # the Hydra key it sets
    values: tuple[str, ...]


@dataclass(frozen=True)
class GridPoint:
    values: dict[str, str]  # axis name -> value, in grid order
    overrides: tuple[str, ...]  # Hydra overrides that set them

    @property
    def name(self) -> str:
        """Run name from the parameters, e.g. ``lora_rank8_lr1e-05``: safe for paths and Hydra."""
        return "_".join(
            f"{axis.split('.')[-1]}{SAFE_VALUE.sub('', value)}"
            for axis, value in self.values.items()
        )


@dataclass
class SweepSpec:
    name: str
    experiment: str
    grid: list[GridAxis]
    overrides: list[str] = field(default_factory=list)  # fixed for every point
    keep_checkpoints: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "experiment": self.experiment,
            "grid": {axis.name: list(axis.values) for axis in self.grid},
            "grid_keys": {axis.name: axis.key for axis in self.grid},
            "overrides": self.overrides,
            "keep_checkpoints": self.keep_checkpoints,
        }


def value_key(value: str) -> tuple[str, object]:
    """What a grid value means, so ``1e-5``, ``1e-05`` and ``0.00001`` are one point: finite
    numbers compare as numbers, booleans case-blind (Hydra reads ``True`` as ``true``).

    Booleans count as the numbers 1 and 0, so ``val_before_train=true,1`` is refused as one value
    twice. Hydra does parse ``1`` as an int and ``true`` as a bool, but verl's configs are
    untyped DictConfigs read with Python truthiness (and ``True == 1`` in Python): the two
    would be the same run twice, which is the costlier mistake than refusing a contrived grid.
    """
    if value.lower() in ("true", "false"):
        return ("number", 1.0 if value.lower() == "true" else 0.0)
    try:
        number = float(value)
    except ValueError:
        return ("text", value)
    return ("number", number) if math.isfinite(number) else ("text", value)


def _non_finite(value: str) -> bool:
    """``inf``, ``-inf``, ``nan``, ``1e999``...: a number Python (and Hydra) would read, but no
    learning rate, coefficient or size anyone means."""
    try:
        return not math.isfinite(float(value))
    except ValueError:
        return False


def _parse_axis(spec: str) -> GridAxis:
    name, sep, raw = spec.partition("=")
    name = name.strip()
    values = tuple(v.strip() for v in raw.split(","))
    if not sep or not name or not raw.strip():
        raise SweepError(f"--grid {spec!r}: expected KEY=V1,V2,... (e.g. lr=1e-5,1e-4)")
    if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
        raise SweepError(f"--grid {spec!r}: {name!r} is not a config key")
    if "" in values:  # "lr=1e-5,,1e-4" or "lr=1e-5,": a value lost, not one run fewer
        raise SweepError(
            f"--grid {spec!r}: an empty value (two commas in a row, or one at an end); list "
            "the values as V1,V2,..."
        )
    bad = [value for value in values if _non_finite(value)]
    if bad:
        raise SweepError(f"--grid {spec!r}: {', '.join(bad)} is not a finite number")
    keys = [value_key(value) for value in values]
    repeated = [value for value, key in zip(values, keys, strict=True) if keys.count(key) > 1]
    if repeated:
        raise SweepError(
            f"--grid {spec!r}: repeated values ({', '.join(repeated)} are one value); list "
            "each once"
        )
    return GridAxis(name=name, key=ALIASES.get(name, name), values=values)


def parse_grid(specs: Sequence[str]) -> list[GridAxis]:
    """``["lora_rank=8,32", "actor_rollout_ref.actor.optim.lr=1e-6,1e-5"]`` -> grid axes."""
    axes: list[GridAxis] = []
    for spec in specs:
        axis = _parse_axis(spec)
        if any(other.key == axis.key for other in axes):
            raise SweepError(f"--grid {spec!r}: {axis.key} is already on the grid")
        axes.append(axis)
    if not axes:
        raise SweepError("no --grid given")
    short = [axis.name.split(".")[-1] for axis in axes]
    if len(set(short)) != len(short):
        raise SweepError(f"grid keys must end in different names, got {short}")
    return axes


def axes_from_record(record: dict[str, Any]) -> list[GridAxis]:
    """The grid a sweep folder's ``sweep.json`` holds (every value ever asked for)."""
    return [
        GridAxis(name=name, key=record["grid_keys"][name], values=tuple(values))
        for name, values in record["grid"].items()
    ]


def grid_points(axes: Sequence[GridAxis]) -> list[GridPoint]:
    """Every combination, the first axis varying slowest; names must tell them apart."""
    points = []
    for combo in itertools.product(*(axis.values for axis in axes)):
        points.append(
            GridPoint(
                values={axis.name: value for axis, value in zip(axes, combo, strict=True)},
                overrides=tuple(
                    f"{axis.key}={value}" for axis, value in zip(axes, combo, strict=True)
                ),
            )
        )
    names = [point.name for point in points]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:  # e.g. "a/b" and "ab": one run folder for two points would skip one of them
        raise SweepError(f"grid values give the same run name: {', '.join(clashes)}")
    return points
