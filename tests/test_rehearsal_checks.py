"""The rehearsal's checks on recorded evidence: each passes on a good record and fails on the
record a broken run leaves (the negative controls)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.rehearsal import checks

PYTHON = "/venv/bin/python"


def _trace(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        with open(folder / f"{record['pid']}.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
    return folder


def _rank(pid: int, rank: int | None, device: str | None, raylet: str = "1", **hook) -> list:
    base = {"pid": pid, "rank": None if rank is None else str(rank), "raylet_pid": raylet}
    return [
        base
        | {"event": "hook", "cuda_visible_devices": None, "torch_loaded": False}
        | {"executable": PYTHON}
        | hook,
        base
        | {"event": "torch_imported", "cuda_visible_devices": device, "torch_loaded": True}
        | {"executable": PYTHON},
        base
        | {"event": "gpus_hidden", "cuda_visible_devices": "", "torch_loaded": True}
        | {"executable": PYTHON},
    ]


def _good(world: int, per_node: int) -> list[dict]:
    records = _rank(1, None, None)  # the TaskRunner: no rank, no device
    for rank in range(world):
        node = str(rank // per_node)
        records += _rank(100 + rank, rank, str(rank % per_node), raylet=node)
    return records


def test_devices_pass_one_node_and_two(tmp_path: Path) -> None:
    assert "8 ranks" in checks.devices(_trace(tmp_path / "a", _good(8, 8)), 8, PYTHON)
    two = checks.devices(_trace(tmp_path / "b", _good(16, 8)), 16, PYTHON)
    assert "8 on node 1, 8 on node 2" in two


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # a3b0be1's hook: torch (via verl) imported in the hook, before Ray set the devices
        (lambda r: r[0].update(torch_loaded=True), "torch was imported before the setup hook"),
        (lambda r: r[1].update(cuda_visible_devices=None), "CUDA_VISIBLE_DEVICES=None"),
        (lambda r: r[1].update(cuda_visible_devices="0,1,2"), "CUDA_VISIBLE_DEVICES='0,1,2'"),
        (lambda r: r[1].update(cuda_visible_devices="5"), "ranks share a device"),
        (lambda r: r[0].update(executable="/home/x/.local/bin/uv"), "not /venv/bin/python"),
        # on a GPU node the fake id names a real GPU: a rank that did not blank it would use it
        (lambda r: r[2].update(cuda_visible_devices="0"), "rank 0: GPU '0' not hidden"),
        (lambda r: r[2].update(event="no_such_event"), "rank 0: GPU '0' not hidden"),
    ],
)
def test_devices_fail_on_a_broken_rank(tmp_path: Path, mutate, expected: str) -> None:
    records = _good(8, 8)
    rank_zero = [r for r in records if r["pid"] == 100]
    mutate(rank_zero)
    with pytest.raises(checks.RehearsalFailure, match=re.escape(expected)):
        checks.devices(_trace(tmp_path, records), 8, PYTHON)


def test_devices_fail_when_a_rank_is_missing(tmp_path: Path) -> None:
    records = [r for r in _good(8, 8) if r["pid"] != 107]
    with pytest.raises(checks.RehearsalFailure, match=re.escape("expected 0..7")):
        checks.devices(_trace(tmp_path, records), 8, PYTHON)


def test_shards(tmp_path: Path) -> None:
    for rank in range(4):
        for prefix in ("model", "optim", "extra_state"):
            (tmp_path / f"{prefix}_world_size_4_rank_{rank}.pt").touch()
    assert checks.shards(tmp_path, 4, ["model", "optimizer", "extra"]).startswith("4 ranks")
    (tmp_path / "optim_world_size_4_rank_3.pt").unlink()
    with pytest.raises(checks.RehearsalFailure, match=re.escape("optim_world_size_4_rank_3.pt")):
        checks.shards(tmp_path, 4, ["model", "optimizer", "extra"])


def test_loads_strictly_rejects_a_peft_keyed_folder(tiny_model_dir: Path, tmp_path: Path) -> None:
    """What verl 0.6.1 wrote for LoRA: PEFT key names that load as random weights."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig

    assert "0 missing" in checks.loads_strictly(tiny_model_dir, None)
    bad = tmp_path / "huggingface"
    bad.mkdir()
    AutoConfig.from_pretrained(tiny_model_dir).save_pretrained(bad)
    state = load_file(tiny_model_dir / "model.safetensors")
    peft_keyed = {
        f"base_model.model.{k.replace('.weight', '.base_layer.weight')}": v
        for k, v in state.items()
    }
    save_file(peft_keyed, bad / "model.safetensors")
    with pytest.raises(checks.RehearsalFailure, match="missing_keys"):
        checks.loads_strictly(bad, None)


