package loader

import (
	"path/filepath"

	"github.com/ccload/ccload/internal/kernel"
)

// CCStatus describes one built-in CC and its state in the kernel.
type CCStatus struct {
	Name         string              `json:"name"`
	Summary      string              `json:"summary"`
	Attached     bool                `json:"attached"`
	Stale        bool                `json:"stale,omitempty"`
	Registration kernel.Registration `json:"registration,omitempty"`
	PinDir       string              `json:"pin_dir,omitempty"`
	Default      bool                `json:"default"`
	// SocketsInUse counts the sockets that use the CC, in every
	// generation.
	SocketsInUse int64             `json:"sockets_in_use"`
	Params       map[string]string `json:"params"`
	// Stats are the counters of the current generation.
	Stats Stats `json:"stats,omitempty"`
	// Generation and Object identify what new sockets get.
	Generation uint32 `json:"generation,omitempty"`
	Object     Object `json:"object,omitzero"`
	// UpgradeAvailable is true when this ccload embeds another build of
	// the CC than the one attached: `ccload attach NAME --replace` (or
	// Loader.Upgrade) swaps it in.
	UpgradeAvailable bool `json:"upgrade_available,omitempty"`
	// Generations are the current generation and those that upgrades
	// replaced and that live sockets still use, newest first.
	Generations []GenerationStatus `json:"generations,omitempty"`
}

// List reports every built-in CC: attached or not, its parameters (the
// live values when attached, the defaults otherwise), its counters, and
// its generations. It changes nothing (PruneGenerations removes what
// finished generations leave). Without CAP_SYS_ADMIN it tells a replaced
// generation's use by its socket count alone.
func (l *Loader) List() ([]CCStatus, error) {
	def, _ := kernel.ReadSysctl(l.host.ProcSys, sysctlDefault)
	var out []CCStatus
	for _, cc := range Builtin() {
		s := CCStatus{Name: cc.Name, Summary: cc.Summary, Default: def == cc.Name, Params: map[string]string{}}
		for _, p := range cc.Params {
			s.Params[p.Name] = p.Default
		}
		st, err := l.inspect(cc)
		if err != nil {
			return nil, err
		}
		s.Attached, s.Stale = st.attached, st.stale
		if st.attached {
			s.Registration = st.reg
			s.PinDir = l.PinDir(cc.Name)
			if vals, _, err := readParams(cc, st.params); err == nil {
				s.Params = formatParams(cc, vals)
			} else if spec, serr := cc.load(); serr == nil {
				// Another build's layout (UpgradeAvailable): what its
				// members hold, by name; the rest are the defaults above.
				if vals, err := carriedParams(cc, filepath.Join(s.PinDir, mapParams), spec.Maps[mapParams].Value); err == nil {
					for name, text := range formatParams(cc, vals) {
						if _, ok := vals[name]; ok {
							s.Params[name] = text
						}
					}
				}
			}
			s.Generations = l.generations(cc, st)
			s.Stats = s.Generations[0].Stats
			for _, g := range s.Generations {
				s.SocketsInUse += g.SocketsInUse
			}
			s.Generation, s.Object = st.meta.Generation, st.meta.object()
			_, hash := objectOf(cc, l.build)
			s.UpgradeAvailable = st.meta.Hash != hash
		}
		st.close()
		out = append(out, s)
	}
	return out, nil
}

// KernelCCs returns the congestion controls registered in the kernel now
// (tcp_available_congestion_control), ccload's and everybody else's.
func (l *Loader) KernelCCs() ([]string, error) {
	return registeredCCs(l.host.ProcSys)
}
