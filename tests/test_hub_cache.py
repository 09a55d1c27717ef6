"""LoRA weight syncs never ask the Hub, and pre-flight refuses a hub model the cache lacks
(rlvr/preflight/hub_cache.py). Every Hub request goes through a fake at huggingface_hub's HTTP layer
(tests/fake_hub.py): the real peft, verl and huggingface_hub code runs, nothing leaves the
machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_hub import FakeHub, download, serve, use_cache

from rlvr.config.compose import compose, experiments
from rlvr.preflight import hub_cache
from rlvr.train import launch

ROOT = Path(__file__).resolve().parents[1]
HUB_ID = "Qwen/Qwen3-4B-Instruct-2507"


def _worker_env(experiment: str) -> dict[str, str]:
    """The variables the experiment's Ray workers get (ray_kwargs...runtime_env.env_vars)."""
    return dict(compose(experiment).ray_kwargs.ray_init.runtime_env.env_vars)


def test_every_experiments_workers_run_offline() -> None:
    """configs/grpo.yaml sets it under the runtime env verl hands to ray.init: the job's env for
    every worker on every node. The launcher no longer forwards the user's own value over it."""
    for experiment in experiments():
        assert _worker_env(experiment).get("HF_HUB_OFFLINE") == "1", experiment
    assert launch.forwarded({"HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": "/c"}) == [
        "++ray_kwargs.ray_init.runtime_env.env_vars.HF_HUB_CACHE='/c'"
    ]


def _fsdp2_lora(model_dir: Path, tmp_path: Path) -> tuple[Any, bool]:
    """The actor as verl builds it for a LoRA run from a hub id, on one gloo rank: loaded from
    ``model_dir`` but named ``HUB_ID`` (``from_pretrained(HUB_ID)`` records the id; verl's
    ``copy_to_local`` passes a hub id through), wrapped by PEFT, sharded by verl's apply_fsdp2;
    and whether this started the process group (the test then ends it)."""
    import torch.distributed as dist
    from peft import LoraConfig, TaskType, get_peft_model
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM
    from verl.utils.fsdp_utils import apply_fsdp2

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.name_or_path = HUB_ID
    lora = LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=8, target_modules="all-linear")
    peft_model = get_peft_model(model, lora)
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    apply_fsdp2(peft_model, {"mesh": init_device_mesh("cpu", (1,))}, {})
    return peft_model, started


