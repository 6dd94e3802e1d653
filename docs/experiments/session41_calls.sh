#!/bin/bash
# Session 41: sampling that computes only what the rows' grammar states can use (SampleHeads: the three
# point/detect tokens' logits instead of the vocabulary's, one region decoder) and the vision tower's fused
# blocks, A/B against the commit before them (a copy of its engine/ and grammars/ carried in .wt/old), one H200.
#   OUT=DIR bash docs/experiments/session41_calls.sh check   (fused vision check, verify, one-image check,
#                                                             engine.bench A/B, profile)
#   OUT=DIR bash docs/experiments/session41_calls.sh load    (engine.loadbench, this commit; A/B rows)
source docs/experiments/device_env.sh
case $1 in
  check)
    python3 docs/experiments/fused_vision_check.py 2>&1 | tail -8
    for dt in fp32 bf16; do
      new engine.verify --weights assets/model --device cuda --dtype $dt 2>&1 | tail -3
    done
    python3 docs/experiments/one_image_check.py 2>&1 | tail -6
    for round in 1 2; do
      old engine.bench --device cuda --batch 1,32,64 --json $OUT/bench-old-$round.json 2>&1 | tail -4
      new engine.bench --device cuda --batch 1,32,64 --json $OUT/bench-new-$round.json 2>&1 | tail -4
    done
    new engine.profile --images 1,8 --batch 1,64 --json $OUT/profile-new.json > $OUT/profile-new.txt 2>&1
    grep -E "^(prefill|decode)|matrix|attention|elementwise|layer norm|GELU" $OUT/profile-new.txt
    ;;
  load)
    new engine.loadbench --device cuda --json $OUT/loadbench-new.json > $OUT/loadbench-new.txt 2>&1; head -22 $OUT/loadbench-new.txt
    for round in 1 2; do
      for v in old new; do
        $v engine.loadbench --device cuda --tasks detect,point --modes unique --conc 1,64 --json $OUT/ab-$v-$round.json 2>&1 | grep -E "^(detect|point)" | head -4
      done
    done
    ;;
esac
# (debug) the new engine.bench twice with its whole log; on a failure once more with CUDA_LAUNCH_BLOCKING=1
if [ "$1" = debug ]; then
  python3 docs/experiments/fused_vision_check.py 2>&1 | tail -3
  for round in 1 2; do
    new engine.bench --device cuda --batch 1,32,64 --json $OUT/bench-new-$round.json > $OUT/bench-new-$round.txt 2>&1
    rc=$?; tail -4 $OUT/bench-new-$round.txt; echo "rc $rc"
    if [ $rc != 0 ]; then
      grep -B2 -A3 -E "Error|error" $OUT/bench-new-$round.txt | head -40
      CUDA_LAUNCH_BLOCKING=1 new engine.bench --device cuda --batch 1,32,64 > $OUT/bench-blocking.txt 2>&1
      echo "blocking rc $?"; grep -B30 -A3 -E "Error" $OUT/bench-blocking.txt | head -60; exit 1
    fi
  done
  old engine.bench --device cuda --batch 1,32,64 --json $OUT/bench-old-3.json 2>&1 | tail -4
fi
# (final) the benches again with the capture fix, then the load rows
if [ "$1" = final ]; then
  for round in 1 2; do
    new engine.bench --device cuda --batch 1,32,64 --json $OUT/bench-new-$round.json 2>&1 | tail -4
    old engine.bench --device cuda --batch 1,32,64 --json $OUT/bench-old-$round.json 2>&1 | tail -4
  done
  bash $0 load
fi
# (sampling) with the fused sampling kernels: checks, engine.bench A/B, engine.loadbench, profile; results in
# $OUT/results.tgz (re-packed after each stage, so a run stopped at its limit still returns what it did)
if [ "$1" = sampling ]; then
  R=$OUT/r; mkdir -p $R
  pack() { tar czf $OUT/results.tgz -C $OUT r; }
  new engine.verify --weights assets/model --device cuda --dtype fp32 2>&1 | tail -2 | tee $R/verify-fp32.txt
  new engine.bench --device cuda --batch 1,32,64 --json $R/bench-new-1.json 2>&1 | tail -4
  old engine.bench --device cuda --batch 1,32,64 --json $R/bench-old-1.json 2>&1 | tail -4
  pack
  new engine.loadbench --device cuda --json $R/loadbench-new.json > $R/loadbench-new.txt 2>&1; sed -n '/^  task/,$p' $R/loadbench-new.txt | head -14
  pack
  for v in old new; do
    $v engine.loadbench --device cuda --tasks detect,point --modes unique --conc 1 --json $R/ab-$v.json 2>&1 | grep -E "^(detect|point) " | head -2
  done
  pack
  new engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
  python3 docs/experiments/one_image_check.py 2>&1 | tail -2 | tee $R/one-image.txt
  pack
  new engine.profile --images 1,8 --batch 1,64 --json $R/profile-new.json > $R/profile-new.txt 2>&1
  grep -E "^(prefill|decode)" $R/profile-new.txt
  pack
fi
# (cudnn) may the vision tower's attention use cuDNN's kernel: the check, then detect unique rows A/B
# against the commit before (.wt/old: the same tree with flash attention in the vision tower)
if [ "$1" = cudnn ]; then
  python3 docs/experiments/cudnn_vision_check.py > $OUT/cudnn-check.txt 2>&1; rc=$?
  tail -12 $OUT/cudnn-check.txt; [ $rc = 0 ] || exit 1
  for v in new old new old; do
    $v engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $OUT/cudnn-ab-$v-$SECONDS.json 2>&1 | grep -E "^(detect|prefill)" | head -3
  done
fi
