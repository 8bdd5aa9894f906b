# The departures run (departures.patch): its build counts, in three of
# On-Ramp's counters that stay at zero in these runs, what On-Ramp's departure
# time did to each segment it saw. Prints them with the stamps and echoes.
.variants[] | select(.name | test("onramp")) | .runs[] | .onramp.counters
| "departure times moved later than TCP's own: \(.clamped), by more than 100 us: \(.malformed); segments without a departure time of TCP's: \(.beta_samples)",
  "data segments with room: \(.stamped + .spared + .stamp_failed), stamped \(.stamped), spared \(.spared), room left unfilled \(.stamp_failed)",
  "pure ACKs with room: \(.echoed + .echo_empty), echoed \(.echoed), left as PAD \(.echo_empty); pauses \(.pauses)"
