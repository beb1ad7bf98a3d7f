#!/usr/bin/env bash
# One GPU session's device check, as one bounded command: scripts/gpu_bench.py on both of
# its models, MiniLM (launch-bound on a big GPU) and BERT-large with random fp16 weights
# (device-bound), each explicit vs Triton's batcher (max_queue_delay 0, batch 64).
# BERT-large in fp16 pays a one-off cost for each batch shape its process has not run
# before (results/gpu_h200_2026-12-04), so its models pad to shape buckets of 64 tokens
# (shape_bucket_tokens), and scripts/gpu_shape_probe.py first checks that the buckets
# remove that cost.
#
# On the GPU host, from the project root, inside the packed environment:
#   bash .gpu/remote.sh bash scripts/gpu_session.sh OUT_DIR [SECONDS_PER_MODEL]
# OUT_DIR receives <model>_report.md for each model and gpu_bench.tgz (every file of both
# runs: results.json, cost_table.json, tritonserver.log, report.md), nvidia-smi.txt and
# shape_probe_bert_large_b64.json, and <model>_timelines.md: each model's per-call
# timeline summed over its whole run (host ms per call, device idle while requests wait).
# Each run stops itself at SECONDS_PER_MODEL (default 220; a hard alarm 45 s later), so
# the whole check ends within about 2 x (SECONDS_PER_MODEL + 45) s after the set-up.
# GPU_SESSION_EXTRA adds gpu_bench.py arguments (--cpu-smoke tries this script on a CPU).
set -u
out=${1:?usage: gpu_session.sh OUT_DIR [SECONDS_PER_MODEL]}
per_model=${2:-220}
work=$(mktemp -d)
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
  > "$out/nvidia-smi.txt" 2>&1
rc=0
if [ -z "${GPU_SESSION_EXTRA:-}" ]; then
  python3 scripts/gpu_shape_probe.py --model bert_large --shape-bucket-tokens 64 \
    --out "$out" || rc=1
fi
for model in minilm bert_large; do
  buckets=0
  [ "$model" = bert_large ] && buckets=64
  mkdir -p "$work/$model/timelines"
  EXPLICIT_BATCHING_TIMELINE_DIR="$work/$model/timelines" \
    python3 scripts/gpu_bench.py --model "$model" --time-limit-s "$per_model" \
    --native-delays-us 0 --calibration-budget-s 10 --shape-bucket-tokens "$buckets" \
    --out "$work/$model" ${GPU_SESSION_EXTRA:-} || rc=1
  cp "$work/$model/report.md" "$out/${model}_report.md" 2>/dev/null
  # device idle while requests wait, each model over its whole run (every load mixed)
  python3 scripts/host_ledger.py --timeline "$work/$model/timelines" \
    > "$out/${model}_timelines.md" 2>&1
done
tar -C "$work" -czf "$out/gpu_bench.tgz" .
exit $rc
