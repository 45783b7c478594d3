#!/bin/bash
# x4 session driver (seventh session): test the reach explanation of k61's chance level on generated
# Pathfinder (experiments/pathfinder_reach.py: one window settles ~6% of hard images at depth 6, ~83% at
# depth 12, 61% of easy ones at depth 6). GPU 3: S4D with batch norm (S4D's own Pathfinder norm), hard, the global-reach control. 20-minute budgets, all scored.
# Start: (setsid nohup bash .gpu/sessI.sh > /tmp/x.out 2>&1 < /dev/null &); poll: bash .gpu/pollE.sh ALLDONE 570
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false arm=locality_k61 task=pathfinder profile=budget"
T0=$SECONDS
log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
CUDA_VISIBLE_DEVICES=0 $R task.difficulty=all budget.minutes=0.05 workers=60 output_dir=outputs/prep > $S/prep.log 2>&1
log prepdone
B="budget.minutes=20"
CUDA_VISIBLE_DEVICES=0 $R ++model.norm=batch ++model.depth=12 $B output_dir=outputs/bn_d12_hard > $S/bn_d12_hard.log 2>&1 &
A=$!
CUDA_VISIBLE_DEVICES=1 $R ++model.norm=batch ++model.depth=12 techniques=followup $B output_dir=outputs/bn_d12_all > $S/bn_d12_all.log 2>&1 &
B1=$!
CUDA_VISIBLE_DEVICES=2 $R ++model.norm=batch task.difficulty=easy $B output_dir=outputs/bn_d6_easy > $S/bn_d6_easy.log 2>&1 &
C=$!
CUDA_VISIBLE_DEVICES=3 python experiments/run.py progress=false arm=s4 task=pathfinder profile=budget ++model.norm=batch $B output_dir=outputs/s4_bn_hard > $S/s4_bn_hard.log 2>&1 &
D=$!
wait $A $B1 $C $D; log ALLDONE
