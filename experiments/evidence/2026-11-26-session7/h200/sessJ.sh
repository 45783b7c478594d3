#!/bin/bash
# One H200 (seventh session): the lattice generator (render version 3) on easy, Table 7's k61
# model with batch norm (A) and with its own layer norm (B), side by side on one GPU, 7.5 min each.
S=$OUT/logs; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false arm=locality_k61 task=pathfinder profile=budget task.difficulty=easy ++task.generate.lattice=true"
T0=$SECONDS; log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
$R budget.minutes=0.02 workers=16 output_dir=outputs/prepJ > $S/prep.log 2>&1
log prepdone
$R ++model.norm=batch budget.minutes=7.5 output_dir=outputs/lat_bn_easy > $S/lat_bn_easy.log 2>&1 &
A=$!
$R budget.minutes=7.5 output_dir=outputs/lat_ln_easy > $S/lat_ln_easy.log 2>&1 &
B=$!
wait $A $B; log ALLDONE
for r in lat_bn_easy lat_ln_easy; do cp $(find outputs/$r -name history.csv) $OUT/$r.history.csv; cp $(find outputs/$r -name metrics.json) $OUT/$r.metrics.json; done
cat $S/driver.log; tail -n 2 $S/*.log
