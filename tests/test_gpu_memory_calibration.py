"""The GPU memory calibration benchmark's code path, run here on CPU with toy-sized models
(its --dry_run), and the pieces its figures rest on."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml

from rlvr.common.paths import ROOT
from rlvr.models.architectures import ARCHITECTURES, lora_parameters_per_rank, miniature


@pytest.fixture(scope="module")
def modules() -> tuple[ModuleType, ModuleType]:
    """benchmarks/ is scripts, not a package: import the two modules as the script does."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        return (
            importlib.import_module("gpu_memory_calibration"),
            importlib.import_module("gpu_memory_probe"),
        )


@pytest.fixture(scope="module")
def dry_run(modules, tmp_path_factory) -> dict:
    calibration, _ = modules
    out = tmp_path_factory.mktemp("calibration") / "gpu_memory.json"
    models = ["qwen3-4b-instruct-2507", "qwen2.5-0.5b-instruct"]
    assert calibration.main(["--dry_run", "--out", str(out), "--models", *models]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow  # builds each architecture small (12 s): the fast tier keeps the math tests
def test_dry_run_measures_every_phase(dry_run: dict) -> None:
    assert dry_run["complete"] is True
    assert dry_run["setup"]["dry_run"] is True and dry_run["setup"]["wrap"].startswith("FSDP2")
    assert {"device", "torch", "transformers", "total_memory_bytes"} <= set(dry_run["environment"])
    assert list(dry_run["models"]) == ["qwen3-4b-instruct-2507", "qwen2.5-0.5b-instruct"]
    for name, entry in dry_run["models"].items():
        assert entry["build"]["parameters_built"] == entry["parameters"], name
        static = entry["static"]
        assert static["status"] == "ok"
        # fp32 parameters, fp32 gradients, AdamW's two fp32 moments.
        assert static["grads_bytes"] == static["params_bytes"] == 4 * entry["parameters"]
        assert static["optimizer_bytes"] == 2 * static["params_bytes"]
        assert [r["tokens"] for r in entry["log_prob"]] == [32, 64]
        assert all(r["status"] == "ok" for r in entry["log_prob"] + entry["update"])
        switched = {r["gradient_checkpointing"]: r["checkpointed_layers"] for r in entry["update"]}
        assert switched == {True: 2, False: 0}  # both decoder layers recompute, or none
        assert entry["per_token"]["logits_bytes_per_token"] == 2 * 512


@pytest.mark.slow
def test_dry_run_lora_trains_only_the_adapters(dry_run: dict) -> None:
    lora = dry_run["lora"]
    arch = miniature(ARCHITECTURES["qwen3-4b-instruct-2507"])
    assert lora["build"]["trainable_parameters"] == 32 * lora_parameters_per_rank(arch)
    assert lora["static"]["grads_bytes"] == 4 * lora["build"]["trainable_parameters"]
    assert lora["static"]["params_bytes"] == 4 * lora["build"]["parameters_built"]
    assert lora["update"][0]["status"] == "ok" and lora["update"][0]["tokens"] == 64


def test_lora_defaults_follow_the_adapter_overlay(modules) -> None:
    calibration, _ = modules
    model = yaml.safe_load((ROOT / "configs/adapter/lora32.yaml").read_text())
    model = model["actor_rollout_ref"]["model"]
    args = calibration.parse_args(["--out", "x.json"])
    assert (args.lora_rank, args.lora_alpha) == (model["lora_rank"], model["lora_alpha"])
    assert args.tokens[-1] == args.lora_tokens == 24000


def test_label_log_probs_match_log_softmax(modules) -> None:
    """The in-place, chunked log-prob function against autograd through log_softmax, over
    more rows than one chunk."""
    _, probe = modules
    rows = probe.CHUNK_ROWS + 7
    leaf = torch.randn(rows, 50, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 50, (rows,))
    weights = torch.randn(rows)
    got = probe.LabelLogProbs.apply(leaf * 1, labels)  # an intermediate, as logits are
    (got * weights).sum().backward()
    got_grad, leaf.grad = leaf.grad, None
    want = torch.log_softmax(leaf.float(), -1).gather(-1, labels[:, None]).squeeze(-1)
    (want * weights).sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, leaf.grad, atol=1e-2, rtol=1e-2)
    assert not torch.equal(got_grad, torch.zeros_like(got_grad))


