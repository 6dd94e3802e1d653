#!/bin/bash
# Session 42: the split-K decode attention with its image-prefix blocks pipelined (decode_attention(stages=N)), one H200.
#   OUT=DIR bash docs/experiments/session42_calls.sh sweep   (the attention's shapes, stages 1..4)
#   OUT=DIR bash docs/experiments/session42_calls.sh check   (verify, one-image check, engine.bench A/B, profile)
#   OUT=DIR bash docs/experiments/session42_calls.sh load    (engine.loadbench)
# Results in $OUT/results.tgz, re-packed after each stage (a run stopped at its limit returns what it did).
# (The 8-bit prefix experiment's calls are on the branch experiment/int8-prefix.)
source docs/experiments/device_env.sh
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/results.tgz -C $OUT r; }
case $1 in
  sweep)
    python3 docs/experiments/pipelined_attention_sweep.py --json $R/sweep.json 2>&1 | tee $R/sweep.txt; pack
    ;;
  int8)  # the 8-bit prefix branch's engine (.wt/int8) with the pipelined prefix loop added
    (cd .wt/int8 && python3 docs/experiments/int8_prefix_attention.py --batch 32,64 --json $R/int8-sweep.json 2>&1 \
      | tee $R/int8-sweep.txt | grep -v "max |")
    pack
    ;;
  check)
    new engine.verify --weights assets/model --device cuda --dtype fp32 2>&1 | tail -1 | tee $R/verify-fp32.txt
    new engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
    python3 docs/experiments/one_image_check.py 2>&1 | tail -1 | tee $R/one-image.txt; pack
    for round in 1 2; do
      old engine.bench --device cuda --batch 1,32,64 --json $R/bench-old-$round.json 2>&1 | tail -4
      new engine.bench --device cuda --batch 1,32,64 --json $R/bench-new-$round.json 2>&1 | tail -4
    done
    pack
    new engine.profile --images 1,8 --batch 1,64 --json $R/profile.json > $R/profile.txt 2>&1
    grep -E "^(prefill|decode)|attention" $R/profile.txt; pack
    ;;
  load)
    new engine.loadbench --device cuda --json $R/loadbench.json > $R/loadbench.txt 2>&1; head -22 $R/loadbench.txt; pack
    ;;
esac
