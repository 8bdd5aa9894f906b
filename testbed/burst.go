package testbed

// BurstBytes is the size of the bottleneck's htb bucket: what the shaper
// sends at once after an idle spell (see newHTBClassParams). A model of
// the bottleneck, such as the INT hop's, needs it to match the real queue.
// It is 0 when the bottleneck is not shaped. Bottlenecks[0].BurstBytes
// holds the same value.
func (d *Dumbbell) BurstBytes() uint32 {
	return d.Config.bottleneck().BurstBytes()
}
