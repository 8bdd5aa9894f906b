# Per CC with On-Ramp: how many packets On-Ramp's programs handled per MB
# the bottleneck delivered (data segments stamped at the senders' egress,
# ACKs echoed at the client's), the bytes per stamped segment (GSO packets
# count once, as tc sees them), and how many points busier the machine's
# CPUs were with On-Ramp than without it in the same repeat: medians over
# the repeats, (min-max). Run as: jq -r -f packets.jq results.json
def median: sort | .[length / 2 | floor];
def spread: "\(median) (\(min) to \(max))";
def r(n): . * n | round / n;
def mb: .throughput_bps * .duration_ms / 8e9;
(reduce (.variants[] | select(.name | test("onramp") | not)) as $v ({};
  .[$v.cc] = ($v.runs | INDEX(.repeat | tostring)))) as $off
| .variants[]
| select(.name | test("onramp"))
| .cc as $cc
| [.runs[] | {stamps: (.onramp.counters.stamped / mb), echoes: (.onramp.counters.echoed / mb),
             seg: (mb * 1e6 / .onramp.counters.stamped),
             cpu: ((.cpu_busy - $off[$cc][.repeat | tostring].cpu_busy) * 100)}] as $r
| "\($cc): stamps per MB \([$r[].stamps | r(1)] | spread), echoes per MB \([$r[].echoes | r(1)] | spread), bytes per stamped segment \([$r[].seg | round] | spread), cpu points added \([$r[].cpu | r(10)] | spread)"
