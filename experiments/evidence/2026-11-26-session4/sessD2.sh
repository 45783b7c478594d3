#!/bin/bash
# Replaces sessD.sh's tail (which left GPU 2 idle): k31 text seed 2 on GPU 2 now, then bench (GPU 0) and
# ListOps k61 10 min seed 0 (GPU 1) when grid A ends, ListOps seed 1 on GPU 2 after its grid cell.
S=/tmp/sess; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false"
log(){ echo "$1 $(date -u +%T)" >> $S/driver.log; }
pkill -f "bash .gpu/sessD.sh"; log driver1_stopped
GA=$(pgrep -f "run_grid.py.*--gpus 0,1")
python experiments/run_grid.py experiments/grids/v0.1-budget.yaml --claim-dir $S/claims --gpus 2 --deadline-minutes 4.5 -- output_dir=outputs > $S/gridC.log 2>&1 &
GC=$!

while kill -0 $GA 2>/dev/null; do sleep 2; done; log gridA_done
CUDA_VISIBLE_DEVICES=0 python experiments/bench.py progress=false time_budget_s=400 out_dir=$S/bench > $S/bench.log 2>&1 &
BE=$!
LRA_CONV_AUTO_TABLE=$S/bench_conv.json CUDA_VISIBLE_DEVICES=1 $R arm=locality_k61 task=listops profile=budget budget.minutes=10 output_dir=outputs/l2s0 > $S/k61_listops10_s0.log 2>&1 &
L0=$!
wait $GC; log gridC_done
LRA_CONV_AUTO_TABLE=$S/bench_conv.json CUDA_VISIBLE_DEVICES=2 $R arm=locality_k61 task=listops profile=budget budget.minutes=10 seed=1 output_dir=outputs/l2s1 > $S/k61_listops10_s1.log 2>&1 &
L1=$!
wait $BE; log bench_done
while pgrep -f "task=pathfinder" > /dev/null; do sleep 5; done; log pf_done
wait $L0 $L1; log ALLDONE
