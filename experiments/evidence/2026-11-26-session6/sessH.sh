#!/bin/bash
# x4 session driver (sixth session): k61 on Pathfinder with batch norm and the follow-up's
# remedies against memorising. GPUs 0-2: 23-minute budgets, scored. GPU 3: a 60-minute budget
# stopped by SIGTERM when the others end; its record (checkpoint included) goes to $OUT/long.tgz
# so a later session resumes it with the same command.
# Start: (setsid nohup bash .gpu/sessH.sh > /tmp/x.out 2>&1 < /dev/null &); poll: bash .gpu/pollE.sh ALLDONE 570
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false arm=locality_k61 task=pathfinder profile=budget ++model.norm=batch"
T0=$SECONDS
log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
CUDA_VISIBLE_DEVICES=0 $R task.difficulty=all budget.minutes=0.05 workers=60 output_dir=outputs/prep > $S/prep.log 2>&1
log prepdone
B="budget.minutes=23"
D4="techniques=followup ++techniques.tasks.pathfinder.augment.d4=true"
CUDA_VISIBLE_DEVICES=0 $R $D4 $B output_dir=outputs/bn_all_d4_s0 > $S/bn_all_d4_s0.log 2>&1 &
A=$!
CUDA_VISIBLE_DEVICES=1 $R $D4 $B ++model.token_encoding=intensity output_dir=outputs/bn_all_d4_int_s0 > $S/bn_all_d4_int_s0.log 2>&1 &
B1=$!
CUDA_VISIBLE_DEVICES=2 $R techniques=followup $B output_dir=outputs/bn_all_s0 > $S/bn_all_s0.log 2>&1 &
C=$!
CUDA_VISIBLE_DEVICES=3 $R $D4 budget.minutes=60 seed=1 output_dir=outputs/bn_all_d4_s1_long > $S/bn_all_d4_s1_long.log 2>&1 &
D=$!
wait $A $B1 $C; log scored_done
kill -TERM $D; wait $D; log long_stopped
tar czf /tmp/sess/long.tgz outputs/bn_all_d4_s1_long
log ALLDONE
