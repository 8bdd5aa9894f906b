# Per CC: its web-search flows under 10 KB, mean FCT per run, against how
# busy the machine's CPUs were in that run. The line fitted to the runs
# without On-Ramp predicts, from the CPU busy of the runs with it, the FCT
# they would have had had On-Ramp cost only that CPU.
def mean: add / length;
def fit(xs; ys):
  (xs | mean) as $mx | (ys | mean) as $my
  | ([range(0; xs | length) as $i | (xs[$i] - $mx) * (ys[$i] - $my)] | add) as $sxy
  | ([xs[] | (. - $mx) * (. - $mx)] | add) as $sxx
  | ([ys[] | (. - $my) * (. - $my)] | add) as $syy
  | {slope: ($sxy / $sxx), mx: $mx, my: $my, r: ($sxy / (($sxx * $syy) | sqrt))};
def runs(on):
  [.variants[] | select((.name | test("onramp")) == on) | {cc, runs: [.runs[] | {repeat, cpu: .cpu_busy, fct: (.fct[] | select(.bucket == "<10KB") | .mean_us / 1000)}]}];
(runs(false) | INDEX(.cc)) as $off
| runs(true)[]
| .cc as $cc
| ($off[$cc].runs) as $a
| .runs as $b
| fit([$a[].cpu]; [$a[].fct]) as $f
| ([$b[].cpu] | mean) as $cpu_on
| ([$b[] as $y | $a[] | select(.repeat == $y.repeat and $y.cpu > .cpu)] | length) as $busier
| "\($cc): small-flow mean FCT \($f.my * 100 | round / 100) ms at cpu \($f.mx * 1000 | round / 10) % without On-Ramp, \([$b[].fct] | mean * 100 | round / 100) ms at \($cpu_on * 1000 | round / 10) % with it; without it, \($f.slope / 100 * 1000 | round / 1000) ms more per point of cpu (r \($f.r * 100 | round / 100)), which predicts \(($f.my + $f.slope * ($cpu_on - $f.mx)) * 100 | round / 100) ms at On-Ramp's cpu; cpu busier with On-Ramp in \($busier) of \($b | length) repeats"
