#!/bin/bash
# Session 43: the image prefix prefilled as the fused decode step runs a layer (TextModel._prefill_prefix_fused), on the lent GPU.
#   OUT=DIR bash docs/experiments/session43_calls.sh check   (prefix check and timing, verify, one-image check, profile)
#   OUT=DIR bash docs/experiments/session43_calls.sh quick   (prefix check and the profile alone)
#   OUT=DIR bash docs/experiments/session43_calls.sh load [ROUNDS]   (engine.loadbench: detect unique A/B against .wt/old, then the table)
#   (session 43: "check" ran on an H200 with the first block size; "quick" then "load 1" on an H100 with the final one)
# Results in $OUT/results.tgz, re-packed after each stage (a run stopped at its limit returns what it did).
source docs/experiments/device_env.sh
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/results.tgz -C $OUT r; }
case $1 in
  check)
    python3 docs/experiments/prefix_prefill_check.py --json $R/prefix-check.json 2>&1 | tee $R/prefix-check.txt; pack
    new engine.verify --weights assets/model --device cuda --dtype fp32 2>&1 | tail -1 | tee $R/verify-fp32.txt
    new engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
    python3 docs/experiments/one_image_check.py 2>&1 | tail -1 | tee $R/one-image.txt; pack
    new engine.profile --images 1,8 --batch 1,64 --top 30 --json $R/profile.json > $R/profile.txt 2>&1
    grep -E "^(prefill|decode)" $R/profile.txt; pack
    ;;
  quick)
    python3 docs/experiments/prefix_prefill_check.py --json $R/prefix-check.json 2>&1 | tee $R/prefix-check.txt; pack
    new engine.profile --images 1,8 --batch 1 --top 12 --json $R/profile.json > $R/profile.txt 2>&1
    grep -E "^(prefill|decode)|rope|residual" $R/profile.txt; pack
    ;;
  load)
    rounds="${2:-1 2}"
    for round in $rounds; do
      for tree in old new; do
        $tree engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $R/ab-$tree-$round.json \
          > $R/ab-$tree-$round.txt 2>&1
        echo "$tree $round"; grep -E "^\| detect" $R/ab-$tree-$round.txt
      done
      pack
    done
    new engine.loadbench --device cuda --json $R/loadbench.json > $R/loadbench.txt 2>&1; head -22 $R/loadbench.txt; pack
    ;;
esac
