#!/usr/bin/env bash
# ELECTRA (replaced-token detection, Clark et al. 2020) vs masked LM at the same budget: a mini
# encoder (4 layers, H=256) from scratch on ../shared/data/corpus (Brown, State of the Union,
# Moby-Dick; 3 % of documents held out), the same prepared instances and static masks, steps,
# batch, learning rate and schedule for both; then CoNLL-2003 NER fine-tuned from each export and
# from a random initialisation of the same architecture. Run from the repository root:
#
#   bash benchmarks/electra_vs_mlm.sh [STEPS] [PARTS]   # default 1200 steps; PARTS: all | mlm | electra | ner
#
# Each finished part is skipped on a re-run (an export or a test score marks it done).
# Writes runs/electra-vs-mlm/ and benchmarks/results/electra_vs_mlm.{json,png}.
set -eo pipefail
STEPS=${1:-1200}
PARTS=${2:-all}
CORPUS=../shared/data/corpus
VOCAB=../shared/data/vocab/bert-base-cased
OUT=runs/electra-vs-mlm
mkdir -p $OUT

if [ ! -f $OUT/shards/train/manifest.json ]; then
    bertkit prepare "[$CORPUS/brown.txt, $CORPUS/sotu, $CORPUS/moby_dick]" $OUT/shards \
        --vocab $VOCAB --lowercase false --max_seq_length 128 --sentence_task none --dupe_factor 2 \
        --static_masking TokenMasking --holdout 0.03 --workers 2 --overwrite true
fi

# What both objectives share: data, size, optimisation, evaluation.
pretrain_overlay() {  # $1 = objective (mlm | electra)
    cat <<YAML
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
  default_root_dir: $OUT/$1
YAML
}

for OBJ in mlm electra; do
    [ "$PARTS" = all ] || [ "$PARTS" = $OBJ ] || continue
    [ -f $OUT/$OBJ/export/model.safetensors ] && continue
    pretrain_overlay $OBJ > $OUT/$OBJ.yaml
    if [ $OBJ = mlm ]; then OBJECTIVE="--model.head MaskedLMHead"
    else OBJECTIVE="--config recipes/pretrain_electra.yaml"; fi
    bertkit fit --config recipes/pretrain_bert.yaml $OBJECTIVE --config $OUT/$OBJ.yaml --model.head.dynamic_masking false
done

if [ "$PARTS" = all ] || [ "$PARTS" = ner ]; then
    for INIT in random mlm electra; do
        [ -n "$(ls $OUT/ner-$INIT/logs/version_*/metrics.csv 2>/dev/null | xargs -r grep -l test/f1)" ] && continue
        if [ $INIT = random ]; then
            MODEL="{pretrained: null, preset: mini, vocab_file: $VOCAB, lowercase: false}"
        elif [ ! -f $OUT/$INIT/export/model.safetensors ]; then
            echo "ner-$INIT: no $OUT/$INIT/export yet (pre-train it first)"; continue
        else
            MODEL="{pretrained: $OUT/$INIT/export}"
        fi
        cat > $OUT/ner-$INIT.yaml <<YAML
model: $MODEL
data: {data_dir: ../shared/data/ner/conll2003}
trainer:
  max_epochs: 3
  default_root_dir: $OUT/ner-$INIT
YAML
        bertkit fit --config recipes/ner.yaml --config $OUT/ner-$INIT.yaml
        bertkit test --config recipes/ner.yaml --config $OUT/ner-$INIT.yaml --ckpt_path best
    done
fi

if [ "$PARTS" = all ]; then
    python benchmarks/plot_pretraining.py compare $OUT benchmarks/results/electra_vs_mlm.json
fi
