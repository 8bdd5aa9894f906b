# sections-3.patch: the peer's statistics split into its lookup and the
# rest, the spared segment's departure time, the sender's flow lookup, and
# two steps that hold only the timing itself (a counter and a clock read).
# Run as: jq -r -f sections-3.jq sections-3/results.json
.variants[] | select(.onramp) | .runs[] | .onramp.counters as $c |
"repeat \(.repeat):\n" +
"  per ECHO (\($c.echoes)): the peer's lookup \($c.malformed/$c.echoes|round) ns, the rest of its statistics \($c.no_clock/$c.echoes|round) ns; the timing alone \($c.start_paused/$c.echoes|round) and \($c.clamped/$c.echoes|round) ns\n" +
"  egress, per data segment with room (\($c.stamped+$c.spared)): flow lookup \($c.stamp_failed/($c.stamped+$c.spared)|round) ns; per spared segment (\($c.spared)): its departure time \($c.unknown_flow/$c.spared|round) ns"
