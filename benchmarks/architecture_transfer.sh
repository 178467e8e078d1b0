#!/usr/bin/env bash
# BERT vs ModernBERT from scratch at equal tokens: a mini encoder of each family (4 layers, H=256,
# 4 heads) pre-trained on ../shared/data/corpus (Brown, State of the Union, Moby-Dick; 3 % of
# documents held out) with the same objective (masked LM alone, 30 % of tokens, masks drawn when
# read: recipes/pretrain_modernbert.yaml), the same WordPiece vocabulary, instances, steps, batch,
# learning rate and schedule; then CoNLL-2003 NER fine-tuned from each export over SEEDS seeds, and
# (one seed) from a random initialisation of each architecture, the baseline pre-training must beat.
# Only the architecture differs (ModernBERT: RoPE, GeGLU of 1.5 H, pre-norm without biases,
# local/global attention). Run from the repository root:
#
#   bash benchmarks/architecture_transfer.sh [STEPS] [SEEDS] [PARTS]  # default 1000 steps, 3 seeds; PARTS: all | bert | modernbert | ner
#
# Each finished part is skipped on a re-run (an export or a test score marks it done).
# Writes runs/architecture-transfer/ and benchmarks/results/architecture_transfer.{json,png}.
set -eo pipefail
STEPS=${1:-1000}
SEEDS=${2:-3}
PARTS=${3:-all}
CORPUS=../shared/data/corpus
VOCAB=../shared/data/vocab/bert-base-cased
OUT=runs/architecture-transfer
FAMILIES="bert modernbert"
mkdir -p $OUT

if [ ! -f $OUT/shards/train/manifest.json ]; then
    bertkit prepare "[$CORPUS/brown.txt, $CORPUS/sotu, $CORPUS/moby_dick]" $OUT/shards \
        --vocab $VOCAB --lowercase false --max_seq_length 128 --sentence_task none --dupe_factor 1 \
        --holdout 0.03 --workers 2 --overwrite true
fi

for FAMILY in $FAMILIES; do
    [ "$PARTS" = all ] || [ "$PARTS" = $FAMILY ] || continue
    [ -f $OUT/$FAMILY/export/model.safetensors ] && continue
    cat > $OUT/$FAMILY.yaml <<YAML
model:
  encoder: $FAMILY
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
  val_check_interval: 250
  default_root_dir: $OUT/$FAMILY
YAML
    bertkit fit --config recipes/pretrain_bert.yaml --config recipes/pretrain_modernbert.yaml --config $OUT/$FAMILY.yaml
done

if [ "$PARTS" = all ] || [ "$PARTS" = ner ]; then
    for FAMILY in $FAMILIES; do
        for SEED in $(seq 1 $SEEDS) random; do
            RUN=$OUT/ner-$FAMILY-seed$SEED
            if [ $SEED = random ]; then
                RUN=$OUT/ner-$FAMILY-random SEED=1
                MODEL="{pretrained: null, encoder: $FAMILY, preset: mini, vocab_file: $VOCAB, lowercase: false}"
            elif [ -f $OUT/$FAMILY/export/model.safetensors ]; then
                MODEL="{pretrained: $OUT/$FAMILY/export}"
            else
                echo "$RUN: no $OUT/$FAMILY/export yet (pre-train it first)"; continue
            fi
            [ -f $RUN/test_scores.json ] && continue
            cat > $RUN.yaml <<YAML
seed_everything: $SEED
model: $MODEL
data: {data_dir: ../shared/data/ner/conll2003, seed: $SEED}  # batch order too
trainer:
  max_epochs: 3
  default_root_dir: $RUN
YAML
            bertkit fit --config recipes/ner.yaml --config $RUN.yaml
            bertkit test --config recipes/ner.yaml --config $RUN.yaml --ckpt_path best
        done
    done
fi

if [ "$PARTS" = all ]; then
    python benchmarks/plot_pretraining.py architectures $OUT benchmarks/results/architecture_transfer.json
fi
