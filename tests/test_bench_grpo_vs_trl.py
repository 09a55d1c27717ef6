"""benchmarks/bench_grpo_vs_trl.py's TRL side without running TRL: the quickstart experiment's
knobs, read from its composed config, land in TRL 0.24's GRPOConfig arguments
(benchmarks/trl_grpo_step.py); objectives TRL cannot match are refused, not silently mapped; the
reward wrapper scores as the reward file does; the data prep flags are still the quickstart's.
Where TRL's cached environment exists, GRPOConfig itself accepts the arguments."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_loading import load_file_module

from rlvr.config.compose import compose

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "countdown_smollm2_cpu"


@pytest.fixture
def modules(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """benchmarks/ is scripts, not a package: its sibling imports need the folder on sys.path."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = load_file_module("bench_grpo_vs_trl", ROOT / "benchmarks/bench_grpo_vs_trl.py")
    step = load_file_module("trl_grpo_step", ROOT / "benchmarks/trl_grpo_step.py")
    return bench, step


def _kwargs(
    modules: tuple[ModuleType, ModuleType], *overrides: str, micro_batch: int = 40
) -> dict[str, Any]:
    bench, step = modules
    knobs = json.loads(json.dumps(bench.experiment_knobs(compose(EXPERIMENT, list(overrides)))))
    knobs["micro_batch"] = micro_batch  # the bench's --trl_micro_batch
    kwargs: dict[str, Any] = step.grpo_config_kwargs(knobs, "/nonexistent", 3)
    return kwargs


