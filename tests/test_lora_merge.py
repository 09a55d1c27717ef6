"""LoRA checkpoint merging (rlvr/train/lora_merge.py) on checkpoints laid out as verl 0.6.1 writes.

The verl layout is reproduced from verl/workers/fsdp_workers.py ``save_checkpoint`` and
verl/utils/fsdp_utils.py ``layered_summon_lora_params``: adapter keys
``base_model.model.model.layers.I.<module>.lora_A.weight`` (fp32), ``adapter_config.json`` =
``asdict(peft_config)`` with enums as values, and ``huggingface/`` holding config + tokenizer
only (or, with ``hf_model``, the PEFT-keyed full state dict).
"""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rlvr.evaluation import EvalError
from rlvr.evaluation.generation import HFBackend
from rlvr.evaluation.model import resolve_model
from rlvr.train import lora_merge
from rlvr.train.lora_merge import (
    TEMP_PREFIX,
    MergeError,
    merge_all,
    merge_checkpoint,
    safetensors_keys,
    weight_state,
)

ROOT = Path(__file__).resolve().parents[1]


def _peft_model(base_dir: Path, seed: int) -> Any:
    """The actor as verl builds it for LoRA, with trained-looking (nonzero) lora_B."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=8,
        lora_alpha=16,
        target_modules="all-linear",
        exclude_modules=None,
        bias="none",
    )
    peft_model = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return peft_model


def _write_verl_checkpoint(actor: Path, peft_model: Any, peft_keyed_hf: bool = False) -> None:
    """``actor/`` as verl 0.6.1's FSDP worker leaves it for a LoRA run."""
    from peft.utils.save_and_load import get_peft_model_state_dict
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    adapter = actor / "lora_adapter"
    adapter.mkdir(parents=True)
    params = {}  # layered_summon_lora_params: one decoder layer (FSDP unit) at a time
    for index, layer in enumerate(peft_model.base_model.model.model.layers):
        layer_params = get_peft_model_state_dict(peft_model, state_dict=layer.state_dict())
        prefix = f"base_model.model.model.layers.{index}"
        params |= {f"{prefix}.{k}": v.detach().clone() for k, v in layer_params.items()}
    save_file(params, adapter / "adapter_model.safetensors")
    peft_config = asdict(peft_model.peft_config["default"])
    peft_config["task_type"] = peft_config["task_type"].value
    peft_config["peft_type"] = peft_config["peft_type"].value
    peft_config["target_modules"] = list(peft_config["target_modules"])
    with open(adapter / "adapter_config.json", "w", encoding="utf-8") as handle:
        json.dump(peft_config, handle, ensure_ascii=False, indent=4)

    # FSDPCheckpointManager, rank 0: config + tokenizer (+ generation config) always.
    hf = actor / "huggingface"
    hf.mkdir()
    config = peft_model.config  # the actor's config: loaded in fp32
    base_path = config.name_or_path
    GenerationConfig.from_pretrained(base_path).save_pretrained(hf)
    config.save_pretrained(hf)
    AutoTokenizer.from_pretrained(base_path).save_pretrained(hf)
    if peft_keyed_hf:  # hf_model in save_contents: the PEFT model's full state dict, fp32
        state_dict = {k: v.detach().clone() for k, v in peft_model.state_dict().items()}
        save_model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        save_model.save_pretrained(hf, state_dict=state_dict)


def _loading_problems(folder: Path) -> tuple[Any, dict[str, Any]]:
    """The model and every non-empty list of ``output_loading_info`` (strict load check)."""
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        folder, dtype="auto", output_loading_info=True
    )
    return model, {name: keys for name, keys in info.items() if keys}


def _max_diff(model: Any, reference: Any) -> float:
    ours, theirs = model.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys()
    return max(float((ours[k].float() - theirs[k].float()).abs().max()) for k in ours)


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path) -> Any:
    return _peft_model(tiny_model_dir, seed=1)


@pytest.fixture(scope="module")
def reference(trained: Any) -> Any:
    """PEFT's own merge of the same adapter."""
    return copy.deepcopy(trained).merge_and_unload()


def test_verl_layout_is_reproduced(tmp_path: Path, trained: Any, tiny_model_dir: Path) -> None:
    _write_verl_checkpoint(tmp_path / "actor", trained)
    adapter = tmp_path / "actor/lora_adapter"
    keys = safetensors_keys(adapter / "adapter_model.safetensors")
    assert len(keys) == 2 * 7 * 2  # 2 layers x 7 linear modules x (A, B)
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in keys
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_model_dir)
    assert (config["task_type"], config["peft_type"], config["r"]) == ("CAUSAL_LM", "LORA", 8)
    assert weight_state(tmp_path / "actor/huggingface") == "empty"


