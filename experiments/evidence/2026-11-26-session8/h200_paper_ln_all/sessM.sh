#!/bin/bash
# One H200 (eighth session): the follow-up's own recipe for the K=61 model on Pathfinder, run long
# across holds: Table 7 (layer norm), techniques=followup (easy + intermediate + hard, 67 epochs),
# budget.minutes=100 (about 65 epochs at this card's rate), resumed from outputs/paper_ln_all when
# it is carried. Stop with: kill -TERM $(cat /tmp/sess/run.pid)  (checkpoint, then exit).
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false arm=locality_k61 task=pathfinder profile=budget techniques=followup"
T0=$SECONDS; log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
$R budget.minutes=0.02 workers=16 output_dir=outputs/prepM > $S/prep.log 2>&1
log prepdone
$R budget.minutes=100 ++train.plateau_patience=15 output_dir=outputs/paper_ln_all >> $S/paper_ln_all.log 2>&1 &
echo $! > $S/run.pid; wait; log ALLDONE
