#!/usr/bin/env bash
# Pre-train a mini BERT (4 layers, H=256) from scratch with MLM + NSP on ../shared/data/corpus
# (Brown, State of the Union, Moby-Dick; 3 % of documents held out), plot held-out MLM/NSP
# accuracy over steps, then fine-tune the result and a random initialisation of the same
# architecture on CoNLL-2003 NER with the same budget. Run from the repository root:
#
#   bash benchmarks/pretrain_transfer.sh [STEPS]       # default 2400 pre-training steps
#
# Writes runs/pretrain-corpus/ (shards, logs, checkpoints, export, NER runs),
# benchmarks/results/pretraining_curve.png and benchmarks/results/pretrain_transfer.json.
set -eo pipefail
STEPS=${1:-2400}
CORPUS=../shared/data/corpus
VOCAB=../shared/data/vocab/bert-base-cased
OUT=runs/pretrain-corpus
mkdir -p $OUT

bertkit prepare "[$CORPUS/brown.txt, $CORPUS/sotu, $CORPUS/moby_dick]" $OUT/shards \
    --vocab $VOCAB --lowercase false --max_seq_length 128 --dupe_factor 3 \
    --static_masking TokenMasking --holdout 0.03 --workers 2 --overwrite true

cat > $OUT/pretrain.yaml <<YAML
model:
  vocab_file: $VOCAB
  lowercase: false
  learning_rate: 3.0e-4
  warmup_ratio: 0.05
data:
  data_dir: $OUT/shards
  train_file: train
  validation_file: validation
trainer:
  max_steps: $STEPS
  val_check_interval: 200
  default_root_dir: $OUT
  logger: {class_path: CSVLogger, init_args: {save_dir: $OUT, name: logs}}
  callbacks:
    - {class_path: ModelCheckpoint, init_args: {dirpath: $OUT/checkpoints, monitor: val/mlm_loss, save_last: true}}
    - {class_path: bertkit.ExportPretrained, init_args: {output_dir: $OUT/export}}
YAML
bertkit fit --config recipes/pretrain_bert.yaml --config $OUT/pretrain.yaml
python benchmarks/plot_pretraining.py curve $OUT/logs benchmarks/results/pretraining_curve.png

for INIT in pretrained random; do
    if [ $INIT = pretrained ]; then
        MODEL="{pretrained: $OUT/export}"
    else
        MODEL="{pretrained: null, preset: mini, vocab_file: $VOCAB, lowercase: false}"
    fi
    cat > $OUT/ner-$INIT.yaml <<YAML
model: $MODEL
data: {data_dir: ../shared/data/ner/conll2003}
trainer:
  max_epochs: 3
  default_root_dir: $OUT/ner-$INIT
  logger: {class_path: CSVLogger, init_args: {save_dir: $OUT/ner-$INIT, name: logs}}
  callbacks:
    - {class_path: ModelCheckpoint, init_args: {dirpath: $OUT/ner-$INIT/checkpoints, monitor: val/f1, mode: max, save_last: true}}
YAML
    bertkit fit --config recipes/ner.yaml --config $OUT/ner-$INIT.yaml
    bertkit test --config recipes/ner.yaml --config $OUT/ner-$INIT.yaml --ckpt_path best
done
python benchmarks/plot_pretraining.py summary $OUT benchmarks/results/pretrain_transfer.json
