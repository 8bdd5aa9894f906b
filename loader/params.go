package loader

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/units"
)

// Unit says how a parameter's text is parsed and how its value is stored
// in the BPF params map. The fixed-point scales match bpf/include/ccload.h.
type Unit int

// Parameter units.
const (
	UnitCount     Unit = iota // a plain non-negative integer
	UnitFraction              // a ratio such as 0.9 or 90%, stored ×Scale
	UnitDuration              // a duration with a unit (20us, 1.5ms), stored in µs
	UnitBandwidth             // a rate in bits/s (10gbit, 25G, 100mbit), stored in bits/s
	UnitBytes                 // a size (64KB, 1MiB, 1500), stored in bytes
)

// String names the unit for help texts.
func (u Unit) String() string {
	switch u {
	case UnitCount:
		return "count"
	case UnitFraction:
		return "fraction"
	case UnitDuration:
		return "duration"
	case UnitBandwidth:
		return "bandwidth"
	case UnitBytes:
		return "bytes"
	}
	return "unit?"
}

// ParamSpec describes one run-time parameter of a congestion control.
type ParamSpec struct {
	Name    string // the name users type: gamma, base_rtt, ...
	Field   string // the member of the BPF params struct that holds it
	Unit    Unit
	Scale   uint64 // for UnitFraction: the stored value of 1.0
	Default string // default, as users would type it
	Min     uint64 // smallest stored value allowed
	Max     uint64 // largest stored value allowed
	Zero    string // what 0 means, if 0 is allowed and special ("track min RTT")
	Auto    bool   // "auto" is accepted and resolved by the loader
	Doc     string // one line for --help and `ccload list`
}

// Parse converts the user's text into the stored value, checking the range.
// "auto" is not handled here; see [ParamSpec.Auto].
func (p ParamSpec) Parse(text string) (uint64, error) {
	s := strings.TrimSpace(text)
	if s == "" {
		return 0, fmt.Errorf("%s: empty value", p.Name)
	}
	var v uint64
	var err error
	switch p.Unit {
	case UnitCount:
		v, err = strconv.ParseUint(s, 10, 64)
		if err != nil {
			err = fmt.Errorf("%q is not a whole number", s)
		}
	case UnitFraction:
		v, err = units.ParseFraction(s, p.Scale)
	case UnitDuration:
		v, err = units.ParseDurationUS(s)
	case UnitBandwidth:
		v, err = units.ParseBandwidth(s)
	case UnitBytes:
		v, err = units.ParseBytes(s)
	default:
		err = fmt.Errorf("unknown unit %d", p.Unit)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Name, err)
	}
	if v == 0 && p.Zero != "" {
		return 0, nil
	}
	if v < p.Min || v > p.Max {
		return 0, fmt.Errorf("%s=%s is out of range: allowed %s", p.Name, s, p.Range())
	}
	return v, nil
}

// Format renders a stored value the way users would type it.
func (p ParamSpec) Format(v uint64) string {
	if v == 0 && p.Zero != "" {
		return "0"
	}
	switch p.Unit {
	case UnitFraction:
		s := strconv.FormatFloat(float64(v)/float64(p.Scale), 'f', 4, 64)
		return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	case UnitDuration:
		return strings.ReplaceAll((time.Duration(v) * time.Microsecond).String(), "µs", "us")
	case UnitBandwidth:
		return units.FormatBandwidth(v)
	case UnitBytes:
		return strconv.FormatUint(v, 10) + "B"
	}
	return strconv.FormatUint(v, 10)
}

// Range describes the allowed values for error messages and help.
func (p ParamSpec) Range() string {
	r := fmt.Sprintf("%s to %s", p.Format(p.Min), p.Format(p.Max))
	if p.Zero != "" {
		r += fmt.Sprintf(", or 0 (%s)", p.Zero)
	}
	if p.Auto {
		r += ", or auto"
	}
	return r
}

// ParseAssignments splits "name=value" strings into a map, rejecting
// duplicates and malformed items.
func ParseAssignments(items []string) (map[string]string, error) {
	out := make(map[string]string, len(items))
	for _, it := range items {
		for _, kv := range strings.Split(it, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || name == "" {
				return nil, kernel.NewError(kernel.KindBadParam, "write parameters as name=value, e.g. gamma=0.9",
					nil, "parameter %q is not of the form name=value", kv)
			}
			if _, dup := out[name]; dup {
				return nil, kernel.NewError(kernel.KindBadParam, "give each parameter once", nil,
					"parameter %q is given twice", name)
			}
			out[name] = val
		}
	}
	return out, nil
}

// paramLayout locates each parameter in the BPF params struct, from the
// object's BTF, so the Go side never hard-codes offsets.
type paramLayout struct {
	size   uint32
	fields map[string]fieldLoc // by parameter name
	// derived are the members that CC.derived fills, by C name.
	derived map[string]fieldLoc
	derive  func(map[string]uint64) map[string]uint64
}

type fieldLoc struct {
	off, size uint32
}

