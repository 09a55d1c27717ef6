"""The recipes' actor (rlvr/train/token_mean.py) against computations outside verl: its gradient
and logged losses are the token mean over the mini batch's kept tokens whatever the micro
batches, a micro batch of dropped rows does not fail, and a batch without signal is skipped.
Each test runs verl 0.6.1's own ``update_policy`` and has verl's own actor as negative control."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlvr.config.batching import batching
from rlvr.config.compose import compose
from rlvr.rehearsal import grad_scale
from rlvr.train.token_mean import SKIPPED_KEY, TokenMeanActor, micro_batches, token_weights

PROMPT, WIDTH = grad_scale.PROMPT_TOKENS, 24  # prompt tokens, response width
KL_COEF = 0.1


@pytest.fixture(scope="module", autouse=True)
def process_group() -> Iterator[None]:
    import torch.distributed as dist

    ours = grad_scale._single_process_group()
    yield
    if ours:
        dist.destroy_process_group()


def _rows(lengths: list[int], keep: list[int], seed: int, vocab: int) -> Any:
    """Right-padded rows: a prompt, then responses of ``lengths``; rows with keep 0 dropped
    (advantage 0, zero ``response_mask``, as ``grpo_drop_constant`` leaves them)."""
    import torch
    from verl import DataProto

    gen = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    input_ids = torch.randint(3, vocab, (rows, PROMPT + WIDTH), generator=gen)
    attention = torch.zeros(rows, PROMPT + WIDTH, dtype=torch.long)
    for row, length in enumerate(lengths):
        attention[row, : PROMPT + length] = 1
    kept = torch.tensor(keep, dtype=torch.float32).unsqueeze(-1)
    advantages = (torch.randn(rows, 1, generator=gen) + 0.5) * kept
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention,
        "position_ids": torch.arange(PROMPT + WIDTH).expand(rows, -1).contiguous(),
        "responses": input_ids[:, PROMPT:].contiguous(),
        "response_mask": attention[:, PROMPT:].float() * kept,
        "advantages": advantages.expand(rows, WIDTH).contiguous(),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def _reference(model: Any, batch: Any) -> tuple[float, float, list[Any]]:
    """Outside verl: the token means over the kept tokens of ``-A * ratio`` (on policy) and of
    verl's ``low_var_kl`` to the reference, and the gradient of their sum."""
    import torch

    log_probs = grad_scale._log_probs(model, batch)
    kept = batch["response_mask"]
    tokens = kept.sum()
    ratio = torch.exp(log_probs - log_probs.detach())
    pg = -(batch["advantages"] * ratio * kept).sum() / tokens
    delta = batch["ref_log_prob"] - log_probs
    kl = torch.clamp(torch.exp(delta) - delta - 1, -10, 10)
    kl_mean = (kl * kept).sum() / tokens
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(pg + KL_COEF * kl_mean, params)
    return pg.item(), kl_mean.item(), list(grads)


