"""The objective presets (configs/objective/, ``objective=NAME``): each composes with every
experiment and passes verl's own checks, sets what its source says, and leaves grpo as it was."""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest
from omegaconf import OmegaConf

from rlvr.config.batching import batching
from rlvr.config.compose import (
    CONFIG_DIR,
    DEFAULT_OBJECTIVE,
    compose,
    experiments,
    objective_keys,
    objectives,
    pinned_objective_keys,
    validate,
)

PRESETS = ("dapo", "dr_grpo", "grpo", "gspo", "reinforce_nanochat", "tuft_is")
# Knobs only some presets set: the dapo manager's settings.
PRESET_SPECIFIC = {"reward_model.reward_kwargs"}


def test_the_presets_and_the_default() -> None:
    assert tuple(objectives()) == PRESETS
    assert DEFAULT_OBJECTIVE == "grpo"
    defaults = OmegaConf.load(CONFIG_DIR / "grpo.yaml").defaults
    assert {"objective": "grpo"} in [
        OmegaConf.to_container(d) for d in defaults if not isinstance(d, str)
    ]


@pytest.mark.parametrize("objective", PRESETS)
@pytest.mark.parametrize("experiment", experiments())
def test_every_preset_composes_with_every_experiment(experiment: str, objective: str) -> None:
    config = compose(experiment, [f"objective={objective}"])
    validate(config)
    # no preset changes how many optimizer steps the experiment takes a batch: the experiment
    # file states that (test_updates_per_batch_of_each_experiment)
    assert batching(config).updates_per_batch == batching(compose(experiment)).updates_per_batch
    assert config.actor_rollout_ref.actor.ppo_epochs == 1


@pytest.mark.parametrize("experiment", experiments())
def test_updates_per_batch_of_each_experiment(experiment: str) -> None:
    """One mini batch of the whole batch (verl then sets old_log_prob = log_prob), two on the
    CPU recipe (configs/countdown_smollm2_cpu.yaml); never one larger than the batch, which
    shrinks the gradient under dynamic batching (rlvr/config/batching.py)."""
    config = compose(experiment)
    updates = 2 if experiment == "countdown_smollm2_cpu" else 1
    assert batching(config).updates_per_batch == updates
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size * updates == (
        config.data.train_batch_size
    )