def test_merge_loads_strictly_and_equals_peft_merge(
    tmp_path: Path, trained: Any, reference: Any, tiny_model_dir: Path
) -> None:
    actor = tmp_path / "global_step_2/actor"
    _write_verl_checkpoint(actor, trained)
    lines: list[str] = []
    hf = merge_checkpoint(actor, log=lines.append)
    assert hf == actor / "huggingface" and lines[0].startswith("merged ")
    model, problems = _loading_problems(hf)
    assert problems == {}
    assert _max_diff(model, reference) < 1e-5
    base, _ = _loading_problems(tiny_model_dir)
    assert _max_diff(model, base) > 1e-3  # the adapter changed the weights: not a vacuous pass
    assert json.loads((hf / "config.json").read_text())["dtype"] == "float32"  # the base's
    assert {"tokenizer.json", "generation_config.json"} <= {p.name for p in hf.iterdir()}
    # verl's own folder is moved aside, not deleted; no temporary folder is left behind.
    assert (actor / "huggingface.verl/config.json").is_file()
    # The merged folder has verl's folder's mode, not mkdtemp's 0700, and the weights what open
    # gives under the umask, not safetensors' 0600: others can load the model.
    assert _mode(hf) == _mode(actor / "huggingface.verl") != 0o700
    assert _mode(hf / "model.safetensors") == 0o666 & ~_umask()
    assert sorted(p.name for p in actor.iterdir()) == [
        "huggingface",
        "huggingface.verl",
        "lora_adapter",
    ]

    before = {p.name: p.stat().st_mtime_ns for p in hf.iterdir()}
    lines.clear()
    assert merge_checkpoint(actor, log=lines.append) == hf  # idempotent
    assert lines == [f"already merged: {hf}"]
    assert {p.name: p.stat().st_mtime_ns for p in hf.iterdir()} == before
    assert not (actor / "huggingface.verl.1").exists()

    assert resolve_model(str(hf)).kind == "folder"


def test_a_killed_merges_staging_folder_is_removed_by_the_next(
    tmp_path: Path, trained: Any
) -> None:
    """SIGKILL skips the merge's own clean-up and leaves its staging folder; the rerun removes
    it and says so (nothing else of the checkpoint goes)."""
    actor = tmp_path / "actor"
    _write_verl_checkpoint(actor, trained)
    stale = actor / f"{TEMP_PREFIX}killed"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    said: list[str] = []
    merge_checkpoint(actor, log=said.append)
    assert not stale.exists() and weight_state(actor / "huggingface") == "plain"
    assert said[0] == f"removed {TEMP_PREFIX}killed, left by a merge that was stopped"
    assert sorted(p.name for p in actor.iterdir() if p.name.startswith(".")) == []