func newParamLayout(value btf.Type, specs []ParamSpec, derive func(map[string]uint64) map[string]uint64) (*paramLayout, error) {
	st, ok := btf.As[*btf.Struct](value)
	if !ok {
		return nil, fmt.Errorf("params map value is %T, not a struct", value)
	}
	l := &paramLayout{size: st.Size, fields: map[string]fieldLoc{}, derived: map[string]fieldLoc{}, derive: derive}
	for _, p := range specs {
		found := false
		for _, m := range st.Members {
			if m.Name != p.Field {
				continue
			}
			sz, err := btf.Sizeof(m.Type)
			if err != nil {
				return nil, fmt.Errorf("size of %s.%s: %w", st.Name, m.Name, err)
			}
			if sz != 4 && sz != 8 {
				return nil, fmt.Errorf("%s.%s is %d bytes; only 4 and 8 are supported", st.Name, m.Name, sz)
			}
			l.fields[p.Name] = fieldLoc{off: m.Offset.Bytes(), size: uint32(sz)}
			found = true
		}
		if !found {
			return nil, fmt.Errorf("parameter %s: struct %s has no member %s", p.Name, st.Name, p.Field)
		}
	}
	if derive != nil {
		for name := range derive(map[string]uint64{}) {
			i := slices.IndexFunc(st.Members, func(m btf.Member) bool { return m.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("derived parameter: struct %s has no member %s", st.Name, name)
			}
			if sz, err := btf.Sizeof(st.Members[i].Type); err != nil || sz != 8 {
				return nil, fmt.Errorf("derived parameter %s.%s must be 8 bytes (%d, %v)", st.Name, name, sz, err)
			}
			l.derived[name] = fieldLoc{off: st.Members[i].Offset.Bytes(), size: 8}
		}
	}
	return l, nil
}

func (l *paramLayout) get(buf []byte, name string) uint64 {
	f := l.fields[name]
	if f.size == 4 {
		return uint64(binary.NativeEndian.Uint32(buf[f.off:]))
	}
	return binary.NativeEndian.Uint64(buf[f.off:])
}

func (l *paramLayout) put(buf []byte, name string, v uint64) error {
	f := l.fields[name]
	if f.size == 4 {
		if v > math.MaxUint32 {
			return fmt.Errorf("%s: %d does not fit in 32 bits", name, v)
		}
		binary.NativeEndian.PutUint32(buf[f.off:], uint32(v))
		return nil
	}
	binary.NativeEndian.PutUint64(buf[f.off:], v)
	return nil
}

// encode lays stored values out as the BPF params struct, with the
// members derived from them.
func (l *paramLayout) encode(vals map[string]uint64) ([]byte, error) {
	buf := make([]byte, l.size)
	for name, v := range vals {
		if err := l.put(buf, name, v); err != nil {
			return nil, err
		}
	}
	if l.derive != nil {
		for name, v := range l.derive(vals) {
			binary.NativeEndian.PutUint64(buf[l.derived[name].off:], v)
		}
	}
	return buf, nil
}

// givenParams are a user's parameter assignments, checked and parsed:
// the stored value of each, or auto for an "auto" that the loader still
// has to resolve.
type givenParams map[string]givenValue

type givenValue struct {
	v    uint64
	auto bool
}

// parseGiven checks the user's assignments against specs and parses them,
// once, before anything touches the kernel: names that are not parameters
// of the CC and values that do not parse are errors of kind KindBadParam.
func parseGiven(specs []ParamSpec, given map[string]string) (givenParams, error) {
	out := givenParams{}
	for name, text := range given {
		i := slices.IndexFunc(specs, func(p ParamSpec) bool { return p.Name == name })
		if i < 0 {
			return nil, kernel.NewError(kernel.KindBadParam, "valid parameters: "+paramNames(specs), nil,
				"unknown parameter %q", name)
		}
		p := specs[i]
		if p.Auto && isAuto(text) {
			out[name] = givenValue{auto: true}
			continue
		}
		v, err := p.Parse(text)
		if err != nil {
			return nil, badValue(p, err)
		}
		out[name] = givenValue{v: v}
	}
	return out, nil
}

func isAuto(text string) bool { return strings.EqualFold(strings.TrimSpace(text), "auto") }

// resolveParams turns checked assignments into stored values. Parameters
// not given keep the value in cur (or their default when cur is nil). auto
// resolves "auto" values.
func resolveParams(specs []ParamSpec, given givenParams, cur map[string]uint64,
	auto func(ParamSpec) (uint64, string, error)) (map[string]uint64, []string, error) {
	out := map[string]uint64{}
	var notes []string
	for _, p := range specs {
		g, ok := given[p.Name]
		if !ok {
			if v, have := cur[p.Name]; have {
				out[p.Name] = v
				continue
			}
			if p.Auto && isAuto(p.Default) {
				g.auto = true
			} else {
				v, err := p.Parse(p.Default)
				if err != nil {
					return nil, nil, fmt.Errorf("default of %s: %w", p.Name, err)
				}
				g.v = v
			}
		}
		if g.auto {
			v, note, err := auto(p)
			if err != nil {
				return nil, nil, kernel.NewError(kernel.KindBadParam, "set it explicitly, e.g. "+p.Name+"=25gbit", err,
					"cannot resolve %s=auto", p.Name)
			}
			out[p.Name] = v
			if note != "" {
				notes = append(notes, note)
			}
			continue
		}
		out[p.Name] = g.v
	}
	return out, notes, nil
}

func badValue(p ParamSpec, err error) error {
	return kernel.NewError(kernel.KindBadParam, fmt.Sprintf("%s (%s) is a %s: %s", p.Name, p.Doc, p.Unit, p.Range()),
		err, "invalid parameter")
}

func paramNames(specs []ParamSpec) string {
	names := make([]string, 0, len(specs))
	for _, p := range specs {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// ParamsString renders parameters as "name=value" pairs, sorted by name and
// separated by spaces, as ccload prints them.
func ParamsString(params map[string]string) string {
	keys := slices.Sorted(maps.Keys(params))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + params[k]
	}
	return strings.Join(parts, " ")
}

// CheckParams validates parameter assignments for the built-in CC name
// without touching the kernel: an unknown CC, an unknown parameter or a
// value that does not parse is an error, as Attach would return it.
func CheckParams(name string, params map[string]string) error {
	cc, err := Lookup(name)
	if err != nil {
		return err
	}
	_, err = parseGiven(cc.Params, params)
	return err
}