def test_grpo_is_the_default_and_what_grpo_yaml_held() -> None:
    """objective=grpo changes nothing; the values are the ones grpo.yaml set before the move (the
    full before/after comparison of every experiment is in docs/OBJECTIVES.md)."""
    for experiment in experiments():
        default = OmegaConf.to_container(compose(experiment), resolve=True)
        explicit = OmegaConf.to_container(compose(experiment, ["objective=grpo"]), resolve=True)
        assert default == explicit, experiment
    config = compose("countdown_qwen3_4b")
    actor = config.actor_rollout_ref.actor
    assert (config.algorithm.adv_estimator, config.algorithm.norm_adv_by_std_in_grpo) == (
        "grpo",
        True,
    )
    assert (actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (
        True,
        0.001,
        "low_var_kl",
    )
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (
        0.2,
        0.2,
        "token-mean",
    )
    assert config.reward_model.reward_manager == "naive"
    assert config.actor_rollout_ref.rollout.temperature == 1.0


def test_every_preset_sets_the_same_knobs() -> None:
    """Switching presets replaces the whole objective: none leaves a knob to another's value."""
    common = objective_keys("grpo")
    for objective in PRESETS:
        general = {
            key
            for key in objective_keys(objective)
            if not any(key == s or key.startswith(f"{s}.") for s in PRESET_SPECIFIC)
        }
        assert general == common, objective


def test_experiment_pins_win_over_the_preset() -> None:
    """countdown_smollm2_cpu drops zero-spread groups (grpo_drop_constant, GRPO's advantages)
    and runs without the KL loss its figures were measured without: every preset keeps both (an
    explicit override changes them)."""
    # (the KL weight is no preset's: every experiment states its own kl_loss_coef)
    assert pinned_objective_keys("countdown_smollm2_cpu", "reinforce_nanochat") == [
        "actor_rollout_ref.actor.use_kl_loss",
        "algorithm.adv_estimator",
    ]
    assert pinned_objective_keys("countdown_qwen3_4b", "dapo") == []
    for objective in PRESETS:
        config = compose("countdown_smollm2_cpu", [f"objective={objective}"])
        assert config.algorithm.adv_estimator == "grpo_drop_constant"
    config = compose(
        "countdown_smollm2_cpu", ["objective=reinforce_nanochat", "algorithm.adv_estimator=grpo"]
    )
    assert config.algorithm.adv_estimator == "grpo"


def test_dr_grpo() -> None:
    config = compose("countdown_qwen3_4b", ["objective=dr_grpo"])
    assert config.algorithm.norm_adv_by_std_in_grpo is False
    assert config.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-sum-norm"
    assert config.actor_rollout_ref.actor.use_kl_loss is False


@pytest.mark.parametrize("experiment", experiments())
def test_dapo_overlong_buffer_is_the_last_fifth_of_the_gpu_budget(experiment: str) -> None:
    """objective/dapo.yaml's plain buffer (204) is 1024 // 5, GSM8K's GPU response budget;
    Countdown's 2048 gets pre-flight's note (409), a run sets its own (pre-flight refuses one that
    does not fit)."""
    config = compose(experiment, ["objective=dapo"])
    actor = config.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    assert actor.loss_agg_mode == "token-mean" and not actor.use_kl_loss
    assert not config.algorithm.use_kl_in_reward
    kwargs = config.reward_model.reward_kwargs
    assert kwargs.max_resp_len == config.data.max_response_length
    assert kwargs.overlong_buffer_cfg.len == 204
    if not experiment.endswith("_cpu"):
        assert config.data.max_response_length == (2048 if "countdown" in experiment else 1024)


def test_reinforce_nanochat() -> None:
    for experiment in experiments():
        config = compose(experiment, ["objective=reinforce_nanochat"])
        actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
        # the experiment's own updates per batch (test_every_preset_composes_with_every_
        # experiment); its comparison points take one (test_reinforce_points_update_once_a_batch)
        assert actor.policy_loss.loss_mode == "gpg"  # -log_prob * A: no ratio, no clip
        assert not actor.use_kl_loss and not config.algorithm.norm_adv_by_std_in_grpo
        assert rollout.top_k == 50
    assert (
        compose(
            "countdown_qwen3_4b", ["objective=reinforce_nanochat"]
        ).actor_rollout_ref.rollout.temperature
        == 1.0
    )
    scaled = compose(
        "countdown_qwen3_4b", ["objective=reinforce_nanochat", "data.train_batch_size=128"]
    )
    assert scaled.actor_rollout_ref.actor.ppo_mini_batch_size == 128


def test_tuft_is_clip_never_binds() -> None:
    actor = compose("countdown_qwen3_4b", ["objective=tuft_is"]).actor_rollout_ref.actor
    # verl clamps the log-ratio to [-20, 20]: the ratio lies in [e^-20, e^20]
    assert 1 - actor.clip_ratio_low <= 0
    assert 1 + actor.clip_ratio_high >= math.exp(20) and actor.clip_ratio_c >= math.exp(20)
    assert actor.policy_loss.loss_mode == "vanilla" and not actor.use_kl_loss


def test_tuft_is_loss_is_unclipped_importance_sampling() -> None:
    """verl's own vanilla loss with the preset's ratios equals -ratio * A, however far the ratio."""
    import torch
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.utils.config import omega_conf_to_dataclass

    config = compose("countdown_cpu", ["objective=tuft_is"])
    OmegaConf.resolve(config)
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    old = torch.zeros(4, 3)
    new = torch.tensor([[3.0, -3.0, 0.5]] * 4)
    advantages = torch.tensor([[1.0] * 3, [-1.0] * 3, [2.0] * 3, [-0.5] * 3])
    mask = torch.ones(4, 3)
    loss, metrics = compute_policy_loss_vanilla(old, new, advantages, mask, "token-mean", actor)
    expected = (-(new - old).exp() * advantages).mean()
    assert torch.allclose(loss, expected)
    assert metrics["actor/pg_clipfrac"] == 0 and metrics["actor/pg_clipfrac_lower"] == 0


@pytest.mark.parametrize("experiment", experiments())
def test_gspo(experiment: str) -> None:
    """The paper's clip range (arXiv 2507.18071, Sec. 5.1) and verl's gspo loss, no KL, on every
    experiment; one mini batch per step like every preset (the paper's four: the command line)."""
    config = compose(experiment, ["objective=gspo"])
    actor = config.actor_rollout_ref.actor
    assert actor.policy_loss.loss_mode == "gspo"
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (3e-4, 4e-4)
    assert actor.loss_agg_mode == "seq-mean-token-mean"
    assert not actor.use_kl_loss and not config.algorithm.use_kl_in_reward
    assert config.algorithm.norm_adv_by_std_in_grpo
    assert config.reward_model.reward_manager == "naive"


def _gspo_loss(old: Any, new: Any, advantages: Any, mask: Any) -> tuple[Any, dict[str, float]]:
    """verl's own loss for the preset's loss_mode, with the preset's composed actor config."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    config = compose("countdown_cpu", ["objective=gspo"])
    OmegaConf.resolve(config)
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    return loss_fn(old, new, advantages, mask, actor.loss_agg_mode, actor)


def test_gspo_clips_whole_responses_by_their_geometric_mean_ratio() -> None:
    """s_i = exp(mean of the response's token log-ratios) is clipped to [1 - 3e-4, 1 + 4e-4]:
    all of a response's tokens are clipped or none, whatever each token's own ratio; the loss is
    the mean over responses of -min(s_i A_i, clip(s_i) A_i) (the paper's eq. 5)."""
    import torch

    # token log-ratios; row lengths 3, 2, 3, 1 (mask)
    log_ratio = torch.tensor(
        [
            [1e-3, -5e-4, 2e-4],  # mean 2.3e-4: inside, though the first token alone is not
            [6e-4, 6e-4, 0.0],  # mean 6e-4 > 4e-4 with A > 0: clipped
            [-1e-3, 1e-4, -1e-4],  # mean -3.3e-4 < -3e-4 with A < 0: clipped
            [5e-3, 0.0, 0.0],  # 5e-3 above, but A < 0: the clip does not bind
        ]
    )
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    advantages = torch.tensor([[1.0] * 3, [2.0] * 3, [-1.0] * 3, [-0.5] * 3])
    old = torch.full((4, 3), -2.0)
    loss, metrics = _gspo_loss(old, old + log_ratio, advantages, mask)

    lengths = mask.sum(-1)
    s = ((log_ratio * mask).sum(-1) / lengths).exp()
    a = advantages[:, 0]
    per_response = torch.maximum(-a * s, -a * s.clamp(1 - 3e-4, 1 + 4e-4))
    assert torch.allclose(loss, per_response.mean())  # responses weigh alike, not tokens
    clipped_tokens = lengths[1] + lengths[2]  # rows 2 and 3, all their tokens
    assert metrics["actor/pg_clipfrac"] == pytest.approx(float(clipped_tokens / lengths.sum()))
    assert metrics["actor/pg_clipfrac_lower"] == 0


def test_gspo_on_policy_gradient_weighs_responses_alike() -> None:
    """With one mini batch verl passes old = current log probs: s_i = 1 and nothing clips, and
    each token's gradient is -A_i / (G |y_i|): every response counts once, whatever its length
    (token-mean would give each token -A_i / tokens)."""
    import torch

    log_prob = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, -2.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0]])
    advantages = torch.tensor([[1.0] * 3, [-1.0] * 3])
    loss, metrics = _gspo_loss(log_prob.detach(), log_prob, advantages, mask)
    loss.backward()
    assert log_prob.grad is not None
    expected = -advantages / (2 * mask.sum(-1, keepdim=True)) * mask
    assert torch.allclose(log_prob.grad, expected)
    assert metrics["actor/pg_clipfrac"] == 0 and metrics["actor/ppo_kl"] == 0