def test_merge_writes_the_base_dtype(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A bf16 base (Qwen's config dtype) gets bf16 weights, whatever the adapter's fp32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir = tmp_path / "base_bf16"
    AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).save_pretrained(
        base_dir
    )
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(base_dir)
    peft_model = _peft_model(base_dir, seed=2)
    actor = tmp_path / "actor"
    _write_verl_checkpoint(actor, peft_model)
    hf = merge_checkpoint(actor)
    with safe_open(str(hf / "model.safetensors"), framework="pt") as handle:
        assert {handle.get_slice(key).get_dtype() for key in handle.keys()} == {"BF16"}  # noqa: SIM118
    assert json.loads((hf / "config.json").read_text())["dtype"] == "bfloat16"
    model, problems = _loading_problems(hf)
    assert problems == {}
    reference = peft_model.merge_and_unload()  # fp32 base + fp32 adapter, then rounded once
    assert _max_diff(model, reference.to(torch.bfloat16)) < 1e-2


def test_peft_keyed_folder_fails_the_strict_check_and_is_repaired(
    tmp_path: Path, trained: Any, reference: Any
) -> None:
    """Negative control: verl's hf_model of a LoRA run is what the strict check catches."""
    actor = tmp_path / "actor"
    _write_verl_checkpoint(actor, trained, peft_keyed_hf=True)
    hf = actor / "huggingface"
    assert weight_state(hf) == "peft"
    _, problems = _loading_problems(hf)
    assert problems["missing_keys"] and problems["unexpected_keys"]
    with pytest.raises(MergeError, match="does not load cleanly"):
        lora_merge.load_strictly(hf)
    with pytest.raises(EvalError, match=f"uv run scripts/merge_lora.py {actor}$"):
        resolve_model(str(hf))

    merge_checkpoint(actor)  # an explicit merge repairs it, keeping verl's file aside
    model, problems = _loading_problems(hf)
    assert problems == {} and _max_diff(model, reference) < 1e-5
    assert weight_state(actor / "huggingface.verl") == "peft"


def test_eval_loads_an_unmerged_checkpoint_as_lora(
    tmp_path: Path, trained: Any, reference: Any, tiny_model_dir: Path, capsys
) -> None:
    actor = tmp_path / "actor"
    _write_verl_checkpoint(actor, trained)
    hf = actor / "huggingface"
    source = resolve_model(str(hf))
    assert (source.kind, source.path, source.base) == (
        "lora",
        str(actor / "lora_adapter"),
        str(tiny_model_dir),
    )
    assert source.tokenizer_path == str(hf)  # the tokenizer verl saved with the checkpoint
    assert "loading the LoRA adapter" in capsys.readouterr().err
    backend = HFBackend(source, dtype="float32", device="cpu")
    assert _max_diff(backend.model, reference) < 1e-5


def test_merge_all_does_every_pending_lora_step(
    tmp_path: Path, trained: Any, tiny_model_dir: Path
) -> None:
    root = tmp_path / "run"
    for step in (10, 2):
        _write_verl_checkpoint(root / f"global_step_{step}/actor", trained)
    (root / "latest_checkpointed_iteration.txt").write_text("10")
    merged = merge_all(root)
    assert merged == [root / f"global_step_{step}/actor/huggingface" for step in (2, 10)]
    assert all(_loading_problems(hf)[1] == {} for hf in merged)
    assert merge_all(root) == []

    # A full fine-tuning root: nothing to do, and no torch imported to find that out.
    plain = tmp_path / "plain/global_step_1/actor"
    (plain / "huggingface").mkdir(parents=True)
    for file in ("config.json", "model.safetensors"):
        os.link(tiny_model_dir / file, plain / "huggingface" / file)
    code = (
        "import sys; from rlvr.train.lora_merge import main; rc = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    for folder, expected in ((tmp_path / "plain", "no LoRA checkpoints"), (root, "all merged")):
        result = subprocess.run(
            [sys.executable, "-c", code, str(folder)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert expected in result.stdout and result.stdout.count("\n") == 1


def test_cli_errors_are_one_line_exit_2(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        lora_merge.main(["--help"])
    assert exc.value.code == 0
    assert lora_merge.main([str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'missing'}: no such folder\n"
    (tmp_path / "actor/lora_adapter").mkdir(parents=True)  # verl logged a failed adapter save
    assert lora_merge.main([str(tmp_path / "actor")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "adapter_config.json" in err and err.count("\n") == 1
    assert lora_merge.main([str(tmp_path)]) == 2  # as part of a root: reported, not skipped
    with pytest.raises(SystemExit) as exc:
        lora_merge.main([])
    assert exc.value.code == 2


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_folder_that_is_not_a_checkpoint_is_refused(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model folder, an adapter folder on its own, an empty folder: not "nothing to merge"
    (exit 0), which would hide the wrong argument; docs/ERRORS.md lists this refusal."""
    adapter_only = tmp_path / "adapter"
    adapter_only.mkdir()
    (adapter_only / "adapter_config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    for folder in (tiny_model_dir, adapter_only, tmp_path / "empty"):
        assert lora_merge.main([str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {folder}: not a verl checkpoint") and err.count("\n") == 1
    # Controls: a checkpoint root without LoRA steps is a checkpoint, with nothing to merge.
    (tmp_path / "full/global_step_1/actor").mkdir(parents=True)
    assert lora_merge.main([str(tmp_path / "full")]) == 0
    assert "nothing to merge" in capsys.readouterr().out


def test_wrong_base_model_is_refused(tmp_path: Path, trained: Any) -> None:
    from rlvr.models.tiny import build_model

    other = build_model(tmp_path / "one_layer", layers=1)
    actor = tmp_path / "actor"
    _write_verl_checkpoint(actor, trained)
    with pytest.raises(MergeError, match="does not match the base"):
        merge_checkpoint(actor, base_model=str(other))
    assert sorted(p.name for p in actor.iterdir()) == ["huggingface", "lora_adapter"]
    assert weight_state(actor / "huggingface") == "empty"


def test_lora_experiment_skips_the_peft_keyed_hf_model() -> None:
    from rlvr.config.compose import compose

    lora = compose("countdown_qwen3_4b_lora").actor_rollout_ref.actor.checkpoint
    full = compose("countdown_qwen3_4b").actor_rollout_ref.actor.checkpoint
    assert list(lora.save_contents) == ["model", "optimizer", "extra"]
    assert "hf_model" in full.save_contents


def test_experiment_mode_merges_under_its_checkpoint_dir(
    tmp_path: Path, trained: Any, capsys
) -> None:
    """What the launcher runs after training: the composed trainer.default_local_dir."""
    root = tmp_path / "run"
    args = ["--experiment", "countdown_cpu", "adapter=lora32"]
    assert lora_merge.main([*args, f"trainer.default_local_dir={root}"]) == 0
    assert "does not exist (no checkpoint saved)" in capsys.readouterr().out
    _write_verl_checkpoint(root / "global_step_1/actor", trained)
    assert lora_merge.main([*args, f"trainer.default_local_dir={root}"]) == 0
    assert capsys.readouterr().out.startswith("merged ")
    assert weight_state(root / "global_step_1/actor/huggingface") == "plain"
