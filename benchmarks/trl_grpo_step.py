"""TRL's GRPOTrainer on an experiment's knobs, for benchmarks/bench_grpo_vs_trl.py: per-step times.

Run by TRL's own environment's python (benchmarks/trl_env.py), not the project's:
    python benchmarks/trl_grpo_step.py --knobs KNOBS.json --data train.parquet --model DIR
        --steps 3 --out steps.json

``KNOBS.json`` holds the experiment's knobs as the bench read them from the composed config
(``bench_grpo_vs_trl.experiment_knobs``); ``grpo_config_kwargs`` maps them onto TRL 0.24's
GRPOConfig and refuses those TRL cannot match. The data is the same Parquet verl reads (``prompt``:
chat messages, which TRL renders with the tokenizer's chat template and the generation prompt, as
verl does); the reward is the experiment's reward file (verl's ``compute_score`` signature) with
its ``reward_kwargs``, scoring the decoded completion text. fp32 on CPU, no eval, no saving. Each
step's wall time is from one ``on_step_end`` to the next (the first from ``on_train_begin``):
generation, reward, reference log probs, forward, backward and the optimizer step.

The mapping, and where it is not verl's:
- ``train_batch_size x n`` completions generated in one call, one optimizer step per
  ``ppo_mini_batch_size x n`` of them: ``per_device_train_batch_size`` = the knobs' ``micro_batch``
  (the bench's ``--trl_micro_batch``; verl's CPU recipe runs a mini batch in one packed micro
  batch, which TRL's padded rows cannot fit in this memory), ``gradient_accumulation_steps`` =
  mini batch / micro batch, ``steps_per_generation`` = batch / micro batch (TRL's generation
  batch is that times the micro batch). With one mini batch a batch, TRL skips the old-log-prob
  pass, as the experiment does by taking the rollout's log probs (ratio 1). With several, TRL
  runs that pass (a forward over the batch; verl's recipe keeps the rollout's log probs) and
  shuffles the completions before splitting them into mini batches (verl keeps them in order,
  each group whole): the same work per optimizer step, other rows in each;
- ``loss_type="dapo"``: the clipped surrogate plus ``beta`` x KL summed over every completion token
  of the batch and divided by their count, verl's ``loss_agg_mode: token-mean``. (``grpo`` averages
  per sequence first, ``bnpo`` per local micro batch, ``dr_grpo`` divides by a constant);
- KL: TRL's only estimator is k3, ``exp(ref - logp) - (ref - logp) - 1``, verl's ``low_var_kl``
  (verl also clamps it to [-10, 10]); anything else is refused;
- advantages: TRL's group-normalized rewards (``scale_rewards="group"``, verl's
  ``norm_adv_by_std_in_grpo``); verl's ``grpo_drop_constant`` masks constant groups out of the loss,
  TRL keeps them at advantage 0: the same forward and backward work, another loss value;
- AdamW, constant learning rate, no warm-up, the experiment's weight decay, betas and grad clip.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

#: verl's KL estimators that are TRL's k3.
K3_NAMES = ("low_var_kl", "k3")


def grpo_config_kwargs(knobs: dict[str, Any], output_dir: str, steps: int) -> dict[str, Any]:
    """TRL 0.24 GRPOConfig's arguments for the experiment's knobs; ValueError where TRL cannot
    run the experiment's objective."""
    if knobs["use_kl_loss"] and knobs["kl_loss_type"] not in K3_NAMES:
        raise ValueError(f"kl_loss_type {knobs['kl_loss_type']}: TRL's KL is k3 (low_var_kl) only")
    if knobs["loss_agg_mode"] != "token-mean":
        raise ValueError(f"loss_agg_mode {knobs['loss_agg_mode']}: mapped for token-mean only")
    prompts, mini_prompts = knobs["train_batch_size"], knobs["ppo_mini_batch_size"]
    if prompts % mini_prompts or knobs["ppo_epochs"] != 1:
        raise ValueError("the mapping is for one pass over the batch in mini batches dividing it")
    if knobs["lr_warmup_steps"] > 0 or knobs["lr_scheduler_type"] != "constant":
        raise ValueError("the mapping is for a constant learning rate without warm-up")
    batch, mini = prompts * knobs["n"], mini_prompts * knobs["n"]
    micro = knobs.get("micro_batch") or mini
    if mini % micro:
        raise ValueError(f"micro batch {micro} does not divide a mini batch of {mini} completions")
    top_k = knobs["top_k"]
    return {
        "output_dir": output_dir,
        "max_steps": steps,
        # The batch's completions generated at once (TRL's generation batch: the micro batch x
        # steps_per_generation), one optimizer step per mini batch of them, in micro batches.
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": mini // micro,
        "steps_per_generation": batch // micro,
        "num_generations": knobs["n"],
        "num_iterations": knobs["ppo_epochs"],
        "max_prompt_length": knobs["max_prompt_length"],
        "max_completion_length": knobs["max_response_length"],
        "temperature": knobs["temperature"],
        "top_p": knobs["top_p"],
        "top_k": None if top_k is None or top_k <= 0 else top_k,
        "learning_rate": knobs["lr"],
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": knobs["weight_decay"],
        "adam_beta1": knobs["betas"][0],
        "adam_beta2": knobs["betas"][1],
        "max_grad_norm": knobs["grad_clip"],
        "beta": knobs["kl_loss_coef"] if knobs["use_kl_loss"] else 0.0,
        "epsilon": knobs["clip_ratio_low"],
        "epsilon_high": knobs["clip_ratio_high"],
        "loss_type": "dapo",
        "scale_rewards": "group" if knobs["norm_adv_by_std_in_grpo"] else "none",
        "gradient_checkpointing": knobs["enable_gradient_checkpointing"],
        "model_init_kwargs": {
            "dtype": "float32",
            "attn_implementation": knobs["attn_implementation"],
        },
        "bf16": False,
        "fp16": False,
        "use_cpu": True,
        "disable_dropout": True,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "dataloader_num_workers": 0,
        "seed": knobs.get("seed", 0),
    }


