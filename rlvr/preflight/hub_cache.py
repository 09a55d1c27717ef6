"""A run's hub model, in the local Hugging Face cache before Ray starts.

configs/grpo.yaml runs every Ray worker with ``HF_HUB_OFFLINE=1``. With a hub id as
``actor_rollout_ref.model.path``, verl's ``copy_to_local`` passes the id through, PEFT records it
as ``base_model_name_or_path``, and each ``get_peft_model_state_dict`` call (one per decoder
layer at every rollout weight sync and LoRA save: verl's ``layered_summon_lora_params``) then
asks the Hub whether ``config.json`` exists and loads it, unless ``HF_HUB_OFFLINE`` is set
(peft 0.18 ``utils/save_and_load.py``, ``utils/other.py: check_file_exists_on_hf_hub``).
Offline, the workers read the cache only, so pre-flight checks it holds the model and names the
download command when it does not; adapters keep the portable hub id.

Usage: python -m rlvr.preflight.hub_cache EXPERIMENT [overrides...]
    downloads the experiment's hub model into the cache (nothing for a local folder).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlvr.common.messages import first_line
from rlvr.models.hub import HUB_ID, folder_problem, looks_local

OFFLINE_KEY = "ray_kwargs.ray_init.runtime_env.env_vars.HF_HUB_OFFLINE"
MODEL_KEY = "actor_rollout_ref.model.path"


def hub_model(config: Any) -> str | None:
    """The hub id the workers load, or None for a local folder (or a path pre-flight refuses)."""
    path = str(OmegaConf.select(config, MODEL_KEY) or "")
    if Path(path).exists() or looks_local(path) or not HUB_ID.match(path):
        return None
    return path


def workers_offline(config: Any) -> bool:
    """Whether the config runs its Ray workers with ``HF_HUB_OFFLINE`` on."""
    value = str(OmegaConf.select(config, OFFLINE_KEY, default="") or "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def download_command(repo_id: str) -> str:
    return f"uv run hf download {repo_id}"


def cache_problem(repo_id: str) -> str | None:
    """Why the local HF cache cannot give ``repo_id`` to an offline worker, or None: no snapshot
    of its main revision, or one without config.json or complete weights (an interrupted
    download), by the rule local folders are held to (``rlvr.models.hub.folder_problem``)."""
    from huggingface_hub import constants, snapshot_download

    try:  # huggingface_hub's own lookup: refs/main -> snapshots/<commit>
        folder = snapshot_download(repo_id, local_files_only=True)
    except Exception:  # LocalEntryNotFoundError; anything else is as good as missing here
        return (
            f"is not in the Hugging Face cache ({constants.HF_HUB_CACHE}), which the workers "
            f"read offline (HF_HUB_OFFLINE=1); download it first: {download_command(repo_id)}"
        )
    problem = folder_problem(Path(folder))
    if problem is None:
        return None
    return (
        f"is only partly in the Hugging Face cache ({folder} {problem}); finish the download: "
        f"{download_command(repo_id)}"
    )


def problem(config: Any) -> str | None:
    """Pre-flight's check: a hub model the offline workers will not find in this node's cache."""
    repo_id = hub_model(config)
    if repo_id is None or not workers_offline(config):
        return None
    found = cache_problem(repo_id)
    return None if found is None else f"{MODEL_KEY}: {repo_id} {found}"


def main(argv: list[str] | None = None) -> int:
    from rlvr.config.compose import experiment_cli

    try:
        experiment, config = experiment_cli(argv, __doc__, "hub_cache")
    except SystemExit as done:
        return int(done.code or 0)
    repo_id = hub_model(config)
    if repo_id is None:
        print(f"hub_cache: {experiment}: model {OmegaConf.select(config, MODEL_KEY)} is local")
        return 0
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id)
    except Exception as exc:
        print(f"hub_cache: {repo_id}: download failed: {first_line(exc)}", file=sys.stderr)
        return 1
    print(f"hub_cache: {repo_id} -> {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
