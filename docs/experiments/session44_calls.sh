#!/bin/bash
# Session 44: attention on its own Triton kernel (engine.kernels.bidirectional_attention), for the vision tower and the text prefix, on the lent GPU.
#   OUT=DIR bash docs/experiments/session44_calls.sh check   (kernel check + shape sweep, tower check, verify, one-image check,
#                                                              profile of this tree and of .wt/old, loadbench detect unique A/B)
#   OUT=DIR bash docs/experiments/session44_calls.sh text [ROUNDS]    (the same after the vision tower went back to cuDNN, without the
#                                                              sweep and the tower checks; loadbench A/B, ROUNDS default "1 2")
#   (session 44: "check" ran on an H100 with the vision tower on the kernel and shape (128, 64, 8, 2); "text" with the final code)
#   OUT=DIR bash docs/experiments/session44_calls.sh lean     (the "text" checks in order of need, no loadbench)
#   OUT=DIR bash docs/experiments/session44_calls.sh load [ROUNDS]   (loadbench detect unique A/B against .wt/old, then the table)
# Results in $OUT/results.tgz, re-packed after each stage (a run stopped at its limit returns what it did).
source docs/experiments/device_env.sh
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/results.tgz -C $OUT r; }
ab() {  # loadbench detect unique, c=1 and 64, old then new, for each round given
  for round in $1; do
    for tree in old new; do
      $tree engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $R/ab-$tree-$round.json \
        > $R/ab-$tree-$round.txt 2>&1
      echo "$tree $round"; grep -E "^detect" $R/ab-$tree-$round.txt
    done
    pack
  done
}
checks() {  # verify fp32/bf16, one-image check, profile of this tree and of .wt/old
  new engine.verify --weights assets/model --device cuda --dtype fp32 2>&1 | tail -1 | tee $R/verify-fp32.txt
  new engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
  python3 docs/experiments/one_image_check.py > $R/one-image.txt 2>&1; grep -E "DIFFERS|False|PASS|FAIL" $R/one-image.txt; pack
  for tree in new old; do
    $tree engine.profile --images 1,8 --batch 1 --top 12 --json $R/profile-$tree.json > $R/profile-$tree.txt 2>&1
    echo $tree; grep -E "^(prefill)|attention|flash|_attn|_bidir" $R/profile-$tree.txt | head -12
  done
  pack
}
case $1 in
  check)
    python3 docs/experiments/vision_attention_check.py --sweep --json $R/vision-attention.json 2>&1 | tee $R/vision-attention.txt; pack
    python3 docs/experiments/vision_gemm_pad_check.py --json $R/gemm-pad.json 2>&1 | tee $R/gemm-pad.txt
    python3 docs/experiments/fused_vision_check.py 2>&1 | tail -4 | tee $R/fused-vision.txt
    checks
    ab "1"
    ;;
  text)
    python3 docs/experiments/vision_attention_check.py --json $R/vision-attention.json 2>&1 | tee $R/vision-attention.txt; pack
    checks
    ab "${2:-1 2}"
    ;;
  lean)  # what a short device budget allows: the engine checks first, then the text-prefix timing and the profiles
    new engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
    python3 docs/experiments/one_image_check.py > $R/one-image.txt 2>&1; grep -E "DIFFERS|False|PASS|FAIL" $R/one-image.txt; pack
    python3 docs/experiments/vision_attention_check.py --json $R/vision-attention.json 2>&1 | grep -E "text|ok|FAIL" | tee $R/vision-attention.txt; pack
    for tree in new old; do
      $tree engine.profile --images 1,8 --batch 1 --top 12 --json $R/profile-$tree.json > $R/profile-$tree.txt 2>&1
      echo $tree; grep -E "^(prefill)|attention|flash|_attn|_bidir" $R/profile-$tree.txt | head -12; pack
    done
    new engine.verify --weights assets/model --device cuda --dtype fp32 2>&1 | tail -1 | tee $R/verify-fp32.txt; pack
    ;;
  load)
    ab "${2:-1 2}"
    new engine.loadbench --device cuda --json $R/loadbench.json > $R/loadbench.txt 2>&1; head -22 $R/loadbench.txt; pack
    ;;
esac
