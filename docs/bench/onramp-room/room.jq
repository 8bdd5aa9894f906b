# The experiment's build (room-when-due.patch) counted in its sockops
# program, in three counters that On-Ramp's tc programs leave at zero when
# nothing pauses (clamped, malformed, beta_samples): the data segments and
# the pure ACKs it gave no room, and the STAMPs its parse callback saw.
# The bench adds the counters up over every interface's status, and each
# status carries the one sockops program's counters under these tc names,
# so they are divided by the number of interfaces. Prints, per repeat, the
# segments with and without room.
.variants[] | select(.name | test("onramp")) | .runs[] | .onramp as $o | $o.counters as $c
| "repeat \(.repeat): data segments with room \($c.stamped + $c.spared + $c.stamp_failed) (stamped \($c.stamped), spared \($c.spared)), without \($c.clamped / $o.interfaces); pure ACKs with room \($c.echoed + $c.echo_empty) (echoed \($c.echoed)), without \($c.malformed / $o.interfaces); STAMPs the receivers parsed \($c.beta_samples / $o.interfaces)"
