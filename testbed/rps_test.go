package testbed

import (
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
)

func TestCPUMask(t *testing.T) {
	tests := []struct {
		cpus int
		want string
	}{
		{0, "00000001"},
		{1, "00000001"},
		{2, "00000003"},
		{31, "7fffffff"},
		{32, "ffffffff"},
		{33, "00000001,ffffffff"},
		{70, "0000003f,ffffffff,ffffffff"},
	}
	for _, tt := range tests {
		if got := cpuMask(tt.cpus); got != tt.want {
			t.Errorf("cpuMask(%d) = %q, want %q", tt.cpus, got, tt.want)
		}
	}
}

// TestDumbbellSteerFlows checks the RPS mask of a dumbbell's veth ends,
// read from each device's own rx-0/rps_cpus: every CPU with SteerFlows,
// none (the kernel's default) without.
func TestDumbbellSteerFlows(t *testing.T) {
	if _, err := os.Stat(filepath.Join("/proc/sys", rpsDefaultMask)); errors.Is(err, os.ErrNotExist) {
		testutil.SkipKernelLacks(t, "net.core.rps_default_mask (Linux 6.2), with which the testbed's veths steer each flow to one CPU")
	}
	all := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(runtime.NumCPU())), big.NewInt(1))
	for _, tt := range []struct {
		name  string
		steer bool
		want  *big.Int
	}{
		{"SteerFlows", true, all},
		{"default", false, new(big.Int)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDumbbell(t, DumbbellConfig{Senders: 1, SteerFlows: tt.steer})
			for _, end := range []struct {
				h     *Host
				iface string
			}{
				{d.Senders[0], d.SenderIfaces[0]},
				{d.Router, d.BottleneckIface},
				{d.Receiver, ""},
			} {
				iface := end.iface
				if iface == "" {
					var err error
					if iface, err = end.h.Interface(); err != nil {
						t.Fatal(err)
					}
				}
				got, err := rpsCPUs(t, end.h, iface)
				if err != nil {
					t.Fatalf("read the RPS mask of %s in %s: %v", iface, end.h.Name, err)
				}
				if got.Cmp(tt.want) != 0 {
					t.Errorf("%s in %s: rps_cpus = %x, want %x", iface, end.h.Name, got, tt.want)
				}
			}
		})
	}
}

// rpsCPUs reads iface's rx-0/rps_cpus through a sysfs mounted from inside
// h's namespace, which is the namespace whose devices it shows.
func rpsCPUs(t *testing.T, h *Host, iface string) (*big.Int, error) {
	dir := t.TempDir()
	var raw []byte
	err := h.Do(func() error {
		if err := unix.Mount("sysfs", dir, "sysfs", unix.MS_RDONLY, ""); err != nil {
			return err
		}
		var err error
		raw, err = os.ReadFile(filepath.Join(dir, "class/net", iface, "queues/rx-0/rps_cpus"))
		return errors.Join(err, unix.Unmount(dir, unix.MNT_DETACH))
	})
	if err != nil {
		return nil, err
	}
	hex := strings.ReplaceAll(strings.TrimSpace(string(raw)), ",", "")
	n, ok := new(big.Int).SetString(hex, 16)
	if !ok {
		return nil, errors.New("not a CPU mask: " + string(raw))
	}
	return n, nil
}