# peft's note offline: it takes the vocabulary as not resized, as verl never resizes it
@pytest.mark.filterwarnings("ignore:Could not find a config file:UserWarning")
def test_lora_sync_asks_the_hub_only_without_the_workers_env(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl's own ``layered_summon_lora_params`` (every rollout weight sync and LoRA save of a
    GPU run, one ``get_peft_model_state_dict`` per FSDP-wrapped decoder layer) under the worker
    env the configs set: no Hub request. Without it (the negative control, the runs before):
    peft's ``check_file_exists_on_hf_hub`` HEAD and ``from_pretrained`` HEAD per layer, and one
    GET of config.json, 2 x layers + 1, the same adapters either way.

    peft reads ``HF_HUB_OFFLINE`` from os.environ at each call; huggingface_hub and transformers
    read it once at import, which a worker does with the variable already set. Here only the
    variable is set and the import-time flags stay off (``serve``), so the zero is peft's own
    check, not huggingface_hub refusing a request it was asked to make."""
    import torch.distributed as dist
    from verl.utils.fsdp_utils import layered_summon_lora_params

    use_cache(monkeypatch, tmp_path / "hub")
    monkeypatch.setattr(torch.cpu, "empty_cache", lambda: None, raising=False)  # CUDA-only in 0.6.1
    model, started = _fsdp2_lora(tiny_model_dir, tmp_path)
    layers = model.config.num_hidden_layers
    assert model.peft_config["default"].base_model_name_or_path == HUB_ID  # the portable id
    offline = _worker_env("countdown_qwen3_4b_lora")["HF_HUB_OFFLINE"]
    try:
        with serve(FakeHub(HUB_ID, tiny_model_dir)) as hub:
            monkeypatch.setenv("HF_HUB_OFFLINE", offline)
            fixed = layered_summon_lora_params(model)
            requests_fixed = list(hub.requests)
            monkeypatch.delenv("HF_HUB_OFFLINE")
            before = layered_summon_lora_params(model)
            requests_before = list(hub.requests)
    finally:
        if started:
            dist.destroy_process_group()
    assert requests_fixed == []
    assert len(requests_before) == 2 * layers + 1, requests_before
    assert all(HUB_ID in url and "config.json" in url for _, url in requests_before)
    assert fixed.keys() == before.keys() and len(fixed) == layers * 7 * 2  # A and B, 7 linears
    assert model.peft_config["default"].base_model_name_or_path == HUB_ID


# --- pre-flight -----------------------------------------------------------------------------


@pytest.fixture
def placeholder(tmp_path: Path) -> Path:
    """What the fake Hub serves: a config and weights pre-flight looks at, never loads."""
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    (folder / "pytorch_model.bin").write_bytes(b"")
    return folder


def test_a_hub_model_not_in_the_cache_is_refused_with_the_download_command(
    tmp_path: Path, placeholder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_cache(monkeypatch, tmp_path / "hub")
    config = compose("countdown_qwen3_4b_lora")
    problem = hub_cache.problem(config)
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"actor_rollout_ref.model.path: {HUB_ID} is not in the Hugging")
    assert problem.endswith(f"download it first: uv run hf download {HUB_ID}")
    assert str(tmp_path / "hub") in problem  # the cache it looked in
    hub = download(HUB_ID, placeholder)  # what `hf download` runs: snapshot_download
    assert hub.requests and hub_cache.problem(config) is None  # control: now it is there
    # the workers online on purpose: nothing to check
    online = compose("countdown_qwen3_4b_lora", [f"{hub_cache.OFFLINE_KEY}=0"])
    use_cache(monkeypatch, tmp_path / "empty")
    assert hub_cache.problem(online) is None and hub_cache.problem(config) is not None
    local = compose("countdown_qwen3_4b_lora", [f"actor_rollout_ref.model.path={placeholder}"])
    assert hub_cache.problem(local) is None  # a local folder is pre-flight's other check


def test_an_interrupted_download_is_refused(
    tmp_path: Path, placeholder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """huggingface_hub finds the snapshot folder but cannot tell whether every file is in it; a
    download stopped before the weights leaves config.json alone."""
    use_cache(monkeypatch, tmp_path / "hub")
    download(HUB_ID, placeholder)
    assert hub_cache.cache_problem(HUB_ID) is None  # control: complete
    snapshot = next((tmp_path / "hub").glob("models--*/snapshots/*"))
    (snapshot / "pytorch_model.bin").unlink()
    problem = hub_cache.cache_problem(HUB_ID)
    assert problem is not None and "no weights" in problem and "\n" not in problem
    assert problem.endswith(f"finish the download: uv run hf download {HUB_ID}")


def test_preflight_reads_the_cache_named_by_hf_home(
    tmp_path: Path, placeholder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh process, as the launcher starts pre-flight: HF_HOME decides where it looks."""
    use_cache(monkeypatch, tmp_path / "home/hub")  # HF_HOME's hub/ folder
    download(HUB_ID, placeholder)
    code = f"from rlvr.preflight.hub_cache import cache_problem; print(cache_problem({HUB_ID!r}))"
    seen = {}
    for home in ("home", "empty"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env["HF_HOME"] = str(tmp_path / home)
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        seen[home] = done.stdout.strip()
    assert seen["home"] == "None"
    assert seen["empty"].startswith("is not in the Hugging Face cache")
    assert str(tmp_path / "empty/hub") in seen["empty"]


def test_the_download_step_fills_the_cache_and_skips_local_models(
    tmp_path: Path, placeholder: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``python -m rlvr.preflight.hub_cache EXPERIMENT``, the quickstart GPU run's first step."""
    use_cache(monkeypatch, tmp_path / "hub")
    config = compose("countdown_qwen2_5_3b_lora_1gpu")
    repo_id = str(config.actor_rollout_ref.model.path)
    assert hub_cache.cache_problem(repo_id) is not None
    with serve(FakeHub(repo_id, placeholder)):
        assert hub_cache.main(["countdown_qwen2_5_3b_lora_1gpu"]) == 0
    assert hub_cache.cache_problem(repo_id) is None
    assert hub_cache.main(["countdown_cpu"]) == 0
    assert "is local" in capsys.readouterr().out
