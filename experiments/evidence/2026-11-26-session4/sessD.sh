#!/bin/bash
# x4 session driver (fourth session): the rest of the v0.1 grid (GPUs 0-2), Pathfinder k61 (GPU 3, 19 min),
# then the benchmark (GPU 0) and two 10-minute ListOps k61 runs with length bucketing (GPUs 1, 2).
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false"
T0=$SECONDS
log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
mkdir -p outputs/runs && cp -r experiments/grids/v0.1-budget-records/runs/. outputs/runs/
CUDA_VISIBLE_DEVICES=3 $R arm=locality_k61 task=pathfinder task.difficulty=all profile=budget budget.minutes=19 workers=40 output_dir=outputs/pf > $S/k61_pf19.log 2>&1 &
PF=$!
P="profile=budget budget.minutes=0.05 output_dir=outputs/prep"
CUDA_VISIBLE_DEVICES=0 $R arm=locality_k5 task=listops $P workers=12 > $S/prep_listops.log 2>&1 &
PL=$!
CUDA_VISIBLE_DEVICES=1 $R arm=locality_k5 task=text $P > $S/prep_text.log 2>&1 &
PT=$!
CUDA_VISIBLE_DEVICES=2 python experiments/bench_conv.py --kernels 61 --impls bf16 fft bf16_flip_tf32w bf16_flip bf16_flip_mmw --out $S/bench_conv.json > $S/bench_conv.log 2>&1 &
BC=$!
wait $PL $PT; log prepdone
G="python experiments/run_grid.py experiments/grids/v0.1-budget.yaml --claim-dir $S/claims"
$G --gpus 0,1 --deadline-minutes 11.5 -- output_dir=outputs > $S/gridA.log 2>&1 &
GA=$!
wait $BC; log bench_conv_done
$G --gpus 2 --deadline-minutes 10.5 -- output_dir=outputs > $S/gridB.log 2>&1 &
GB=$!
wait $GA; log gridA_done
CUDA_VISIBLE_DEVICES=0 python experiments/bench.py progress=false time_budget_s=400 out_dir=$S/bench > $S/bench.log 2>&1 &
BE=$!
export LRA_CONV_AUTO_TABLE=$S/bench_conv.json
CUDA_VISIBLE_DEVICES=1 $R arm=locality_k61 task=listops profile=budget budget.minutes=10 output_dir=outputs/l2s0 > $S/k61_listops10_s0.log 2>&1 &
L0=$!
wait $GB; log gridB_done
CUDA_VISIBLE_DEVICES=2 $R arm=locality_k61 task=listops profile=budget budget.minutes=10 seed=1 output_dir=outputs/l2s1 > $S/k61_listops10_s1.log 2>&1 &
L1=$!
wait $BE; log bench_done
wait $PF; log pf_done
wait $L0 $L1; log ALLDONE
