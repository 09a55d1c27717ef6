"""Compose the project's Hydra experiments outside a launcher, and run verl's own checks on them.

``compose_checked`` turns Hydra's 50-line tracebacks for an unknown experiment, a misspelled key
or group option, or a malformed override into one line that names it and the closest valid name.

Print an experiment's whole composed config, overrides applied and paths filled in:
    uv run python -m rlvr.config.compose EXPERIMENT [hydra overrides...]
"""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr.common.messages import first_line
from rlvr.common.paths import CONFIG_DIR

VERL_CONFIGS = "pkg://verl.trainer.config"
# The objective presets (configs/objective/) this project ships; ``objective=NAME`` picks one.
OBJECTIVES_DIR = CONFIG_DIR / "objective"
DEFAULT_OBJECTIVE = "grpo"


def objectives() -> list[str]:
    """Names of the objective presets (configs/objective/*.yaml)."""
    return sorted(p.stem for p in OBJECTIVES_DIR.glob("*.yaml"))


class ConfigError(Exception):
    """An experiment or override that does not compose; the message is one line."""


def experiments() -> list[str]:
    """Names of the runnable experiments (top-level YAML files except the base)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem != "grpo")


def _task_config_dirs() -> list[str]:
    """Config roots of registered tasks kept outside configs/ (a plugin, a test's own task):
    with them on Hydra's search path, ``task=NAME`` finds their overlays."""
    from rlvr import tasks

    return sorted({str(s.config_dir) for s in tasks.all_specs() if s.config_dir != CONFIG_DIR})


def compose(
    experiment: str, overrides: list[str] | None = None, root: str | Path | None = None
) -> Any:
    """The experiment's full config as the launcher would build it (``paths.root`` set).

    Hydra re-reads and merges every file on each compose (about 0.2 s), and pre-flight, eval,
    the sweep and the tests compose the same experiments again and again with a different
    value here and there. Only the experiment and its group choices (``objective=dapo``) decide
    which files are merged; Hydra applies ``key.path=value`` overrides to the merged config
    afterwards, in order. So the merge is kept once per experiment and group choices, and each
    call applies its dotted value overrides to a copy with Hydra's own function for that step
    (those before anything else Hydra would apply, a top-level value say, go whole: the order
    holds). The result equals Hydra's whole compose, errors included (tests/test_config.py
    compares them).
    ``paths.root`` is a plain value every path interpolates from: set on the copy too."""
    overrides = list(overrides or [])
    task_dirs = _task_config_dirs()
    folders = _own_config_folders(task_dirs)
    choices, values = _split_overrides(overrides, folders)
    key = (experiment, tuple(choices), _config_files_stamp(folders))
    if key not in _composed:
        if len(_composed) >= MAX_CACHED_CONFIGS:
            clear_cache()
        _composed[key] = whole_compose(experiment, choices, task_dirs)
    config = copy.deepcopy(_composed[key])
    if values:
        # The step of Hydra's own compose that applies them, private in hydra-core 1.3.2 (pinned
        # in pyproject.toml); a Hydra that moved it fails here, and the tests compare results.
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        ConfigLoaderImpl._apply_overrides_to_config(values, config)
    if not any(o.lstrip("+~").split("=", 1)[0] == "paths.root" for o in overrides):
        config.paths.root = str(Path(root or CONFIG_DIR.parent).resolve())
    return config


def whole_compose(experiment: str, overrides: list[str], task_dirs: list[str] | None = None) -> Any:
    """Hydra's own compose of the experiment with every override, nothing kept: what compose()
    equals. First come the checkout's root and where verl's and the registered tasks' (by
    default all of them) config files are."""
    task_dirs = _task_config_dirs() if task_dirs is None else task_dirs
    search_path = ",".join([_verl_configs(), *(f"file://{d}" for d in task_dirs)])
    search = [f"paths.root={CONFIG_DIR.parent}", f"hydra.searchpath=[{search_path}]"]
    return _compose(experiment, [*search, *overrides])


def _own_config_folders(task_dirs: list[str]) -> list[Path]:
    """The config folders this project's files are in (configs/, then registered tasks' own)."""
    return [CONFIG_DIR, *map(Path, task_dirs)]


def _split_overrides(overrides: list[str], config_dirs: list[Path]) -> tuple[list[str], list[Any]]:
    """(the overrides for Hydra's whole compose, the parsed value overrides to apply after it).

    Hydra applies every value override after the merge, in the order given; a group choice
    (``objective=dapo``: its key is a config folder) only picks files. A dotted key names no
    group unless a folder has that dotted name, so it is a value. Anything else (a top-level
    value, ``key@package``, ``hydra.*``, a sweep, a dict) goes to the whole compose, and so
    does every value before it, which keeps Hydra's order. A list that does not parse goes
    whole too (Hydra's own error)."""
    from hydra.errors import HydraException

    if not overrides:
        return [], []
    try:
        parsed = _overrides_parser().parse_overrides(overrides)
    except HydraException:
        return overrides, []
    folders = [*config_dirs, Path(_verl_configs().removeprefix("file://"))]
    kinds = [_kind(override, folders) for override in parsed]
    last_whole = max((i for i, kind in enumerate(kinds) if kind == "other"), default=-1)
    choices = [line for i, line in enumerate(overrides) if i <= last_whole or kinds[i] == "group"]
    values = [o for i, o in enumerate(parsed) if i > last_whole and kinds[i] == "value"]
    return choices, values


@functools.cache
def _overrides_parser() -> Any:
    """Hydra's override parser (its grammar is built once; parsing keeps no state)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _kind(override: Any, folders: list[Path]) -> str:
    """ "group" (a choice of config file), "value" (a dotted key's value) or "other"."""
    key = override.key_or_group
    hydras = key == "hydra" or key.startswith(("hydra.", "hydra/"))
    if override.package is not None or override.is_sweep_override() or hydras:
        return "other"
    if any((folder / key).is_dir() for folder in folders):
        is_dict = not override.is_delete() and isinstance(override.value(), dict)
        return "other" if is_dict or override.is_force_add() else "group"
    return "value" if "." in key else "other"


@functools.cache
def _verl_configs() -> str:
    """verl's config folder as a file:// search path: the same files as the experiments'
    ``pkg://verl.trainer.config``, without Hydra importing verl to find them (``import verl``
    takes about 5 s, most of a short command's run). find_spec locates the package unimported."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    folders = list(spec.submodule_search_locations or []) if spec else []
    found = [Path(f) / "trainer" / "config" for f in folders]
    return next((f"file://{f}" for f in found if (f / "ppo_trainer.yaml").is_file()), VERL_CONFIGS)


MAX_CACHED_CONFIGS = 256
_composed: dict[tuple[Any, ...], Any] = {}


def clear_cache() -> None:
    """Forget the merges compose() keeps (the next compose of each merges anew)."""
    _composed.clear()


def _config_files_stamp(folders: list[Path]) -> tuple[tuple[str, str], ...]:
    """Every YAML file of this project's Hydra may read here, with a hash of its bytes: an
    edited file is a new key, so the cache never hands back a config composed from an older
    file (about 40 small files: a millisecond)."""
    stamps = []
    for folder in folders:
        for path in sorted(folder.rglob("*.yaml")):
            stamps.append((str(path), hashlib.blake2b(path.read_bytes()).hexdigest()))
    return tuple(stamps)


def _compose(experiment: str, overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose(config_name=experiment, overrides=overrides)


def validate(config: Any) -> None:
    """verl 0.6.1's own checks: ``validate_config`` (actor dataclass included) and the rollout one.

    Raises whatever verl raises (AssertionError/ValueError) for an inconsistent config.
    """
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    OmegaConf.resolve(config)
    use_reference_policy = bool(
        config.algorithm.use_kl_in_reward or config.actor_rollout_ref.actor.use_kl_loss
    )
    validate_config(config, use_reference_policy=use_reference_policy, use_critic=False)
    # (HFModelConfig is not checked here: building it loads the model's config and tokenizer.)
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)


def _leaves(node: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys of a plain container's leaves (lists are values)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip(".")


def _file_keys(path: Path) -> set[str]:
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert isinstance(raw, dict)
    raw.pop("defaults", None)
    raw.pop("hydra", None)
    return set(_leaves(raw))


def objective_keys(objective: str) -> set[str]:
    """The dotted keys a preset sets (configs/objective/NAME.yaml)."""
    return _file_keys(OBJECTIVES_DIR / f"{objective}.yaml")


def pinned_objective_keys(experiment: str, objective: str) -> list[str]:
    """Keys the preset sets that the experiment's own file also sets: the experiment's value
    wins (it comes later in the defaults list), so ``objective=NAME`` on it keeps them."""
    return sorted(objective_keys(objective) & _file_keys(CONFIG_DIR / f"{experiment}.yaml"))


def _close(word: str, candidates: list[str]) -> str:
    """`` (did you mean X?)`` for the closest candidate, or nothing."""
    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def check_experiment(experiment: str) -> None:
    names = experiments()
    if experiment not in names:
        raise ConfigError(
            f"unknown experiment {experiment!r}{_close(experiment, names)}; the experiments "
            f"(configs/*.yaml) are: {', '.join(names)}"
        )


def _dotted_keys(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}{key}"
            yield path
            yield from _dotted_keys(value, path + ".")


def _translate(exc: Exception, experiment: str, root: str | Path | None) -> ConfigError:
    """One line for a Hydra composition error: the key or option, and the closest valid one."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf import OmegaConf

    message = str(exc).strip()
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        found = re.search(r"Could not find '([^/']+)/([^']+)'", message)
        group, option = found.groups() if found else ("group", "?")
        options = sorted(exc.options)
        return ConfigError(
            f"{group}={option}: no such option{_close(option, options)}; the options are: "
            f"{', '.join(options)}"
        )
    if isinstance(exc, OverrideParseException):
        return ConfigError(
            f"override {exc.override!r} is not valid Hydra syntax ({message.splitlines()[0]}); "
            "write KEY=VALUE, quoting values with commas or spaces"
        )
    missing = re.search(r"Could not override '([^']+)'", message)
    if missing:
        key = missing.group(1)
        base = OmegaConf.to_container(compose(experiment, [], root), resolve=False)
        keys = list(_dotted_keys(base))
        groups = sorted(p.name for p in CONFIG_DIR.iterdir() if p.is_dir())
        return ConfigError(
            f"override {key}: {experiment} has no such key{_close(key, keys + groups)}; "
            f"fix the name, or write +{key}=VALUE to add a new key on purpose"
        )
    appended = re.search(r"Could not append to config. An item is already at '([^']+)'", message)
    if appended:
        key = appended.group(1)
        return ConfigError(f"override +{key}: {key} already exists; write {key}=VALUE without +")
    doubled = re.search(r"Multiple values for (\w+)\.", message)
    if doubled:  # +group=option where the experiment already lists the group (base_model: null)
        group = doubled.group(1)
        return ConfigError(
            f"override +{group}=...: {experiment} already lists {group}; "
            f"write {group}=OPTION without +"
        )
    return ConfigError(f"{experiment}: {first_line(exc)}")


def compose_checked(
    experiment: str, overrides: list[str] | None = None, root: str | Path | None = None
) -> Any:
    """``compose``, with ConfigError (one line) for an unknown experiment or a bad override."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    check_experiment(experiment)
    try:
        return compose(experiment, overrides, root)
    except (HydraException, OmegaConfBaseException) as exc:
        raise _translate(exc, experiment, root) from None


def experiment_cli(argv: list[str] | None, usage: str | None, prog: str) -> tuple[str, Any]:
    """The ``EXPERIMENT [overrides...]`` preamble of a module's command line: ``--help`` prints
    ``usage`` (SystemExit 0), no argument exits 2, a config that does not compose is one line
    ``PROG: error: ...`` (SystemExit 2). Returns the experiment's name and composed config."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage)
        raise SystemExit(0 if args else 2)
    try:
        return args[0], compose_checked(args[0], args[1:])
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> int:
    """Print the composed config as YAML, every interpolation resolved (``paths.root`` is this
    checkout unless an override sets it); a bad experiment or override is one line, exit 2."""
    import argparse

    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    parser = argparse.ArgumentParser(
        prog="python -m rlvr.config.compose",
        description="Print an experiment's whole composed config (what bash scripts/train.sh "
        "EXPERIMENT runs), with the overrides applied and every path filled in.",
        epilog="e.g. python -m rlvr.config.compose countdown_qwen3_4b adapter=lora32 "
        "actor_rollout_ref.actor.optim.lr=1e-4",
    )
    parser.add_argument("experiment", help="a configs/*.yaml name: " + ", ".join(experiments()))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (KEY=VALUE, group=option)")
    parser.add_argument("--unresolved", action="store_true", help="keep ${...} interpolations")
    args = parser.parse_args(argv)
    try:
        config = compose_checked(args.experiment, args.overrides)
        print(OmegaConf.to_yaml(config, resolve=not args.unresolved), end="")
    except ConfigError as exc:
        print(f"config: {exc}", file=sys.stderr)
        return 2
    except OmegaConfBaseException as exc:  # an interpolation that does not resolve
        print(f"config: {args.experiment}: {first_line(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
