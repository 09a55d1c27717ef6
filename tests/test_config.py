"""Every experiment composes on verl's ppo_trainer and passes verl's own checks, with the
settings its recipe was tuned with (who owns which key: tests/test_recipe_files.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from config_files import GPU_EXPERIMENTS, choices, overlay
from omegaconf import DictConfig, OmegaConf

from rlvr.config.compose import CONFIG_DIR, compose, experiments, validate

GROUPS = ("task", "base_model", "hardware", "adapter", "objective")
# objective/ is picked by grpo.yaml (default grpo, objective=NAME to change); base_model/ is a
# command-line preset only (each experiment lists `base_model: null` after _self_).
EXPERIMENT_GROUPS = ("task", "hardware", "adapter")


@pytest.mark.parametrize("experiment", experiments())
def test_experiment_picks_one_overlay_per_group(experiment: str) -> None:
    defaults = OmegaConf.load(CONFIG_DIR / f"{experiment}.yaml").defaults
    # Precedence (docs/TRAINING.md): the experiment's own values win over the overlays before
    # _self_, and a base_model=NAME preset from the command line wins over its model path.
    assert defaults[0] == "grpo" and list(defaults[-2:]) == ["_self_", {"base_model": None}]
    picked = choices(experiment)
    assert sorted(picked) == sorted(EXPERIMENT_GROUPS)
    for group, name in picked.items():
        assert (CONFIG_DIR / group / f"{name}.yaml").is_file(), (group, name)


@pytest.mark.parametrize("experiment", experiments())
def test_composes_and_passes_verl_validation(experiment: str, tmp_path: Path) -> None:
    config = compose(experiment, root=tmp_path)
    # the world size is the hardware overlay's alone: nothing else changes it
    hardware = overlay(f"hardware/{choices(experiment)['hardware']}").trainer
    world = hardware.n_gpus_per_node * hardware.nnodes
    assert world >= 1
    assert config.trainer.n_gpus_per_node * config.trainer.nnodes == world
    validate(config)
    assert config.algorithm.adv_estimator in ("grpo", "grpo_drop_constant")
    # LoRA writes no PEFT-keyed hf_model; the launcher merges the adapter instead
    lora = config.actor_rollout_ref.model.get("lora_rank", 0) > 0
    assert ("hf_model" in config.actor_rollout_ref.actor.checkpoint.save_contents) != lora
    # every path hangs off the one root, so a Ray worker's cwd never matters
    for path in (
        config.data.train_files,
        config.data.val_files,
        config.custom_reward_function.path,
        config.trainer.default_local_dir,
    ):
        assert Path(path).is_absolute() and str(path).startswith(str(tmp_path.resolve()))


def test_layered_summon_is_the_hardwares_and_only_for_lora() -> None:
    # verl 0.6.1 also drops vLLM to sleep level 1 when it is set, so full fine-tuning never has it
    assert compose("countdown_qwen3_4b_lora").actor_rollout_ref.rollout.layered_summon is True
    assert compose("countdown_qwen3_4b").actor_rollout_ref.rollout.layered_summon is False
    assert (
        compose("countdown_cpu", ["adapter=lora32"]).actor_rollout_ref.rollout.layered_summon
        is False
    )


def test_seed_settings() -> None:
    countdown = compose("countdown_qwen3_4b")
    assert countdown.actor_rollout_ref.actor.optim.lr == 2e-6
    assert countdown.actor_rollout_ref.rollout.n == 16
    assert countdown.actor_rollout_ref.actor.kl_loss_coef == 0.001
    assert compose("countdown_smollm2_cpu").actor_rollout_ref.actor.kl_loss_coef == 0.01
    assert countdown.data.train_batch_size == 64
    assert countdown.data.apply_chat_template_kwargs.enable_thinking is False
    gsm8k = compose("gsm8k_qwen2_5_3b")
    assert (gsm8k.actor_rollout_ref.actor.optim.lr, gsm8k.data.train_batch_size) == (1e-6, 32)
    assert gsm8k.data.val_files.endswith("gsm8k/val.parquet")
    lora = compose("countdown_qwen3_4b_lora")
    assert (lora.actor_rollout_ref.model.lora_rank, lora.actor_rollout_ref.actor.optim.lr) == (
        32,
        1e-4,
    )
    assert compose("countdown_qwen3_4b_2nodes").trainer.nnodes == 2


def test_each_experiment_keeps_the_schedule_its_learning_rate_was_found_with() -> None:
    """Full fine-tuning at verl-study's lrs takes its cosine schedule with 10% warmup; LoRA (the
    TuFT and tinker-cookbook lrs) and the 0.5B model (verl's PPO baseline) ran at a constant lr,
    and at LoRA scale alpha/rank = 1. Weight decay is verl's 0.01 everywhere."""
    schedules = {}
    for experiment in GPU_EXPERIMENTS:
        config = compose(experiment)
        optim = config.actor_rollout_ref.actor.optim
        assert optim.weight_decay == 0.01
        schedules[experiment] = (optim.lr_scheduler_type, optim.lr_warmup_steps_ratio)
        if config.actor_rollout_ref.model.lora_rank:
            assert (
                config.actor_rollout_ref.model.lora_alpha
                == config.actor_rollout_ref.model.lora_rank
            )
    cosine = {"countdown_qwen3_4b", "countdown_qwen3_4b_2nodes", "gsm8k_qwen2_5_3b"}
    assert {e for e, s in schedules.items() if s == ("cosine", 0.1)} == cosine
    assert {s for e, s in schedules.items() if e not in cosine} == {("constant", 0.0)}
    assert compose("countdown_smollm2_cpu").actor_rollout_ref.actor.optim.lr_scheduler_type == (
        "constant"
    )


def test_verl_checks_catch_a_bad_gpu_count() -> None:
    # (with dynamic batching verl checks less: the rehearsal runs the real world size instead)
    config = compose(
        "countdown_qwen3_4b",
        ["trainer.n_gpus_per_node=7", "actor_rollout_ref.actor.use_dynamic_bsz=false"],
    )
    with pytest.raises((AssertionError, ValueError)):
        validate(config)


def test_overrides_pass_through() -> None:
    config = compose("countdown_cpu", ["base_model=smollm2_135m", "trainer.total_training_steps=5"])
    assert config.actor_rollout_ref.model.path.endswith("artifacts/models/smollm2-135m-instruct")
    assert config.trainer.total_training_steps == 5


def test_root_is_required() -> None:
    raw = OmegaConf.load(CONFIG_DIR / "grpo.yaml")
    assert OmegaConf.is_missing(raw.paths, "root")


def test_overlay_groups_do_not_shadow_verl_groups() -> None:
    import verl.trainer.config as verl_config

    verl_groups = {p.name for p in Path(verl_config.__file__).parent.iterdir() if p.is_dir()}
    ours = {p.name for p in CONFIG_DIR.iterdir() if p.is_dir()}
    # sft/: the SFT experiments, a config root of their own (rlvr/train/sft_config.py)
    assert ours == {*GROUPS, "rehearsal", "attention", "sft"}
    assert not ours & verl_groups


@pytest.mark.parametrize("experiment", GPU_EXPERIMENTS)
def test_gpu_experiments_are_finite_and_disk_bounded(experiment: str) -> None:
    """a3b0be1: no step count (hub data -> ~7,600 steps) and every checkpoint kept."""
    config = compose(experiment)
    trainer = config.trainer
    assert trainer.total_training_steps or trainer.total_epochs == 1
    assert 0 < trainer.max_actor_ckpt_to_keep <= 2
    assert trainer.save_freq >= 25


@pytest.mark.parametrize("experiment", GPU_EXPERIMENTS)
def test_gpu_experiments_follow_verls_tuned_settings(experiment: str) -> None:
    config = compose(experiment)
    model = config.actor_rollout_ref
    assert model.actor.use_dynamic_bsz and model.actor.ppo_max_token_len_per_gpu >= 16384
    assert model.rollout.tensor_model_parallel_size == 1
    assert model.actor.strategy == model.ref.strategy == "fsdp2"
    if config.trainer.nnodes > 1:  # shard within a node, replicate across
        assert model.actor.fsdp_config.fsdp_size == config.trainer.n_gpus_per_node
        assert model.ref.fsdp_config.fsdp_size == config.trainer.n_gpus_per_node


def test_rehearsal_overlay_keeps_the_world_size_and_batches() -> None:
    real = compose("countdown_qwen3_4b")
    rehearsed = compose("countdown_qwen3_4b", ["+rehearsal=cpu"])
    for key in (
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
        "data.train_batch_size",
        "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.actor.use_dynamic_bsz",
        "actor_rollout_ref.actor.strategy",
        "actor_rollout_ref.actor.checkpoint.save_contents",
    ):
        assert OmegaConf.select(rehearsed, key) == OmegaConf.select(real, key), key
    assert rehearsed.actor_rollout_ref.rollout.name == "hf"
    assert rehearsed.ray_kwargs.ray_init.runtime_env.env_vars.RLVR_CPU_COMPAT == "1"


def _page_faults_refilling(tunables: str | None) -> int:
    """Minor page faults of a fresh Python process while it fills and frees a 64 MiB block five
    more times after the first, under ``GLIBC_TUNABLES=tunables``."""
    code = (
        "import resource\n"
        "for i in range(6):\n"
        "    block = b'x' * (64 << 20)\n"
        "    del block\n"
        "    if i == 0:\n"
        "        start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)\n"
    )
    env = {"PATH": "/usr/bin:/bin"} | ({"GLIBC_TUNABLES": tunables} if tunables else {})
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_cpu_workers_keep_freed_memory_for_reuse() -> None:
    """hardware/cpu.yaml's allocator setting reaches the Ray workers and does what its comment
    says: a freed large block is reused, not page-faulted in again. Without it (the control)
    glibc maps every such block anew, 16,384 faults each."""
    env_vars = compose("countdown_cpu").ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.RLVR_CPU_COMPAT == "1"  # the rehearsal overlay's, kept beside it
    reused, control = _page_faults_refilling(env_vars.GLIBC_TUNABLES), _page_faults_refilling(None)
    assert reused < 2_000 and control > 40_000, (reused, control)


def test_two_nodes_wait_out_rank_zeros_hf_model_save() -> None:
    """Rank 0 writes the fp32 hf_model alone while 15 ranks wait: verl's 600 s is tripled."""
    assert compose("countdown_qwen3_4b_2nodes").actor_rollout_ref.nccl_timeout == 1800
    assert compose("countdown_qwen3_4b").actor_rollout_ref.nccl_timeout == 600


# Value overrides of each kind Hydra applies after merging the files: compose() applies them
# to a kept merge, so each must land as Hydra's own would.
VALUE_OVERRIDES = [
    "trainer.total_training_steps=7",
    "+trainer.added=[1,2]",
    "actor_rollout_ref.actor.optim.lr=2e-5",
    "++trainer.save_freq=3",
    "trainer.total_training_steps=9",  # the later value wins
    "~trainer.added",
    "data.val_files=null",
]


def test_cached_compose_equals_hydras_own_for_any_root(tmp_path: Path) -> None:
    """compose() caches configs without their root or value overrides and applies both to the
    copy: the result, resolved, is what Hydra composes itself (with the experiment's own
    pkg:// search path). Every experiment with value overrides; one with a group choice among
    them, one with a top-level value between dotted ones (Hydra's order must hold), and then
    the same one without overrides (the kept merge must be untouched by those before)."""
    from rlvr.config.compose import _compose

    cases = [(experiment, VALUE_OVERRIDES) for experiment in experiments()]
    cases += [
        ("countdown_cpu", ["data.max_prompt_length=64", "objective=dapo", *VALUE_OVERRIDES]),
        ("countdown_cpu", ["trainer.save_freq=5", "trainer={save_freq:7}", "+foo.a=1", "~foo"]),
        ("countdown_cpu", []),
    ]
    for experiment, overrides in cases:
        ours = compose(experiment, overrides, root=tmp_path)
        hydra = _compose(experiment, [f"paths.root={tmp_path}", *overrides])
        assert OmegaConf.is_struct(ours) and OmegaConf.is_struct(hydra)
        mine = OmegaConf.to_container(ours, resolve=True)
        assert mine == OmegaConf.to_container(hydra, resolve=True), (experiment, overrides)
        assert str(tmp_path) in mine["trainer"]["default_local_dir"]  # type: ignore[index]
        if overrides == VALUE_OVERRIDES:
            assert mine["trainer"]["total_training_steps"] == 9  # type: ignore[index]
            assert "added" not in mine["trainer"]  # type: ignore[operator]


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.no_such_key=1"],
        ["+trainer.total_training_steps=3"],
        ["~trainer.no_such_key"],
        ["~trainer.total_training_steps=12345"],
        ["trainer.total_training_steps=1,2"],
        ["trainer.total_training_steps=[1,"],
        ["objective=dapo", "trainer.total_training_steps.deeper=1"],
        ["actor_rollout_ref.actor@x.optim.lr=1"],
        ["trainer.totl_training_steps=3", "sed=1"],  # the first bad one is named
        ["++objective=dapo"],
    ],
)
def test_a_bad_value_override_fails_as_in_hydras_own_compose(overrides: list[str]) -> None:
    """The same exception and message as Hydra's whole compose: the one-line translations
    (compose_checked) read Hydra's messages."""
    from rlvr.config.compose import whole_compose

    with pytest.raises(Exception) as ours:
        compose("countdown_cpu", overrides)
    with pytest.raises(Exception) as hydra:
        whole_compose("countdown_cpu", overrides)
    assert (type(ours.value), str(ours.value)) == (type(hydra.value), str(hydra.value))


