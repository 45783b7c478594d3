#!/bin/bash
# Wait until the driver log says $1 or $2 seconds pass; print progress; copy results to $OUT.
S=/tmp/sess; END=$((SECONDS+${2:-560}))
while [ $SECONDS -lt $END ] && ! grep -q "$1" $S/driver.log 2>/dev/null; do sleep 10; done
cat $S/driver.log
for h in outputs/*/runs/*/pathfinder/budget/seed0/history.csv; do
  echo "== $h"; awk -F, '$6!=""' $h | tail -4; tail -1 $h
done 2>/dev/null
grep -h "best val\|Error" $S/*.log | tail -10
mkdir -p $OUT; tar czf $OUT/records.tgz --exclude=checkpoints outputs/*/runs $S 2>/dev/null; ls -la $OUT