def _actor_config(rows: int, token_cap: int | None, micro: int | None = None) -> Any:
    """countdown_smollm2_cpu's actor section (token-mean, dynamic micro batches) with a KL loss,
    SGD-sized clipping out of the way, and the micro batches this test wants."""
    config = grad_scale._actor_config(compose("countdown_smollm2_cpu"), rows, rows)
    fields: dict[str, Any] = {
        "use_kl_loss": True,
        "kl_loss_coef": KL_COEF,
        "kl_loss_type": "low_var_kl",
        "grad_clip": 1e9,
    }
    if micro is not None:
        fields |= {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": micro}
    else:
        fields |= {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": token_cap}
    return dataclasses.replace(config, **fields)


def _update(
    actor_class: type, model_dir: Path, data: Any, config: Any
) -> tuple[dict[str, Any], list[Any], Any]:
    """One update with SGD at lr 1: verl's metrics, minus the weights' change (the gradient the
    update applied), and the model (at its weights before the update) for the reference."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    reference_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        data.batch["old_log_probs"] = grad_scale._log_probs(model, data.batch)
        data.batch["ref_log_prob"] = data.batch["old_log_probs"] + 0.3 * torch.randn_like(
            data.batch["old_log_probs"]
        )
        data.batch["rollout_log_probs"] = data.batch["old_log_probs"].clone()
    before = [p.detach().clone() for p in model.parameters()]
    with contextlib.redirect_stdout(io.StringIO()):
        actor = actor_class(config, model, torch.optim.SGD(model.parameters(), lr=1.0))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="In CPU autocast", category=UserWarning)
        metrics = actor.update_policy(data)
    applied = [b - p.detach() for b, p in zip(before, model.parameters(), strict=True)]
    return metrics, applied, reference_model


def _relative_error(got: list[Any], want: list[Any]) -> float:
    diff = sum(float(((g - w).double() ** 2).sum()) for g, w in zip(got, want, strict=True))
    norm = sum(float((w.double() ** 2).sum()) for w in want)
    return math.sqrt(diff / norm)


LENGTHS = [24, 3, 20, 5, 17, 2, 24, 9, 12, 4, 22, 6]


KEEP = [1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1]  # two of five groups of rows dropped


class EveryRowActor(TokenMeanActor):
    """The recipes' actor as it runs where dropped rows must stay (several ranks or mini
    batches): each dropped row in the update at weight ``EPS``."""

    def rows_to_update(self, data: Any) -> Any:
        return data

    def mini_batches_alone(self, data: Any) -> list[Any]:
        return []  # verl's own loop over the mini batches


@pytest.mark.parametrize("micro", ["one", "dynamic", "fixed"])
def test_gradient_and_logged_losses_are_the_kept_token_mean(micro: str, tiny_model_dir: Path):
    """1 micro batch, >= 3 dynamic ones of unequal token counts, and fixed ones of 3 rows: the
    same gradient and logged losses as the token mean over the kept tokens, within 1%, with the
    dropped rows left out and with them kept at weight EPS; verl's own actor misses both once
    there are several micro batches."""
    tokens = sum(PROMPT + n for n in LENGTHS)
    cap = {"one": tokens, "dynamic": tokens // 4, "fixed": None}[micro]
    config = _actor_config(len(LENGTHS), cap, 3 if micro == "fixed" else None)
    results = {}
    for actor_class in (TokenMeanActor, EveryRowActor, grad_scale_actor()):
        data = _rows(LENGTHS, KEEP, seed=1, vocab=_vocab(tiny_model_dir))
        metrics, applied, model = _update(actor_class, tiny_model_dir, data, config)
        pg, kl, grads = _reference(model, data.batch)
        results[actor_class.__name__] = (
            _relative_error(applied, grads),
            abs(metrics["actor/pg_loss"][0] / pg - 1),
            abs(metrics["actor/kl_loss"][0] / kl - 1),
        )
        cut = micro_batches(SimpleNamespace(config=config, ulysses_sequence_parallel_size=1), data)
    ours, every_row = results["TokenMeanActor"], results["EveryRowActor"]
    assert max(ours) < 0.01, ours
    assert max(every_row) < 0.01, every_row
    verls = results["DataParallelPPOActor"]
    if micro == "one":
        assert len(cut[0]) == 1
    else:
        assert len(cut[0]) >= 3, cut
        assert min(verls) > 0.05, verls  # negative control: gradient and logs all off


def _counting_forwards(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each micro batch verl's actor runs a forward on, appended as it runs them."""
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    seen: list[int] = []
    forward = DataParallelPPOActor._forward_micro_batch

    def counting(self: Any, micro_batch: Any, temperature: Any, calculate_entropy: bool = False):
        seen.append(int(micro_batch["responses"].shape[0]))
        return forward(self, micro_batch, temperature, calculate_entropy)

    monkeypatch.setattr(DataParallelPPOActor, "_forward_micro_batch", counting)
    return seen


def test_dropped_rows_are_left_out_of_the_forward(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rank, one mini batch: the update's forwards see the 8 kept rows of 12, and the weights
    move as with every row in (each dropped one at weight EPS) to float rounding; negative
    control: that actor's forwards see all 12."""
    seen = _counting_forwards(monkeypatch)
    config = _actor_config(len(LENGTHS), None, micro=3)
    rows, moves = {}, {}
    for actor_class in (TokenMeanActor, EveryRowActor):
        seen.clear()
        data = _rows(LENGTHS, KEEP, seed=4, vocab=_vocab(tiny_model_dir))
        _, moves[actor_class.__name__], _ = _update(actor_class, tiny_model_dir, data, config)
        rows[actor_class.__name__] = sum(seen)
    assert rows == {"TokenMeanActor": sum(KEEP), "EveryRowActor": len(KEEP)}
    assert _relative_error(moves["TokenMeanActor"], moves["EveryRowActor"]) < 1e-4


def test_dropped_rows_stay_where_another_rank_or_mini_batch_needs_them(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows are left out only on one rank (another rank's micro batches would not match), in one
    mini batch (the optimizer steps would move), and when some but not all rows are dropped."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.train import token_mean

    def actor(mini_rows: int) -> TokenMeanActor:
        config = dataclasses.replace(
            _actor_config(len(LENGTHS), None, micro=3), ppo_mini_batch_size=mini_rows
        )
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        with contextlib.redirect_stdout(io.StringIO()):
            return TokenMeanActor(config, model, torch.optim.SGD(model.parameters(), lr=1.0))

    vocab = _vocab(tiny_model_dir)
    data = _rows(LENGTHS, KEEP, seed=5, vocab=vocab)
    one_mini_batch = actor(len(LENGTHS))
    assert len(one_mini_batch.rows_to_update(data)) == sum(KEEP)
    assert actor(len(LENGTHS) // 2).rows_to_update(data) is data
    for keep in ([1] * len(LENGTHS), [0] * len(LENGTHS)):
        rows = _rows(LENGTHS, keep, seed=5, vocab=vocab)
        assert one_mini_batch.rows_to_update(rows) is rows
    monkeypatch.setattr(token_mean, "_data_parallel_size", lambda: 2)
    assert one_mini_batch.rows_to_update(data) is data


def test_each_mini_batch_drops_its_rows_and_steps_as_in_verls_loop(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rank, two mini batches of 6 rows: the update's forwards see the 8 kept rows of 12, and
    the weights after its two optimizer steps are those of verl's own loop over the two with
    every row in, to float rounding. Negative control: a plain call per mini batch, where verl's
    one-mini-batch shortcut takes the second one's ratio against the weights after the first
    step instead of the rollout's, moves them otherwise."""
    import torch

    seen = _counting_forwards(monkeypatch)
    config = dataclasses.replace(
        _actor_config(len(LENGTHS), None, micro=3), ppo_mini_batch_size=len(LENGTHS) // 2
    )

    class OneCallAMiniBatch(TokenMeanActor):
        def update_policy(self, data: Any) -> dict[str, Any]:
            halves = data.split(self.config.ppo_mini_batch_size)
            return [TokenMeanActor.update_policy(self, half) for half in halves][-1]

    rows, moves, steps = {}, {}, {}
    for actor_class in (TokenMeanActor, EveryRowActor, OneCallAMiniBatch):
        seen.clear()
        data = _rows(LENGTHS, KEEP, seed=6, vocab=_vocab(tiny_model_dir))
        metrics, moves[actor_class.__name__], _ = _update(actor_class, tiny_model_dir, data, config)
        rows[actor_class.__name__] = sum(seen)
        steps[actor_class.__name__] = len(metrics["actor/grad_norm"])
    assert rows == {"TokenMeanActor": 8, "EveryRowActor": 12, "OneCallAMiniBatch": 8}, rows
    assert steps["TokenMeanActor"] == steps["EveryRowActor"] == 2, steps
    assert _relative_error(moves["TokenMeanActor"], moves["EveryRowActor"]) < 1e-4
    assert _relative_error(moves["OneCallAMiniBatch"], moves["EveryRowActor"]) > 0.05
    assert not torch.equal(moves["TokenMeanActor"][0], torch.zeros_like(moves["TokenMeanActor"][0]))


def grad_scale_actor() -> type:
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    return DataParallelPPOActor


def _vocab(model_dir: Path) -> int:
    import json

    return int(json.loads((model_dir / "config.json").read_text())["vocab_size"])


def test_a_micro_batch_of_dropped_rows_only_does_not_fail(tiny_model_dir: Path) -> None:
    """1 of 6 groups of 2 kept: verl's rollout_corr metrics assert a micro batch has a valid
    token, which verl's own actor fails on the first micro batch (rows 0-1, dropped)."""
    keep = [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    config = _actor_config(len(LENGTHS), None, micro=2)
    data = _rows(LENGTHS, keep, seed=2, vocab=_vocab(tiny_model_dir))
    with pytest.raises(AssertionError, match="at least one valid token"):
        _update(grad_scale_actor(), tiny_model_dir, data, config)
    for actor_class in (TokenMeanActor, EveryRowActor):
        data = _rows(LENGTHS, keep, seed=2, vocab=_vocab(tiny_model_dir))
        metrics, applied, model = _update(actor_class, tiny_model_dir, data, config)
        assert _relative_error(applied, _reference(model, data.batch)[2]) < 0.01
        assert metrics[SKIPPED_KEY] == 0.0


def test_a_batch_without_signal_skips_the_update(tiny_model_dir: Path) -> None:
    """Every advantage 0 (no group's rewards differ): no update under grpo_drop_constant, which
    the KL term alone would otherwise drive (negative control: the same batch without the flag
    changes the weights)."""
    config = _actor_config(len(LENGTHS), None, micro=4)
    skipping = type("Skipping", (TokenMeanActor,), {"skip_constant_batches": True})
    for actor_class, moves in ((skipping, False), (TokenMeanActor, True)):
        data = _rows(LENGTHS, [1] * len(LENGTHS), seed=3, vocab=_vocab(tiny_model_dir))
        data.batch["advantages"].zero_()
        metrics, applied, _ = _update(actor_class, tiny_model_dir, data, config)
        assert any(bool(a.abs().max() > 0) for a in applied) is moves
        assert metrics[SKIPPED_KEY] == (0.0 if moves else 1.0)


def _effective_weights(ranks: list[Any], config: Any, ours: bool) -> list[Any]:
    """Each kept token's weight in its mini batch's update (after FSDP averages the ranks), per
    mini batch with kept tokens: verl's split of each rank's rows into ``ppo_mini_batch_size``
    rows (``update_policy``), then its partition of each into micro batches; ``ours``: the
    recipes' weights, else a plain zeroed mask."""
    mini = config.ppo_mini_batch_size
    found = []
    for start in range(0, len(ranks[0]), mini):
        chunk = [data[start : start + mini] for data in ranks]
        if any(bool((data.batch["response_mask"] > 0).any()) for data in chunk):
            found.append(_mini_batch_weights(chunk, config, ours))
    return found


def _mini_batch_weights(ranks: list[Any], config: Any, ours: bool) -> Any:
    """``_effective_weights`` of one mini batch (its rows on each rank)."""
    import torch

    stub = SimpleNamespace(config=config, ulysses_sequence_parallel_size=1)
    masks = [data.batch["response_mask"] for data in ranks]
    kept = float(sum(float((m > 0).sum()) for m in masks))
    found = []
    for data, mask in zip(ranks, masks, strict=True):
        cut, scales = micro_batches(stub, data)
        real = data.batch["attention_mask"][:, -mask.shape[-1] :]
        if ours:
            weights = token_weights(mask, real, cut, scales, kept, len(ranks))
            per_token = [weights[r] * s / mask.shape[-1] for r, s in zip(cut, scales, strict=True)]
        else:  # verl: each micro batch's token mean times its scale
            per_token = [
                mask[r] * s / max(float(mask[r].sum()), 1.0)
                for r, s in zip(cut, scales, strict=True)
            ]
        for rows, values in zip(cut, per_token, strict=True):
            found.append(values[mask[rows] > 0] / len(ranks))
    return torch.cat(found)


SMALL_CPU_BUDGET = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096"
ONE_CPU_MICRO_BATCH = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=131072"
ONE_MINI_BATCH = "actor_rollout_ref.actor.ppo_mini_batch_size=12"


@pytest.mark.parametrize(
    ("experiment", "varied", "overrides", "verl_spreads"),
    [
        ("countdown_qwen3_4b", 8, [], True),
        ("countdown_qwen3_4b", 1, [], True),
        ("gsm8k_qwen2_5_0_5b_1gpu", 2, [], True),
        ("countdown_smollm2_cpu", 1, [SMALL_CPU_BUDGET], True),  # several micro batches
        ("countdown_smollm2_cpu", 1, [], False),  # two mini batches of 6 x 20, one micro each
        ("countdown_smollm2_cpu", 1, [ONE_MINI_BATCH], True),  # 12 x 20 rows: several micro
        ("countdown_smollm2_cpu", 1, [ONE_MINI_BATCH, ONE_CPU_MICRO_BATCH], False),
    ],
)
def test_kept_tokens_weigh_alike_at_the_experiments_shapes(
    experiment: str, varied: int, overrides: list[str], verl_spreads: bool
) -> None:
    """verl's own partition (prepare_dynamic_batch) of each rank's rows at the experiment's
    batch, group size, ranks and token cap, lognormal response lengths, ``varied`` groups kept:
    every kept token weighs 1/K (max/min <= 1.05, sum within 5% of 1); a plain zeroed mask (the
    old estimator under verl's weighting) does not where verl cuts several micro batches."""
    import torch

    composed = compose(experiment, overrides)
    plan = batching(composed)
    data_config = composed.data
    width = int(data_config.max_response_length)
    gen = torch.Generator().manual_seed(0)
    groups, size = int(data_config.train_batch_size), plan.group_size
    lengths = torch.exp(torch.randn(groups * size, generator=gen) * 0.6 + math.log(width / 4))
    lengths = lengths.clamp(1, width).long()
    prompts = torch.randint(
        int(data_config.max_prompt_length) // 4,
        int(data_config.max_prompt_length),
        (groups * size,),
        generator=gen,
    )
    order = torch.randperm(groups * size, generator=gen).tolist()
    per_rank = len(order) // plan.data_parallel
    ranks = []
    for rank in range(plan.data_parallel):
        rows = order[rank * per_rank : (rank + 1) * per_rank]
        ranks.append(_rank_rows(rows, lengths, prompts, width, size, varied))
    config = SimpleNamespace(
        ppo_mini_batch_size=plan.mini_rows_per_rank,
        use_dynamic_bsz=bool(composed.actor_rollout_ref.actor.use_dynamic_bsz),
        ppo_max_token_len_per_gpu=int(composed.actor_rollout_ref.actor.ppo_max_token_len_per_gpu),
        ppo_micro_batch_size_per_gpu=composed.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu,
    )
    for weights in _effective_weights(ranks, config, ours=True):
        assert float(weights.max() / weights.min()) <= 1.05
        assert float(weights.sum()) == pytest.approx(1.0, rel=0.05)
    spreads = [
        float(old.max() / old.min()) > 1.5 or abs(float(old.sum()) - 1) > 0.05
        for old in _effective_weights(ranks, config, ours=False)
    ]
    assert any(spreads) == verl_spreads


def _rank_rows(
    rows: list[int], lengths: Any, prompts: Any, width: int, size: int, varied: int
) -> Any:
    """One rank's rows (left-padded prompts, right-padded responses) with the rows of the first
    ``varied`` groups kept."""
    import torch
    from verl import DataProto

    prompt_width = int(prompts.max())
    attention = torch.zeros(len(rows), prompt_width + width, dtype=torch.long)
    keep = torch.zeros(len(rows), 1)
    for i, row in enumerate(rows):
        attention[i, prompt_width - int(prompts[row]) : prompt_width + int(lengths[row])] = 1
        keep[i] = 1.0 if row // size < varied else 0.0
    tensors = {
        "input_ids": torch.zeros_like(attention),
        "attention_mask": attention,
        "response_mask": attention[:, prompt_width:].float() * keep,
    }
    return DataProto.from_dict(tensors=tensors)


def test_the_recipes_workers_build_the_token_mean_actor() -> None:
    """RecipeTaskRunner maps the actor role to verl's worker with its init_model still sent to
    every rank (verl's ONE_TO_ALL); the skip flag follows the estimator."""
    from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch
    from verl.trainer.ppo.ray_trainer import Role
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    from rlvr.train.trainer import RecipeTaskRunner

    for experiment, skip in (("countdown_smollm2_cpu", True), ("countdown_qwen3_4b", False)):
        runner = RecipeTaskRunner()
        worker, _ = runner.add_actor_rollout_worker(compose(experiment))
        assert issubclass(worker, ActorRolloutRefWorker)
        assert getattr(worker.init_model, MAGIC_ATTR)["dispatch_mode"] == Dispatch.ONE_TO_ALL
        assert Role.ActorRollout in runner.role_worker_mapping
        built = worker.token_mean_actor
        assert issubclass(built, TokenMeanActor) and built.skip_constant_batches is skip


def test_a_changed_verl_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.train import token_mean

    token_mean.check_verl()
    monkeypatch.setattr(token_mean, "UPDATE_POLICY_LINES", ("loss = policy_loss * 2",))
    with pytest.raises(RuntimeError, match=r"update rlvr/train/token_mean\.py"):
        token_mean.check_verl()


def test_a_worker_dispatched_otherwise_is_refused() -> None:
    from verl.single_controller.base.decorator import Dispatch, register

    from rlvr.train.token_mean import recipe_worker

    class Elsewhere:
        @register(dispatch_mode=Dispatch.ALL_TO_ALL)
        def init_model(self) -> None: ...

    with pytest.raises(RuntimeError, match="ONE_TO_ALL"):
        recipe_worker(Elsewhere, skip_constant_batches=False)


def test_rollout_entropy_is_verls_formula_over_the_callers_mask() -> None:
    """The CPU rollout's entropies, aggregated as verl's old-log-prob pass does, with the mask and
    loss_agg_mode the update was asked for (not the weights it runs verl's update with)."""
    import torch
    from verl import DataProto
    from verl.trainer.ppo.core_algos import agg_loss

    from rlvr.cpu.rollout import ROLLOUT_ENTROPY_KEY
    from rlvr.train.token_mean import rollout_entropy

    entropy, mask = torch.rand(3, 5), (torch.rand(3, 5) > 0.3).float()
    data = DataProto.from_dict({ROLLOUT_ENTROPY_KEY: entropy, "response_mask": mask})
    metrics: dict[str, Any] = {"actor/pg_loss": [0.5]}
    rollout_entropy(data, "token-mean", metrics)
    assert metrics["actor/entropy"] == pytest.approx(agg_loss(entropy, mask, "token-mean").item())
    verls = {"actor/entropy": 0.25}
    rollout_entropy(data, "token-mean", verls)
    assert verls == {"actor/entropy": 0.25}  # verl's own value stays