def test_values_after_the_last_whole_compose_entry_skip_the_merge(tmp_path: Path) -> None:
    """Group choices go to Hydra's whole compose without holding values back; a top-level
    value, Hydra's own keys, a sweep, a package, a dict for a group or ``++group`` go whole
    with every value before them (Hydra applies values in order); dotted keys after them are
    applied to a copy. A dotted name that is a group folder is a group."""
    from rlvr.config.compose import _split_overrides

    (tmp_path / "odd.group").mkdir()
    (tmp_path / "objective").mkdir()

    def split(*lines: str) -> tuple[list[str], list[str]]:
        choices, values = _split_overrides(list(lines), [tmp_path])
        return choices, [value.input_line for value in values]

    assert split("a.b=1", "objective=dapo", "+a.new=1", "~a.old", "++a.forced=2") == (
        ["objective=dapo"],
        ["a.b=1", "+a.new=1", "~a.old", "++a.forced=2"],
    )
    assert split("odd.group=x", "a.b=1") == (["odd.group=x"], ["a.b=1"])
    for whole in ("seed=3", "hydra.run.dir=x", "a.b=1,2", "a.b@pkg=1", "objective={a:1}"):
        assert split("a.b=1", whole, "a.c=2") == (["a.b=1", whole], ["a.c=2"]), whole
    assert split("a.b=[1,") == (["a.b=[1,"], [])  # Hydra's own parse error


