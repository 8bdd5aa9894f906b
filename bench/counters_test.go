package bench

import (
	"maps"
	"testing"

	"github.com/ccload/ccload/loader"
)

func TestCounterDelta(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after loader.Stats
		want          map[string]uint64
	}{
		{"kernel CC", nil, nil, nil},
		{"unreadable after", loader.Stats{"acks": 1}, nil, nil},
		{"delta", loader.Stats{"acks": 10, "repairs": 0}, loader.Stats{"acks": 25, "repairs": 2}, map[string]uint64{"acks": 15, "repairs": 2}},
		{"counter gone back (re-attached)", loader.Stats{"acks": 10}, loader.Stats{"acks": 3}, map[string]uint64{}},
		{"new counter", loader.Stats{"acks": 1}, loader.Stats{"acks": 2, "repairs": 1}, map[string]uint64{"acks": 1}},
	} {
		got := counterDelta(tc.before, tc.after)
		if !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("%s: counterDelta = %v, want %v", tc.name, got, tc.want)
		}
	}
}
