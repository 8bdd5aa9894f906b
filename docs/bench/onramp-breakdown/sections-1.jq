# sections-1.patch: each program's steps timed with a clock read at each
# end, the sums put in counters the runs leave at zero. Per run with
# On-Ramp, the mean ns of each step per packet that takes it, and the ms
# that step took in the run (each step's time includes the timing's own,
# which sections-3 measures).
# Run as: jq -r -f sections-1.jq sections-1/results.json
def ms(ns): "\(ns/1e6|round) ms";
.variants[] | select(.onramp) | .runs[] | .onramp.counters as $c |
([.bpf[] | select(.program == "onramp_egress")][0]) as $e |
([.bpf[] | select(.program == "onramp_ingress")][0]) as $i |
"repeat \(.repeat): egress \(ms($e.ns_per_run*$e.runs)) and ingress \(ms($i.ns_per_run*$i.runs)) in all\n" +
"  egress, every run (\($e.runs)): parse and option search \($c.malformed/$e.runs|round) ns, \(ms($c.malformed))\n" +
"  egress, data segments with room, stamped or spared (\($c.stamped+$c.spared)): \($c.unknown_flow/($c.stamped+$c.spared)|round) ns, \(ms($c.unknown_flow))\n" +
"  egress, ACKs with room, echoed or left empty (\($c.echoed+$c.echo_empty)): \($c.start_paused/($c.echoed+$c.echo_empty)|round) ns, \(ms($c.start_paused))\n" +
"  egress, segments without room: \(ms($c.stamp_failed))\n" +
"  ingress, every run (\($i.runs)): parse and option search \($c.no_clock/$i.runs|round) ns, \(ms($c.no_clock))\n" +
"  ingress, STAMPs (\($c.rx_stamps)): one-way delay \($c.rx_no_clock/$c.rx_stamps|round) ns, \(ms($c.rx_no_clock))\n" +
"  ingress, ECHOs (\($c.echoes)): the control \($c.clamped/$c.echoes|round) ns, \(ms($c.clamped))"
