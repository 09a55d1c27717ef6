"""The SFT warm start on CPU, verl's padded forward vs the packed one: time and the model it makes.

Usage: uv run python benchmarks/bench_sft_packing.py [--rows 384] [--seed 0] [--out DIR]
           [--model artifacts/models/smollm2-135m-instruct] [--timeout_min 30]

Runs the quickstart's SFT stage twice on the same data, one after the other on this machine:
``scripts/launch_sft.sh countdown_smollm2_cpu`` as the quickstart runs it (verl 0.6.1's
``_compute_loss_and_backward``: every row at ``data.max_length``, logits at every position),
then with ``RLVR_SFT_PACKED=1`` (``rlvr/cpu/sft_packing.py``: one packed row, the common prefix
once, no padding). The data is the quickstart's for ``--seed`` (its data prep flags,
``bench_train_cpu.QUICKSTART_DATA``, and ``--seed 42+N``; the first ``--rows`` train rows'
solutions, at the SFT config's ``data.max_length``). Prints each run's wall seconds
(torchrun start-up, the steps, the save) and the ratio, and, as an independent check that both
trained the same model, each model's mean answer-token loss on the held-out SFT rows computed
here with a plain padded HF forward in fp32, and the largest parameter difference between them.
The model is scripts/build_model.py smollm2's (the quickstart builds it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from bench_train_cpu import QUICKSTART_DATA  # beside this script, which python puts on sys.path

from rlvr.common.cli import docstring_parser
from rlvr.common.paths import ROOT
from rlvr.common.processes import run_bounded

MODES = (("verl, padded", {"RLVR_SFT_PACKED": "0"}), ("packed", {"RLVR_SFT_PACKED": "1"}))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = docstring_parser(__doc__)
    parser.add_argument("--rows", type=int, default=384, help="SFT rows, quickstart's SFT_ROWS")
    parser.add_argument("--seed", type=int, default=0, help="the quickstart --seed whose data")
    parser.add_argument("--out", default="/tmp/bench_sft_packing", help="data, logs and models")
    parser.add_argument("--model", default=str(ROOT / "artifacts/models/smollm2-135m-instruct"))
    parser.add_argument("--timeout_min", type=float, default=30.0, help="hard limit per run")
    return parser.parse_args(argv)


def _prepare(out: Path, seed: int) -> Path:
    """The quickstart's data for ``seed`` (scripts/quickstart.sh DATA_ARGS), in ``out``."""
    prep = [sys.executable, "scripts/data_prep_countdown.py", *QUICKSTART_DATA,
            "--seed", str(42 + seed), "--local_dir", str(out / "countdown")]  # fmt: skip
    subprocess.run(prep, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return out


def _train(
    args: argparse.Namespace, mode: str, env: dict[str, str], data: Path
) -> tuple[float, Path]:
    out = Path(args.out) / mode.split(",")[0]
    command = [
        "bash", "scripts/launch_sft.sh", "countdown_smollm2_cpu", "trainer.experiment_name=bench",
        f"data.train_max_samples={args.rows}", f"model.partial_pretrain={args.model}",
        f"paths.data={data}", f"paths.checkpoints={out}",
    ]  # fmt: skip
    log = Path(args.out) / f"{mode.split(',')[0]}.log"
    timeout = 60 * args.timeout_min
    done = run_bounded(command, {**os.environ, **env}, timeout, ROOT, log_path=log)
    if done.returncode != 0:
        raise SystemExit(f"{mode}: launch_sft.sh exited {done.returncode}; log: {log}")
    return done.seconds, Path(done.output.strip().splitlines()[-1])


def answer_loss(model_dir: Path, data: Path, rows: int = 64) -> float:
    """Mean cross-entropy of the held-out SFT rows' answer tokens (EOS included), fp32, padded."""
    import torch
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.train.sft_dataset import AlignedSFTDataset

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = OmegaConf.create(
        {"prompt_key": "sft_prompt", "response_key": "sft_response", "max_length": 128}
    )
    dataset = AlignedSFTDataset(str(data / "countdown/test.parquet"), tokenizer, config)
    items = [dataset[i] for i in range(min(rows, len(dataset)))]
    batch = {key: torch.stack([item[key] for item in items]) for key in items[0]}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), batch["input_ids"][:, 1:].flatten(), reduction="none"
    )
    mask = batch["loss_mask"][:, 1:].flatten().float()
    return float((losses * mask).sum() / mask.sum())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path(args.model, "config.json").is_file():
        print(f"--model {args.model}: no model; build it: uv run scripts/build_model.py smollm2",
              file=sys.stderr)  # fmt: skip
        return 2
    data = _prepare(Path(args.out) / "data", args.seed)
    results = []
    for mode, env in MODES:
        print(f"SFT, {mode} ...", flush=True)
        results.append((mode, *_train(args, mode, env, data)))
    print(f"\nSFT on {args.rows} rows, this machine, one after the other:")
    print("| forward | wall s | ratio | held-out answer loss |\n|---|---|---|---|")
    base = results[0][1]
    for mode, seconds, model in results:
        loss = answer_loss(model, data)
        print(f"| {mode} | {seconds:.0f} | {seconds / base:.2f} | {loss:.4f} |")
    print(f"largest parameter difference: {_largest_difference(results[0][2], results[1][2]):.2e}")
    return 0


def _largest_difference(first: Path, second: Path) -> float:
    from safetensors.torch import load_file

    one, two = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    return max(float((one[name].float() - two[name].float()).abs().max()) for name in one)


if __name__ == "__main__":
    raise SystemExit(main())
