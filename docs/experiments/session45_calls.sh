#!/bin/bash
# Session 45: the decode step's projections on engine.kernels.skinny_linear, on the lent GPU.
#   OUT=DIR bash docs/experiments/session45_calls.sh sweep   (kernel sweep against cuBLAS; engine.bench A/B against .wt/old
#                                                              with the sweep's shapes; verify and one-image check with them)
#   OUT=DIR bash docs/experiments/session45_calls.sh final [ROUNDS]  (the committed shapes: engine.bench A/B, verify,
#                                                              one-image check, loadbench detect unique A/B)
#   OUT=DIR bash docs/experiments/session45_calls.sh confirm  (engine.bench A/B, loadbench detect unique A/B, engine.bench A/B)
#   OUT=DIR bash docs/experiments/session45_calls.sh split    ([qkv | fc1] split too: sweep, engine.bench A/B, verify, one-image;
#                                                              see the stage's note)
#   OUT=DIR bash docs/experiments/session45_calls.sh table    (engine.bench A/B, then the whole engine.loadbench table)
# Results in $OUT/results.tgz, re-packed after each stage.
source docs/experiments/device_env.sh
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/results.tgz -C $OUT r; }
bench_ab() {  # $1: round label, $2: the command prefix that runs the new tree
  old engine.bench --device cuda --batch 1,32,64 --max-len 1024 --json $R/bench-old-$1.json > $R/bench-old-$1.txt 2>&1
  echo "old $1"; tail -5 $R/bench-old-$1.txt
  $2 engine.bench --device cuda --batch 1,32,64 --max-len 1024 --json $R/bench-new-$1.json > $R/bench-new-$1.txt 2>&1
  echo "new $1"; tail -5 $R/bench-new-$1.txt
  pack
}
swept() { python3 docs/experiments/skinny_bench.py $R/skinny.json "$@"; }
case $1 in
  sweep)
    python3 docs/experiments/skinny_gemm_check.py --json $R/skinny.json 2>&1 | tee $R/skinny.txt | grep -v "^  "; pack
    bench_ab 1 swept
    swept engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
    swept docs/experiments/one_image_check.py > $R/one-image.txt 2>&1; grep -E "PASS|FAIL" $R/one-image.txt; pack
    bench_ab 2 swept
    ;;
  final)
    python3 docs/experiments/skinny_gemm_check.py --narrow --rows 1,64 --json $R/skinny-narrow.json 2>&1 | tee $R/skinny-narrow.txt | grep -v "^  "; pack
    bench_ab 1 new
    new engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
    new engine.verify --weights assets/model --device cuda --dtype fp32 2>&1 | tail -1 | tee $R/verify-fp32.txt
    python3 docs/experiments/one_image_check.py > $R/one-image.txt 2>&1; grep -E "PASS|FAIL" $R/one-image.txt; pack
    for round in ${2:-1}; do
      for tree in old new; do
        $tree engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $R/ab-$tree-$round.json \
          > $R/ab-$tree-$round.txt 2>&1
        echo "$tree $round"; grep -E "^detect" $R/ab-$tree-$round.txt | head -2
      done
      pack
    done
    bench_ab 2 new
    ;;
  confirm)  # the committed shapes on another GPU: engine.bench A/B twice around loadbench detect unique A/B
    bench_ab 1 new
    for tree in old new; do
      $tree engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $R/ab-$tree-1.json \
        > $R/ab-$tree-1.txt 2>&1
      echo "$tree"; grep -E "^detect" $R/ab-$tree-1.txt | head -2
    done
    pack
    bench_ab 2 new
    ;;
  split)  # [qkv | fc1] split K too: sweep, then engine.bench A/B against .wt/old with the sweep's winners, verify and
          # the one-image check with them. Run in session 45 with rope_kv_write adding the partials (since reverted:
          # split 1 won at every row count, so both sides of that A/B ran the same shapes)
    python3 docs/experiments/skinny_gemm_check.py --split-in --json $R/skinny.json 2>&1 | tee $R/skinny-split.txt | grep -v "^  "; pack
    bench_ab 1 swept
    swept engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
    swept docs/experiments/one_image_check.py > $R/one-image.txt 2>&1; grep -E "PASS|FAIL" $R/one-image.txt; pack
    bench_ab 2 swept
    ;;
  table)  # engine.bench A/B against .wt/old (the commit before the kernel), then this tree's whole loadbench table
    bench_ab 1 new
    new engine.loadbench --device cuda --json $R/loadbench.json > $R/loadbench.txt 2>&1; tail -16 $R/loadbench.txt; pack
    ;;
esac
