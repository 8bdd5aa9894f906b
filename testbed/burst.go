package testbed

// BurstBytes is the size of the bottleneck's htb bucket: what the shaper
// sends at once after an idle spell (see newHTBClassParams). A model of
// the bottleneck, such as the INT hop's, needs it to match the real queue.
// It is 0 when the bottleneck is not shaped.
func (d *Dumbbell) BurstBytes() uint32 {
	if d.Config.BottleneckRate == 0 {
		return 0
	}
	rateBytes := d.Config.BottleneckRate / 8
	return uint32(rateBytes*burstTimeNs/1e9 + burstMTU)
}