def test_a_new_value_reuses_the_kept_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two composes that differ in a value merge the files once; a new group choice merges
    again (the control)."""
    from rlvr.config import compose as composing

    merges: list[str] = []
    real = composing._compose
    monkeypatch.setattr(composing, "_composed", {})
    monkeypatch.setattr(composing, "_compose", lambda e, o: merges.append(e) or real(e, o))
    for lr in ("1e-5", "2e-5"):
        assert compose("countdown_cpu", [f"actor_rollout_ref.actor.optim.lr={lr}"])
    assert merges == ["countdown_cpu"]
    compose("countdown_cpu", ["objective=dapo", "actor_rollout_ref.actor.optim.lr=3e-5"])
    assert merges == ["countdown_cpu", "countdown_cpu"]


ONE_GPU = {"gsm8k_qwen2_5_0_5b_1gpu": 0, "countdown_qwen2_5_3b_lora_1gpu": 32}  # LoRA rank


@pytest.mark.parametrize("experiment", sorted(ONE_GPU))
def test_one_gpu_experiments_fit_beside_vllm(experiment: str) -> None:
    """vLLM's share and the FSDP state it wakes beside fit one 80 GB GPU with room to spare (the
    planner with hardware/h100x1.yaml's declared GPU, not this machine's); a full fine-tune of the
    3B model with vLLM at 0.6 of the GPU is the negative control."""
    from rlvr.planning.memory_plan import Machine, plan

    def planned(overrides: list[str]) -> Any:
        config = compose(experiment, overrides)
        facts = config.hardware_facts
        gpu = Machine(facts.gpu, int(facts.gpu_memory_gib * 2**30), None, "declared")
        return plan(config, gpu)

    config = compose(experiment)
    assert config.trainer.n_gpus_per_node * config.trainer.nnodes == 1
    assert config.actor_rollout_ref.model.lora_rank == ONE_GPU[experiment]
    fits = planned([])
    assert fits.problems == [] and fits.peak.bytes < 0.75 * fits.machine.gpu_bytes
    too_big = [
        "base_model=qwen2_5_3b",
        "adapter=none",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    ]
    assert planned(too_big).problems


COUNTDOWN_GPU = [e for e in GPU_EXPERIMENTS if choices(e)["task"] == "countdown"]
TOKEN_CAPS = (
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
)


def length_problems(config: DictConfig) -> list[str]:
    """What keeps a run from sampling and training whole responses at its length, by verl 0.6.1's
    own rules: vLLM's context (verl passes max_model_len, or prompt + response when it is unset,
    vllm_rollout_spmd.py) must hold a prompt and a full response, and with chunked prefill
    max_num_batched_tokens must reach it (verl raises otherwise); each dynamic micro batch's
    token cap must hold one whole row (seqlen_balancing.py asserts it)."""
    row = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    rollout = config.actor_rollout_ref.rollout
    context = int(rollout.max_model_len or row)
    problems = [f"max_model_len {context} < {row}"] if context < row else []
    if rollout.enable_chunked_prefill and int(rollout.max_num_batched_tokens) < context:
        problems.append(f"max_num_batched_tokens {rollout.max_num_batched_tokens} < {context}")
    for key in TOKEN_CAPS:
        if (cap := int(OmegaConf.select(config, key))) < row:
            problems.append(f"{key} {cap} < {row}")
    return problems


@pytest.mark.parametrize("experiment", COUNTDOWN_GPU)
def test_countdown_gpu_experiments_sample_2048_tokens_whole(experiment: str) -> None:
    """Issue 38: verl-study trains Countdown at 2048 response tokens, and tinker-cookbook's
    recipe measured 68/76/85% at 512/1024/2048 (docs/OPTIMIZATION_COUNTDOWN.md). The negative
    controls: each limit set one token short of a whole row."""
    config = compose(experiment)
    assert config.data.max_response_length == 2048
    assert length_problems(config) == []
    row = int(config.data.max_prompt_length) + 2048
    for key in ("actor_rollout_ref.rollout.max_model_len", *TOKEN_CAPS):
        assert length_problems(compose(experiment, [f"{key}={row - 1}"])), key
    short = compose(experiment, ["actor_rollout_ref.rollout.max_num_batched_tokens=2048"])
    assert length_problems(short) == [f"max_num_batched_tokens 2048 < {row}"]


def test_cpu_experiments_and_gsm8k_keep_their_lengths() -> None:
    lengths = {e: compose(e).data.max_response_length for e in experiments()}
    assert (lengths["countdown_cpu"], lengths["countdown_smollm2_cpu"]) == (48, 24)
    assert {lengths[e] for e in GPU_EXPERIMENTS if e.startswith("gsm8k")} == {1024}


def test_print_config_shows_the_composed_run(capsys: pytest.CaptureFixture[str]) -> None:
    """python -m rlvr.config.compose EXPERIMENT [overrides...]: the whole config, resolved."""
    from rlvr.config.compose import main

    assert main(["countdown_qwen3_4b", "adapter=lora32", "trainer.save_freq=5"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.trainer.save_freq == 5 and printed.actor_rollout_ref.model.lora_rank == 32
    assert printed.data.train_files == str(
        CONFIG_DIR.parent / "artifacts/data/countdown/train.parquet"
    )
    assert main(["countdown_qwen3_4bb"]) == 2
    assert "did you mean countdown_qwen3_4b?" in capsys.readouterr().err
    assert main(["countdown_cpu", "+base_model=tiny"]) == 2
    assert "write base_model=OPTION without +" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and "EXPERIMENT" in capsys.readouterr().out