def test_entropy_matches_the_definition(modules) -> None:
    _, probe = modules
    logits = torch.randn(probe.CHUNK_ROWS + 3, 40)
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(probe.entropy(logits), -(p * p.log()).sum(-1))


def test_per_token_fit_recovers_a_line_and_skips_failures(modules) -> None:
    calibration, _ = modules
    entry = {
        "architecture": {"vocab_size": 10},
        "log_prob": [{"tokens": t, "peak_extra_bytes": 100 + 3 * t} for t in (10, 20, 40)],
        "update": [
            {"tokens": 10, "gradient_checkpointing": True, "peak_extra_bytes": 7 * 10},
            {"tokens": 20, "gradient_checkpointing": True, "peak_extra_bytes": 7 * 20},
            {"tokens": 10, "gradient_checkpointing": False, "peak_extra_bytes": 5},
            {"tokens": 20, "gradient_checkpointing": False, "status": "oom"},
        ],
    }
    fits = calibration.per_token_fits(entry)
    assert fits["log_prob"] == {"bytes_per_token": 3, "fixed_bytes": 100}
    assert fits["update_checkpointing"] == {"bytes_per_token": 7, "fixed_bytes": 0}
    assert "update_no_checkpointing" not in fits  # one point is no line
    assert fits["logits_bytes_per_token"] == 20


def test_table_shows_out_of_memory(modules) -> None:
    calibration, _ = modules
    doc = {
        "setup": {"tokens": [8]},
        "models": {
            "m": {
                "static": {"allocated_bytes": 2 * 2**30},
                "log_prob": [{"tokens": 8, "status": "ok", "peak_extra_bytes": 2**29}],
                "update": [{"tokens": 8, "gradient_checkpointing": False, "status": "oom"}],
            }
        },
    }
    assert calibration.table(doc).splitlines()[1] == "m | 8 | 2.00 | 0.50 | - | oom"


def test_refuses_without_cuda_unless_dry_run(modules, tmp_path: Path, monkeypatch) -> None:
    calibration, _ = modules
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert calibration.main(["--out", str(tmp_path / "x.json")]) == 2
    assert not (tmp_path / "x.json").exists()


def test_recorded_h200_figures_hold_the_relations_the_docs_state() -> None:
    """benchmarks/results/gpu_memory_h200.json, as docs/TRAINING.md ("Measured GPU memory")
    summarises it: 16 bytes per parameter at rest, about one bf16 logits copy per token in the
    log-prob pass, about four in the checkpointed update."""
    doc = json.loads((ROOT / "benchmarks/results/gpu_memory_h200.json").read_text())
    assert doc["complete"] and doc["environment"]["device"] == "NVIDIA H200"
    for name, entry in doc["models"].items():
        assert entry["parameters"] == entry["build"]["parameters_built"], name
        per_parameter = entry["static"]["allocated_bytes"] / entry["parameters"]
        assert per_parameter == pytest.approx(16, rel=0.01), name
        fits, logits = entry["per_token"], entry["per_token"]["logits_bytes_per_token"]
        assert 0.85 < fits["log_prob"]["bytes_per_token"] / logits < 1.0, name
        assert 4.0 < fits["update_checkpointing"]["bytes_per_token"] / logits < 5.0, name
        assert fits["update_no_checkpointing"]["bytes_per_token"] > 2 * logits, name
    lora = doc["lora"]
    resident = 4 * lora["build"]["parameters_built"] + 12 * lora["build"]["trainable_parameters"]
    assert lora["static"]["allocated_bytes"] == pytest.approx(resident, rel=0.01)
