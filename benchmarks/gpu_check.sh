#!/usr/bin/env bash
# The GPU check run on a lent CUDA machine (docs/gpu.md): BERT-base against transformers, with the
# CUDA-graph variant, and the tiny encoder's host overhead on CUDA. Run from the repository root of
# a copy of the tree that also holds .whl/ (wheels of what the machine's image lacks: jsonargparse,
# pydantic, ...) and .bench-data/ (the data folders the two scripts read, and MiniLM's vocab.txt at
# vocab/minilm/); BERTKIT_BENCH_COMMIT names the commit the copy was taken from. Results go to
# $OUT (default benchmarks/results/gpu_check), one JSON per script, with the logs.
set -u
OUT=${OUT:-benchmarks/results/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 BERTKIT_DATA_DIR=$PWD/.bench-data
python3 -m pip install -q --no-index --no-deps --no-build-isolation .whl/*.whl . >"$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout "${GPU_SECONDS:-320}" python3 benchmarks/gpu_vs_transformers.py --tasks ner sst2 squad pretrain128 \
    --variants bertkit bertkit_cudagraphs --output "$OUT/gpu_vs_transformers_cudagraphs.json" 2>&1 | tee "$OUT/gpu.log" | grep -v Warning
timeout "${HOST_SECONDS:-150}" python3 benchmarks/host_overhead.py --device cuda --vocab-file .bench-data/vocab/minilm/vocab.txt \
    --output "$OUT/host_overhead_cuda.json" 2>&1 | tee "$OUT/host.log" | grep -E "^(ner|sst2|squad|pretraining|wrote) " | cut -c1-400
ls -la "$OUT"
