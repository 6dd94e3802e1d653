#!/bin/bash
# How the H200 calls of sessions 34-40 trained the deeper embedded model, stages 14-32 (README, "The
# embedded model"; session 33 ran the same two stages, lost with its checkpoints). One phase per
# device call, issued back to back. Session 35 (stages 17-19, each from the one before):
#   train stage17 assets/model 8.4 30 3e-4 --empty-rate 0.25 --hard-negatives 0.5
#   train stage18 ckpt/stage17 8.4 31 2.5e-4 --empty-rate 0.25 --hard-negatives 0.5
#   train stage19 ckpt/stage18 4.3 32 2e-4 --empty-rate 0.25 --hard-negatives 0.5
# then, on the CPU: python -m engine.training.average --out assets/model ckpt/stage17 ckpt/stage18 ckpt/stage19
# Session 36 (stages 20-22, from that mean, each from the one before; shipped: the mean of 21 and 22):
#   train stage20 assets/model 8.4 33 2.5e-4 --empty-rate 0.25 --hard-negatives 0.5
#   train stage21 ckpt/stage20 8.4 34 2e-4 --empty-rate 0.25 --hard-negatives 0.5
#   train stage22 ckpt/stage21 8.0 35 1.5e-4 --empty-rate 0.25 --hard-negatives 0.5
# then: python -m engine.training.average --out assets/model ckpt/stage21 ckpt/stage22
# Session 37 (stages 23-25 on the widened training scenes, --variety; from that mean, each from the one
# before; shipped: stage 25 alone, chosen on the own generator):
#   train stage23 assets/model 8.4 36 2.5e-4 --empty-rate 0.25 --hard-negatives 0.5 --variety
#   train stage24 ckpt/stage23 8.4 37 2e-4 --empty-rate 0.25 --hard-negatives 0.5 --variety
#   train stage25 ckpt/stage24 8.4 38 1.5e-4 --empty-rate 0.25 --hard-negatives 0.5 --variety
# Session 38 (stages 26-28 with look-alike distractors and drawing styles, --lookalikes --style; from
# stage 25; 27 and 28 started from the previous stage still on the warm machine, /tmp/NAME):
#   train stage26 assets/model 8.2 39 2e-4 --empty-rate 0.25 --hard-negatives 0.5 --variety --lookalikes --style
#   train stage27 /tmp/stage26 8.0 40 1.5e-4 --empty-rate 0.25 --hard-negatives 0.5 --variety --lookalikes --style
#   train stage28 /tmp/stage27 6.8 41 1e-4 --empty-rate 0.25 --hard-negatives 0.5 --variety --lookalikes --style
# Session 39 (stages 29-31, vertex poses and busy backgrounds; from the shipped mean of 26-28; not shipped,
# README "Stages 29-31"; 30 and 31 from the previous stage, carried as ckpt/stage29 and then on the warm machine):
#   train stage29 assets/model 8.3 42 2e-4 --empty-rate 0.25 --hard-negatives 0.5 --variety --lookalikes --style --poses --clutter --reuse 3
#   train stage30 ckpt/stage29 7.6 43 1.5e-4 (the same flags)
#   train stage31 /tmp/stage30 6.0 44 1e-4 (the same flags)
# Session 40 (stage 32, more questions in the mix; from the shipped mean of 26-28; not shipped):
#   train stage32 assets/model 8.0 45 1e-4 --empty-rate 0.25 --hard-negatives 0.5 --variety --lookalikes --style --qa-frac 0.6
#   OUT=DIR bash docs/experiments/train_calls.sh train NAME INIT MINUTES SEED LR [extra engine.train flags]
#   OUT=DIR bash docs/experiments/train_calls.sh eval NAME...   (weights from ckpt/NAME)
# train: python -m engine.train from INIT (assets/model or ckpt/NAME) into ckpt/NAME, the checkpoint
#        returned as $OUT/NAME.tgz.* (16 MiB pieces; join with cat, then tar xzf into ckpt/).
# eval:  python -m engine.evaluate on the GPU, 1,000 independent and 1,000 own scenes and the
#        500-scene questions, for every NAME at once, reports as $OUT/eval.tgz. Not run yet: session 34
#        spent its device time on training and evaluated on the CPU (1,000 scenes take ~3 min there).
# On the device machine the wheels it lacks were installed first (the device README), into /tmp/site.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --target /tmp/site .wt/whl/*.whl 2>&1 | tail -2
nvidia-smi --query-gpu=name --format=csv,noheader
phase=$1; shift
case $phase in
  train)
    name=$1 init=$2 minutes=$3 seed=$4 lr=$5; shift 5
    python3 -m engine.train --out "/tmp/$name" --init "$init" --minutes "$minutes" --seed "$seed" --lr "$lr" \
      --warmup 50 --qa-frac 0.4 --queries 12 --reuse 2 --coord-sigma 3 2 --size-sigma 4 3 --heldout 0 \
      --save-every 60 "$@" 2>&1 | tee "$OUT/train-$name.log" | grep -E "^(train|done)|step +[0-9]*00/"
    tar czf - -C /tmp "$name" | split -b 15M - "$OUT/$name.tgz."
    ;;
  eval)
    mkdir -p /tmp/eval
    for name in "$@"; do
      w=ckpt/$name; [ "$name" = shipped ] && w=assets/model
      for gen in independent own; do
        python3 -m engine.evaluate --weights "$w" --generator $gen --n 1000 --device cuda --dtype fp32 --latency-runs 0 \
          --json "/tmp/eval/$name-$gen.json" > "/tmp/eval/$name-$gen.txt" 2>&1 &
      done
      python3 -m engine.evaluate --weights "$w" --qa 500 --qa-only --device cuda --dtype fp32 \
        --json "/tmp/eval/$name-qa.json" > "/tmp/eval/$name-qa.txt" 2>&1 &
    done
    wait
    grep -h -E "^targets|^(count|yesno|yes_no|colour|which|list|caption) " /tmp/eval/*.txt
    for f in /tmp/eval/*.txt; do echo "== $f"; grep -E "targets|count |yes|colour|caption " "$f" | head -8; done
    tar czf "$OUT/eval.tgz" -C /tmp eval
    ;;
esac
