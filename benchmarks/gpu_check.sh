#!/usr/bin/env bash
# The GPU check run on a lent CUDA machine (docs/gpu.md): BERT-base against transformers, with the
# CUDA-graph variant, one process per task, and the tiny encoder's host overhead on CUDA. Run from
# the repository root of a copy of the tree that also holds .whl/ (wheels of what the machine's
# image lacks: jsonargparse, pydantic, ...) and .bench-data/ (the data folders the two scripts
# read, and MiniLM's vocab.txt at vocab/minilm/); BERTKIT_BENCH_COMMIT names the commit the copy
# was taken from. Results go to $OUT (default benchmarks/results/gpu_check): one JSON per task and
# script, and one log with each step's exit status, dynamo's recompiles and graph breaks and
# inductor's performance hints (why a graph is not recorded as a CUDA graph).
set -u
OUT=${OUT:-benchmarks/results/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 HF_HUB_OFFLINE=1 BERTKIT_DATA_DIR=$PWD/.bench-data
LOG=$OUT/check.log
python3 -m pip install -q --no-index --no-deps --no-build-isolation .whl/*.whl . >/tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$LOG"
gpu() {
    TORCH_LOGS=recompiles,graph_breaks,perf_hints timeout "${GPU_SECONDS:-105}" python3 benchmarks/gpu_vs_transformers.py \
        --tasks "$1" --variants bertkit bertkit_cudagraphs --output "$OUT/gpu_vs_transformers_$1.json" >>"$LOG" 2>&1
    echo "gpu_vs_transformers $1: exit $?" | tee -a "$LOG"
}
for task in ner sst2 squad; do gpu $task; done
timeout "${HOST_SECONDS:-120}" python3 benchmarks/host_overhead.py --device cuda --vocab-file .bench-data/vocab/minilm/vocab.txt \
    --output "$OUT/host_overhead_cuda.json" >>"$LOG" 2>&1
echo "host_overhead: exit $?" | tee -a "$LOG"
gpu pretrain128
grep -E "^(ner|sst2|squad|pretrain128) \{'bertkit" "$LOG"
ls -la "$OUT"
