#!/bin/bash
# Session 40: the decode step with each layer's four projections as two GEMMs (FusedProjections),
# A/B against the commit before it (a copy of its engine/ and grammars/ carried in .wt/old), one H200.
#   OUT=DIR bash docs/experiments/fused_proj_calls.sh bench     (verify, engine.bench A/B, profile)
#   OUT=DIR bash docs/experiments/fused_proj_calls.sh load      (engine.loadbench, this commit; A/B rows)
#   OUT=DIR bash docs/experiments/fused_proj_calls.sh graph     (the captured one-image prefill: check, loadbench,
#                                                                A/B against .wt/mid = this tree without it, and .wt/old)
source docs/experiments/device_env.sh
mid() { (cd "$here/.wt/mid" && python3 -m "$@"); }
case $1 in
  bench)
    for dt in fp32 bf16; do
      new engine.verify --weights assets/model --device cuda --dtype $dt 2>&1 | tail -4
    done
    for round in 1 2; do
      SECONDS=0; old engine.bench --device cuda --batch 1,32,64 --json $OUT/bench-old-$round.json 2>&1 | tail -5; echo "old ${SECONDS}s"
      SECONDS=0; new engine.bench --device cuda --batch 1,32,64 --json $OUT/bench-new-$round.json 2>&1 | tail -5; echo "new ${SECONDS}s"
    done
    new engine.profile --images 1 --batch 1,32,64 --json $OUT/profile-new.json 2>&1 | tail -40
    ;;
  load)
    new engine.loadbench --device cuda --json $OUT/loadbench-new.json 2>&1 | tail -16
    old engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $OUT/loadbench-old.json 2>&1 | tail -4
    new engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $OUT/loadbench-new2.json 2>&1 | tail -4
    ;;
  graph)
    python3 docs/experiments/one_image_check.py 2>&1 | tail -8
    new engine.loadbench --device cuda --json $OUT/loadbench-graph.json > $OUT/loadbench-graph.txt 2>&1; head -20 $OUT/loadbench-graph.txt
    for round in 1 2; do
      for v in old mid new; do
        $v engine.loadbench --device cuda --tasks detect,point --modes unique --conc 1 --json $OUT/ab-$v-$round.json > /dev/null 2>&1; echo "$v $round rc $?"
      done
    done
    ;;
esac
