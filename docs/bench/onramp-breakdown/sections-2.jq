# sections-2.patch: the control, the receiver's one-way delay and the
# sender's flow lookup split into steps, as in sections-1.
# Run as: jq -r -f sections-2.jq sections-2/results.json
.variants[] | select(.onramp) | .runs[] | .onramp.counters as $c |
"repeat \(.repeat):\n" +
"  control, per ECHO (\($c.echoes)): flow lookup \($c.malformed/$c.echoes|round) ns, CLOCK_TAI read and the peer's statistics \($c.no_clock/$c.echoes|round) ns, the rest \($c.stamp_failed/$c.echoes|round) ns\n" +
"  one-way delay, per STAMP (\($c.rx_stamps)): flow lookup \($c.rx_no_clock/$c.rx_stamps|round) ns, the sender's clock entry \($c.start_paused/$c.rx_stamps|round) ns\n" +
"  egress, per data segment with room (\($c.stamped+$c.spared)): flow lookup \($c.unknown_flow/($c.stamped+$c.spared)|round) ns"