def reward_function(path: str, reward_kwargs: dict[str, Any]) -> Any:
    """A TRL reward function over the reward file's ``compute_score`` (verl's signature). The
    file may import its package's siblings (``from rewards import _text``), as under verl, whose
    launcher has the checkout on ``PYTHONPATH``: the folder above the file's is appended here."""
    checkout = str(Path(path).resolve().parents[1])
    if checkout not in sys.path:
        sys.path.append(checkout)  # after TRL's own packages: it shadows none of them
    spec = importlib.util.spec_from_file_location("bench_reward", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    score = module.compute_score

    def countdown(
        prompts: list[Any],
        completions: list[Any],
        data_source: list[Any],
        reward_model: list[dict[str, Any]],
        extra_info: list[Any],
        **_: Any,
    ) -> list[float]:
        rewards = []
        for completion, source, truth, extra in zip(
            completions, data_source, reward_model, extra_info, strict=True
        ):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            value = score(source, text, truth["ground_truth"], extra, **reward_kwargs)
            rewards.append(float(value["score"] if isinstance(value, dict) else value))
        return rewards

    return countdown


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--knobs", required=True, help="the experiment's knobs (JSON file)")
    parser.add_argument("--data", required=True, help="the training Parquet (verl's columns)")
    parser.add_argument("--model", required=True, help="the model folder (HF format)")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps (first: warm-up)")
    parser.add_argument("--out", required=True, help="where to write the per-step JSON")
    parser.add_argument("--work", required=True, help="TRL's output_dir (nothing is saved)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import transformers
    import trl
    from datasets import load_dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    knobs = json.loads(Path(args.knobs).read_text())
    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    print(
        f"TRL {trl.__version__}, transformers {transformers.__version__}, torch "
        f"{torch.__version__} ({torch.__file__}), {threads} threads",
        flush=True,
    )
    config = GRPOConfig(**grpo_config_kwargs(knobs, args.work, args.steps))
    dataset = load_dataset("parquet", data_files=args.data, split="train")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"

    records: list[dict[str, Any]] = []

    class StepTimer(TrainerCallback):
        last = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.last = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = time.perf_counter()
            records.append({"step": state.global_step, "seconds": now - self.last})
            self.last = now

        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            logs = kwargs.get("logs")
            if records and logs:
                keep = ("reward", "completions/mean_length", "kl", "loss", "entropy")
                records[-1].update({k: float(logs[k]) for k in keep if k in logs})
                print(f"TRL step {json.dumps(records[-1])}", flush=True)

    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=reward_function(knobs["reward_path"], knobs["reward_kwargs"]),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    trainer.train()
    timed = [r["seconds"] for r in records if r["step"] > 1]
    summary = {
        "steps": records,
        "median_s": statistics.median(timed) if timed else None,
        "config": {k: v for k, v in config.to_dict().items() if isinstance(v, int | float | str)},
    }
    Path(args.out).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