def _batch(tokenizer: Any, responses: list[str], width: int, ground_truth: dict[str, Any]) -> Any:
    """A DataProto as verl's reward managers get it: left-padded prompts, right-padded responses."""
    import numpy as np
    import torch
    from verl import DataProto

    prompt = tokenizer("Q:", add_special_tokens=False)["input_ids"]
    rows, masks = [], []
    for text in responses:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:width]
        rows.append(ids + [tokenizer.pad_token_id] * (width - len(ids)))
        masks.append([1] * len(prompt) + [1] * len(ids) + [0] * (width - len(ids)))
    n = len(responses)
    return DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt] * n),
            "responses": torch.tensor(rows),
            "attention_mask": torch.tensor(masks),
        },
        non_tensors={
            "data_source": np.array(["countdown"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": ground_truth}] * n, dtype=object),
            "extra_info": np.array([{} for _ in range(n)], dtype=object),
        },
    )


def test_dapo_manager_calls_our_reward_with_its_kwargs(
    tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under reward_manager=dapo verl still loads custom_reward_function with its reward_kwargs
    (shaping turned on here) and adds the overlong penalty on top."""
    from verl.trainer.ppo.reward import load_reward_manager

    monkeypatch.delitem(sys.modules, "custom_module", raising=False)  # verl caches the module
    config = compose(
        "countdown_smollm2_cpu",
        [
            "objective=dapo",
            "data.max_response_length=40",
            "reward_model.reward_kwargs.overlong_buffer_cfg.len=8",  # 40 // 5
            "custom_reward_function.reward_kwargs.shaping=true",
        ],
    )
    OmegaConf.resolve(config)
    manager = load_reward_manager(
        config, tiny_tokenizer, num_examine=0, **config.reward_model.get("reward_kwargs", {})
    )
    assert type(manager).__name__ == "DAPORewardManager"
    truth = {"target": 9, "numbers": [1, 2, 3]}
    short_wrong = "<answer>(1+2)+3</answer>"  # valid, 6 off: shaped credit only with shaping
    long_right = "x " * 14 + "<answer>(1+2)*3</answer>"  # correct but in the buffer
    batch = _batch(tiny_tokenizer, [short_wrong, long_right], 40, truth)
    result = manager(batch, return_dict=True)
    rewards = result["reward_tensor"].sum(dim=-1).tolist()
    sys.path.insert(0, str(CONFIG_DIR.parent / "rewards"))
    try:
        from countdown import compute_score
    finally:
        sys.path.pop(0)
    kwargs = dict(config.custom_reward_function.reward_kwargs)
    assert kwargs["shaping"] is True
    expected = compute_score("countdown", short_wrong, truth, **kwargs)["score"]
    assert 0.1 < expected < 1.0  # shaped: the kwargs reached the reward
    assert rewards[0] == pytest.approx(expected)
    lengths = batch.batch["attention_mask"][:, batch.batch["prompts"].shape[-1] :].sum(-1)
    buffer = config.reward_model.reward_kwargs.overlong_buffer_cfg.len
    exceed = int(lengths[1]) - (40 - buffer)
    assert exceed > 0
    assert rewards[1] == pytest.approx(1.0 - exceed / buffer)
    monkeypatch.delitem(sys.modules, "custom_module", raising=False)
