package testbed

import "testing"

func samplesOf(backlogs ...uint32) []QueueSample {
	s := make([]QueueSample, len(backlogs))
	for i, b := range backlogs {
		s[i] = QueueSample{BacklogBytes: b}
	}
	return s
}

func seq(from, to uint32) []uint32 {
	var v []uint32
	for i := from; i <= to; i++ {
		v = append(v, i)
	}
	return v
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name    string
		samples []QueueSample
		want    QueueStats
	}{
		{"empty", nil, QueueStats{}},
		{"single", samplesOf(10), QueueStats{Mean: 10, P50: 10, P99: 10, Max: 10, N: 1}},
		// N=4: p50 rank ceil(2)=2 -> 2; p99 rank ceil(3.96)=4 -> 4.
		{"four unsorted", samplesOf(4, 1, 3, 2), QueueStats{Mean: 2.5, P50: 2, P99: 4, Max: 4, N: 4}},
		// N=5: p50 rank ceil(2.5)=3 -> 30.
		{"five", samplesOf(50, 10, 40, 20, 30), QueueStats{Mean: 30, P50: 30, P99: 50, Max: 50, N: 5}},
		// N=100, values 1..100: p50 rank 50 -> 50; p99 rank 99 -> 99.
		{"hundred", samplesOf(seq(1, 100)...), QueueStats{Mean: 50.5, P50: 50, P99: 99, Max: 100, N: 100}},
		// N=101, values 1..101: p50 rank ceil(50.5)=51; p99 rank ceil(99.99)=100.
		{"hundred and one", samplesOf(seq(1, 101)...), QueueStats{Mean: 51, P50: 51, P99: 100, Max: 101, N: 101}},
		{"all zero", samplesOf(0, 0, 0), QueueStats{N: 3}},
		{"large values", samplesOf(4_000_000_000, 4_000_000_000), QueueStats{Mean: 4e9, P50: 4e9, P99: 4e9, Max: 4e9, N: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.samples); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}