def test_experiment_knobs_map_onto_grpo_config(modules: tuple[ModuleType, ModuleType]) -> None:
    config = compose(EXPERIMENT)
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    kwargs = _kwargs(modules)
    assert kwargs["num_generations"] == rollout.n == 20
    # The batch's 12 x 20 completions generated at once, in micro batches of 40; an optimizer
    # step per mini batch of the experiment's prompts x 20.
    generated = kwargs["per_device_train_batch_size"] * kwargs["steps_per_generation"]
    assert generated == config.data.train_batch_size * rollout.n == 240
    per_step = kwargs["per_device_train_batch_size"] * kwargs["gradient_accumulation_steps"]
    assert per_step == actor.ppo_mini_batch_size * rollout.n
    assert kwargs["num_iterations"] == 1
    # One optimizer step per batch: TRL's step aligned with its generation (no old-log-prob pass).
    one = _kwargs(modules, "actor_rollout_ref.actor.ppo_mini_batch_size=12")
    assert (one["gradient_accumulation_steps"], one["steps_per_generation"]) == (6, 6)
    whole = _kwargs(modules, "actor_rollout_ref.actor.ppo_mini_batch_size=12", micro_batch=240)
    assert (whole["per_device_train_batch_size"], whole["gradient_accumulation_steps"]) == (240, 1)
    # Two: 120 completions a step, two steps a generation.
    two = _kwargs(modules, "actor_rollout_ref.actor.ppo_mini_batch_size=6")
    assert (two["gradient_accumulation_steps"], two["steps_per_generation"]) == (3, 6)
    with pytest.raises(ValueError, match="does not divide"):
        _kwargs(modules, micro_batch=32)
    assert kwargs["max_completion_length"] == config.data.max_response_length == 24
    assert kwargs["max_prompt_length"] == config.data.max_prompt_length
    assert kwargs["learning_rate"] == actor.optim.lr == 3e-5
    # The experiment has no KL loss: TRL's beta 0 (no reference model either).
    assert not actor.use_kl_loss and kwargs["beta"] == 0.0
    assert (kwargs["temperature"], kwargs["top_p"], kwargs["top_k"]) == (1.0, 1.0, None)
    assert kwargs["loss_type"] == "dapo"  # verl's token-mean over the whole batch
    assert kwargs["lr_scheduler_type"] == "constant" and kwargs["warmup_steps"] == 0
    assert kwargs["weight_decay"] == actor.optim.weight_decay
    assert [kwargs["adam_beta1"], kwargs["adam_beta2"]] == list(actor.optim.betas)
    assert kwargs["max_grad_norm"] == actor.grad_clip
    assert kwargs["epsilon"] == kwargs["epsilon_high"] == actor.clip_ratio_low == 0.2
    assert kwargs["scale_rewards"] == "group"
    assert not kwargs["bf16"] and not kwargs["fp16"] and kwargs["use_cpu"]
    assert kwargs["gradient_checkpointing"] is False
    assert kwargs["model_init_kwargs"] == {"dtype": "float32", "attn_implementation": "sdpa"}
    # A changed knob follows.
    ten = _kwargs(modules, "actor_rollout_ref.rollout.n=10", micro_batch=20)  # 6 x 10 a step
    assert ten["num_generations"] == 10
    with_kl = (
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.05",
    )
    assert _kwargs(modules, *with_kl)["beta"] == 0.05


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("actor_rollout_ref.actor.kl_loss_type=kl", "k3"),
        ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "token-mean"),
        ("actor_rollout_ref.actor.ppo_epochs=2", "one pass over the batch"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=5", "mini batches dividing it"),
        ("actor_rollout_ref.actor.optim.lr_warmup_steps=2", "warm-up"),
    ],
)
def test_objectives_trl_cannot_match_are_refused(
    modules: tuple[ModuleType, ModuleType], override: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _kwargs(modules, "actor_rollout_ref.actor.use_kl_loss=true", override)


def test_reward_wrapper_scores_as_the_reward_file(modules: tuple[ModuleType, ModuleType]) -> None:
    bench, step = modules
    knobs = bench.experiment_knobs(compose(EXPERIMENT))
    reward = step.reward_function(knobs["reward_path"], knobs["reward_kwargs"])
    truth = {"ground_truth": {"target": 13, "numbers": [2, 3, 7]}, "style": "rule"}
    texts = ["<answer>2*3+7</answer>", "<answer>2*3*7</answer>", "no answer"]
    scores = reward(
        prompts=[[]] * 3,
        completions=[[{"role": "assistant", "content": t}] for t in texts],
        data_source=["countdown"] * 3,
        reward_model=[truth] * 3,
        extra_info=[{}] * 3,
    )
    # Right, formatted but wrong (the experiment's format_score), unformatted.
    assert scores == [1.0, 0.1, 0.0]


def test_data_flags_are_the_quickstarts(modules: tuple[ModuleType, ModuleType]) -> None:
    bench, _ = modules
    script = (ROOT / "scripts/quickstart.sh").read_text()
    line = next(x for x in script.splitlines() if x.startswith("DATA_ARGS=("))
    data_args = shlex.split(line.removeprefix("DATA_ARGS=(").removesuffix(")"))
    assert list(bench.verl_bench.QUICKSTART_DATA[: len(data_args)]) == data_args
    sizes = bench.verl_bench.QUICKSTART_DATA[len(data_args) :]
    assert "--train_size 1024" in script and sizes[:2] == ("--train_size", "1024")
    assert "EVAL_PROMPTS=96" in script and sizes[2:] == ("--test_size", "96")


def test_trl_grpo_config_accepts_the_arguments(modules: tuple[ModuleType, ModuleType]) -> None:
    bench, _ = modules
    python = bench.trl_env.env_dir() / "bin/python"
    if not bench.trl_env.built():
        pytest.skip("TRL's environment is not built (benchmarks/trl_env.py builds it)")
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from trl import GRPOConfig;"
        "from trl_grpo_step import grpo_config_kwargs;"
        "k = dict(json.load(sys.stdin), micro_batch=40);"
        "c = GRPOConfig(**grpo_config_kwargs(k, '/tmp/trl-config-check', 3));"
        "print(c.generation_batch_size, c.steps_per_generation, c.loss_type, c.beta)"
    )
    knobs = json.dumps(bench.experiment_knobs(compose(EXPERIMENT)))
    done = subprocess.run(
        [str(python), "-c", code], input=knobs, capture_output=True, text=True, cwd=ROOT,
        timeout=180, env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # One generation of all 240 completions per optimizer step (six micro batches of 40): TRL
    # then computes no old log probs, as the experiment takes the rollout's; no KL, beta 0.
    assert done.stdout.split() == ["240", "6", "dapo", "0.0"]
