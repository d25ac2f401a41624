#!/usr/bin/env bash
# One prepared device check for a GPU machine (about 10 minutes on one H200-class GPU):
#  1. the gpu-marked tests;
#  2. scoring targets/s at 100k and 1M items against the bare matrix-product limit measured in
#     the same run, in fp32 and in tf32 (and the bare product in bf16: our models rank in fp32);
#  3. SPEC 4's full configuration, 20,000 steps of 256 sequences, on generated REES46 data of
#     EVENTS events (default 2M): steps/s of `intent train`, then `intent score` targets/s;
#  4. the same training in 2 processes (TorchDistributor, nccl) where the machine has 2+ GPUs;
#  5. where the `petastorm` stack is installed (.venv-petastorm), the training of 3. through
#     Petastorm's reader, beside 3.'s through ours (the `newest` stack reads with ours).
# Results go to $OUT (default bench/results/gpu). Needs `make setup` (and `make setup STACK=petastorm`
# for 5.).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/gpu}"
EVENTS="${EVENTS:-2000000}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
.venv/bin/python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -n 0 | tail -3
for precision in fp32 tf32; do
  (cd bench && ../.venv/bin/python model_bench.py --device cuda --precision "$precision" --items 100000 1000000 \
    --train-items 1000000 --train-steps 50 --out "$(realpath -m "../$OUT")/models_cuda_$precision.json")
done
WORK="$OUT/full"
rm -rf "$WORK" && mkdir -p "$WORK"
.venv/bin/intent generate --dataset rees46 --events "$EVENTS" --out "$WORK/raw" --seed 0
.venv/bin/intent ingest --dataset rees46 --raw "$WORK/raw" --lake "$WORK/lake"
.venv/bin/intent split --dataset rees46 --lake "$WORK/lake"
SPEC4=(--dataset rees46 --lake "$WORK/lake" --model sasrec --steps 20000 --tracking-uri "sqlite:///$(realpath "$WORK")/mlflow.db")
.venv/bin/intent train "${SPEC4[@]}" --split test | tee "$WORK/train_1.log" | { grep -E "step 20,000|logged" || true; }
.venv/bin/intent score "${SPEC4[@]}" | tee "$WORK/score_1.log" | { grep -E "ranks in" || true; }
if [ "$GPUS" -ge 2 ]; then
  # TorchDistributor takes the driver's GPUs from Spark's resource scheduling
  cat > "$WORK/gpus.sh" <<'SCRIPT'
#!/usr/bin/env bash
echo '{"name": "gpu", "addresses": ["0", "1"]}'
SCRIPT
  chmod +x "$WORK/gpus.sh"
  GPU_CONF=(--spark-conf spark.driver.resource.gpu.amount=2 --spark-conf "spark.driver.resource.gpu.discoveryScript=$(realpath "$WORK/gpus.sh")")
  .venv/bin/intent train "${SPEC4[@]}" "${GPU_CONF[@]}" --split test --processes 2 | tee "$WORK/train_2.log" | { grep -E "step 20,000|logged" || true; }
  .venv/bin/intent score "${SPEC4[@]}" "${GPU_CONF[@]}" --processes 2 | tee "$WORK/score_2.log" | { grep -E "ranks in" || true; }
fi
if [ -x .venv-petastorm/bin/intent ]; then
  .venv-petastorm/bin/intent train "${SPEC4[@]}" --split test --reader petastorm | tee "$WORK/train_petastorm.log" | { grep -E "step 20,000|logged" || true; }
fi
.venv/bin/intent compare --tracking-uri "sqlite:///$(realpath "$WORK")/mlflow.db" --dataset rees46 --metrics 'steps_per_second|targets_per_second' | tee "$OUT/full_config.txt"
rm -rf "$WORK/raw" "$WORK/lake"