def test_wandb_run_needs_exactly_one_new_non_empty_run(tmp_path: Path) -> None:
    with pytest.raises(checks.RehearsalFailure, match="0 new wandb runs"):
        checks.wandb_run(tmp_path, set())
    run = tmp_path / "offline-run-1/run-1.wandb"
    run.parent.mkdir()
    run.touch()
    with pytest.raises(checks.RehearsalFailure, match="its run file is empty"):
        checks.wandb_run(tmp_path, set(), table=None)
    with pytest.raises(checks.RehearsalFailure, match="0 new wandb runs"):
        checks.wandb_run(tmp_path, {run}, table=None)


def _log(path: Path, *steps: tuple[int, dict[str, float]]) -> int:
    """Append steps as verl's file logger does; the file's size before them."""
    before = path.stat().st_size if path.exists() else 0
    with open(path, "a") as handle:
        handle.writelines(json.dumps({"step": s, "data": d}) + "\n" for s, d in steps)
    return before


TRAINED = {"actor/entropy": 0.5, "critic/score/mean": 0.25}


def test_logged_steps_counts_trained_steps_past_the_last_launch(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    with pytest.raises(checks.RehearsalFailure, match="file logger wrote nothing"):
        checks.logged_steps(metrics, [1, 2])
    _log(metrics, (0, {"val-core/x": 0.0}), (1, TRAINED), (2, TRAINED))
    assert "steps [1, 2] (critic/score/mean [0.25, 0.25])" in checks.logged_steps(metrics, [1, 2])
    with pytest.raises(checks.RehearsalFailure, match=r"trained steps \[1, 2\], expected \[1\]"):
        checks.logged_steps(metrics, [1])
    # the resumed launch appends: it validates step 2 again, then trains step 3 alone
    resumed = _log(metrics, (2, {"val-core/x": 0.5}), (3, TRAINED))
    assert "steps [3]" in checks.logged_steps(metrics, [3], start=resumed)
    # negative control: a relaunch that did not resume trains steps 1 to 3 again
    again = _log(metrics, (1, TRAINED), (2, TRAINED), (3, TRAINED))
    with pytest.raises(checks.RehearsalFailure, match=r"trained steps \[1, 2, 3\], expected"):
        checks.logged_steps(metrics, [3], start=again)


def test_devices_fail_cleanly_when_every_rank_imported_torch_in_the_hook(tmp_path: Path) -> None:
    """What a3b0be1's hook left in a real 8-rank rehearsal: torch imported inside the hook, before
    Ray assigned any device, on every rank (the check once crashed sorting the None values)."""
    records = _good(8, 8)
    for record in records:
        if record["event"] == "torch_imported":
            record["cuda_visible_devices"] = None
    with pytest.raises(checks.RehearsalFailure, match="CUDA_VISIBLE_DEVICES=None at torch"):
        checks.devices(_trace(tmp_path, records), 8, PYTHON)


@pytest.mark.parametrize("with_table", [True, False])
def test_wandb_run_needs_the_validation_generations_table(tmp_path: Path, with_table: bool) -> None:
    """A real offline run: steps 1 and 2 logged and finished; the check passes only when verl's
    ``val/generations`` table is in it too (negative control: the same run without it)."""
    code = f"""
import wandb
run = wandb.init(mode="offline", dir={str(tmp_path)!r}, project="p")
for step in (1, 2):
    wandb.log({{"training/global_step": step, "actor/entropy": 1.0}}, step=step)
if {with_table}:
    table = wandb.Table(columns=["step", "input_1"], data=[[2, "q"]])
    wandb.log({{"val/generations": table}}, step=2)
wandb.finish()
"""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    wandb_dir = tmp_path / "wandb"
    if with_table:
        assert "val/generations table" in checks.wandb_run(wandb_dir, set())
    else:
        with pytest.raises(checks.RehearsalFailure, match="no val/generations table"):
            checks.wandb_run(wandb_dir, set())
        assert "bytes" in checks.wandb_run(wandb_dir, set(), table=None)


def test_gradient_scale_passes_whole_gradients_and_names_a_shrunk_one(
    tiny_model_dir: Path,
) -> None:
    from rlvr.config.compose import compose

    good = compose("countdown_qwen3_4b", ["+rehearsal=cpu"])
    assert "world 8: 64 prompts x 16 a batch" in checks.gradient_scale(good, tiny_model_dir, [8])
    planted = ["+rehearsal=cpu", "actor_rollout_ref.actor.ppo_mini_batch_size=256"]
    with pytest.raises(checks.RehearsalFailure, match=r"world size 8: .* sum to 0\.25, not 1"):
        checks.gradient_scale(compose("countdown_qwen3_4b", planted), tiny_model_dir, [8])


def _metrics(path: Path, **step_one: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [{"step": 0, "data": {"val-core/x": 0.0}}, {"step": 1, "data": step_one}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


STEP_ONE = {
    "critic/score/mean": 0.125,
    "response_length/mean": 16.0,
    "actor/pg_loss": -0.0123,
    "actor/grad_norm": 2.5,
}


def test_same_step_one_across_topologies(tmp_path: Path) -> None:
    reference = _metrics(tmp_path / "one_node.jsonl", **STEP_ONE)
    # the gradient reduced in another order: equal within 1e-3
    close = {**STEP_ONE, "actor/grad_norm": 2.5 * (1 + 2e-5)}
    assert "grad_norm 2.5" in checks.same_step_one(_metrics(tmp_path / "a", **close), reference)
    # negative controls: a gradient halved on one topology, or other rollouts
    for key, value in (("actor/grad_norm", 1.25), ("critic/score/mean", 0.25)):
        run = _metrics(tmp_path / key.replace("/", "_"), **{**STEP_ONE, key: value})
        with pytest.raises(checks.RehearsalFailure, match=f"differ between topologies: {key}"):
            checks.same_step_one(run, reference)
    with pytest.raises(checks.RehearsalFailure, match="no step 1 logged"):
        checks.same_step_one(tmp_path / "missing.jsonl", reference)


def _fake_checkpoint(actor: Path, model_dir: Path, world: int, copies: int) -> int:
    """Shards as verl writes them for a model of the tiny one's size (``copies`` of the sharded
    state: 2 under HSDP with two replicas), and its weights under huggingface/."""
    import shutil

    import torch

    from rlvr.planning.checkpoint_budget import safetensors_size

    size = safetensors_size(model_dir)
    assert size is not None
    per_rank = -(-size.parameters * copies // world)
    (actor / "huggingface").mkdir(parents=True)
    shutil.copy(model_dir / "model.safetensors", actor / "huggingface")
    for rank in range(world):
        weight = torch.zeros(per_rank)
        # tied weights: one storage under two names, saved once
        torch.save(
            {"embed": weight, "lm_head": weight}, actor / f"model_world_size_{world}_rank_{rank}.pt"
        )
        moments = {"exp_avg": torch.zeros(per_rank), "exp_avg_sq": torch.zeros(per_rank)}
        torch.save({"state": {0: moments}}, actor / f"optim_world_size_{world}_rank_{rank}.pt")
    return size.parameters


@pytest.mark.parametrize(("copies", "passes"), [(1, True), (2, False)])
def test_checkpoint_bytes_against_the_budget(
    tiny_model_dir: Path, tmp_path: Path, copies: int, passes: bool
) -> None:
    """One copy of the sharded state matches a 1-node budget (16 bytes a parameter); a second
    replica's shards, unbudgeted, are caught (negative control)."""
    from rlvr.config.compose import compose

    config = compose(
        "countdown_qwen3_4b", ["+rehearsal=cpu", f"actor_rollout_ref.model.path={tiny_model_dir}"]
    )
    params = _fake_checkpoint(tmp_path / "actor", tiny_model_dir, 8, copies)
    if passes:
        line = checks.checkpoint_bytes(tmp_path / "actor", config)
        assert f"{16 * params:,} budgeted" in line
    else:
        with pytest.raises(checks.RehearsalFailure, match="disk budget is wrong"):
            checks.checkpoint_bytes(tmp_path / "actor", config)


@pytest.mark.parametrize(("copies", "passes"), [(1, True), (2, False)])
def test_actor_state_per_rank_against_the_memory_planner(
    tiny_model_dir: Path, tmp_path: Path, copies: int, passes: bool
) -> None:
    """Each rank holding 1/8 of the parameters and AdamW matches the planner at world size 8;
    ranks holding twice that (a sharding the planner missed) are caught (negative control)."""
    from rlvr.config.compose import compose

    config = compose(
        "countdown_qwen3_4b", ["+rehearsal=cpu", f"actor_rollout_ref.model.path={tiny_model_dir}"]
    )
    _fake_checkpoint(tmp_path / "actor", tiny_model_dir, 8, copies)
    if passes:
        line = checks.actor_state_per_rank(tmp_path / "actor", config, 8)
        assert "(sharded over 8), ratio 1.0" in line
    else:
        with pytest.raises(checks.RehearsalFailure, match="memory planner's sharding is wrong"):
            checks.actor_state_per_rank(tmp_path / "actor", config, 8)
