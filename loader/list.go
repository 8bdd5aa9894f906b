package loader

import "github.com/ccload/ccload/internal/kernel"

// CCStatus describes one built-in CC and its state in the kernel.
type CCStatus struct {
	Name         string              `json:"name"`
	Summary      string              `json:"summary"`
	Attached     bool                `json:"attached"`
	Stale        bool                `json:"stale,omitempty"`
	Registration kernel.Registration `json:"registration,omitempty"`
	PinDir       string              `json:"pin_dir,omitempty"`
	Default      bool                `json:"default"`
	SocketsInUse int64               `json:"sockets_in_use"`
	Params       map[string]string   `json:"params"`
	Stats        Stats               `json:"stats,omitempty"`
}

// List reports every built-in CC: attached or not, its parameters (the
// live values when attached, the defaults otherwise) and its counters.
// It needs no capabilities beyond reading bpffs.
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
			}
			if stats, err := readStats(st.stats); err == nil {
				s.Stats = stats
				s.SocketsInUse = stats.SocketsInUse()
			}
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
