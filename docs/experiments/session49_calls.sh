#!/bin/bash
# Session 49: training stages for the embedded model (issues 16 and 17), with the decode-step bench
# first whenever the lent card is an H200 (issue 15's targets are H200 figures).
#   [T=S] [TABLE=1] [SCENE_FLAGS=...] OUT=DIR bash docs/experiments/session49_calls.sh NAME INIT SEED LR [extra engine.train flags]
# Runs `engine.bench --batch 1,32,64 --max-len 1024` of this tree when the card is an H200 (with TABLE=1
# also the whole `engine.loadbench` table and a second bench round; used in session 50), then
# trains NAME from INIT (assets/model, ckpt/NAME carried, or /tmp/NAME left by the call before on a
# warm machine) for what is left of T seconds (default 560), with the flags of stages 26-28 plus $SCENE_FLAGS
# (default --clutter --reuse 3 --qa-frac 0.5, sessions 49-50; session 51 gave --reuse 4 --qa-frac 0.5
# --foreign 0.4) and the extra flags (later flags override). The checkpoint comes back as
# $OUT/NAME.tgz.* (join with cat, tar xzf into ckpt/), the bench and the log in $OUT/r.tgz.
source docs/experiments/device_env.sh
start=$SECONDS
R=$OUT/r; mkdir -p $R
name=$1 init=$2 seed=$3 lr=$4; shift 4
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  new engine.bench --device cuda --batch 1,32,64 --max-len 1024 --json $R/bench-h200.json > $R/bench-h200.txt 2>&1
  grep -E '^ *(1|32|64) ' $R/bench-h200.txt
  if [ "${TABLE:-0}" = 1 ]; then
    new engine.loadbench --device cuda --json $R/loadbench-h200.json > $R/loadbench-h200.txt 2>&1
    tail -16 $R/loadbench-h200.txt | head -13
    new engine.bench --device cuda --batch 1,32,64 --max-len 1024 --json $R/bench-h200-2.json > $R/bench-h200-2.txt 2>&1
    grep -E '^ *(1|32|64) ' $R/bench-h200-2.txt
  fi
  tar czf $OUT/r.tgz -C $OUT r
fi
minutes=$(python3 -c "print(round((${T:-560} - $SECONDS + $start) / 60, 2))")
echo "training $name from $init for $minutes minutes"
python3 -c "import sys; sys.exit($minutes < 1.5)" || { echo "too little time left to train"; exit 0; }
python3 -m engine.train --out "/tmp/$name" --init "$init" --minutes "$minutes" --seed "$seed" --lr "$lr" \
  --warmup 50 --queries 12 --coord-sigma 3 2 --size-sigma 4 3 --heldout 0 --save-every 60 \
  --empty-rate 0.25 --hard-negatives 0.5 --variety --lookalikes --style ${SCENE_FLAGS:---clutter --reuse 3 --qa-frac 0.5} \
  "$@" 2>&1 | tee "$R/train-$name.log" | grep -E "^(train|done)|calibrated|step +[0-9]*000/"
tar czf - -C /tmp "$name" | split -b 15M - "$OUT/$name.tgz."
tar czf $OUT/r.tgz -C $OUT r
