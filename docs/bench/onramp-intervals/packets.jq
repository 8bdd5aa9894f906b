# Per CC with On-Ramp: how many packets On-Ramp's programs handled per MB
# the bottleneck delivered (data segments stamped at the senders' egress,
# data segments left unstamped there by sparse stamps, ACKs echoed at the
# client's), the bytes per data segment with room for a stamp (GSO packets
# count once, as tc sees them; before sparse stamps every one was
# stamped), and how many points busier the machine's
# CPUs were with On-Ramp than without it in the same repeat: medians over
# the repeats (of an even count, the mean of the middle two, as the bench
# takes it), (min to max). Run as: jq -r -f packets.jq results.json
def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def r(n): . * n | round / n;
def spread(n): "\(median | r(n)) (\(min | r(n)) to \(max | r(n)))";
def mb: .throughput_bps * .duration_ms / 8e9;
(reduce (.variants[] | select(.name | test("onramp") | not)) as $v ({};
  .[$v.cc] = ($v.runs | INDEX(.repeat | tostring)))) as $off
| .variants[]
| select(.name | test("onramp"))
| .cc as $cc
| [.runs[] | {stamps: (.onramp.counters.stamped / mb), spared: ((.onramp.counters.spared // 0) / mb),
             echoes: (.onramp.counters.echoed / mb),
             seg: (mb * 1e6 / (.onramp.counters.stamped + (.onramp.counters.spared // 0))),
             cpu: ((.cpu_busy - $off[$cc][.repeat | tostring].cpu_busy) * 100)}] as $r
| "\($cc): stamps per MB \([$r[].stamps] | spread(1)), unstamped per MB \([$r[].spared] | spread(1)), echoes per MB \([$r[].echoes] | spread(1)), bytes per data segment \([$r[].seg] | spread(1)), cpu points added \([$r[].cpu] | spread(10))"
