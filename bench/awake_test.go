package bench

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A spinner executable that exits at once is refused by name, and nothing
// is left running.
func TestKeepCPUsAwakeSpinnerExits(t *testing.T) {
	stop, err := keepCPUsAwake("/bin/true", []int{0, 1})
	if err == nil {
		_ = stop()
		t.Fatal("keepCPUsAwake with /bin/true as the spinner succeeded")
	}
	if !strings.Contains(err.Error(), "spinner for CPU 0") || !strings.Contains(err.Error(), "exited before it spun") {
		t.Errorf("error %q does not say that the spinner for CPU 0 exited before it spun", err)
	}
}

// A spinner that died before the bench was done makes stop fail: the
// per-ACK costs of that run were not all measured on awake CPUs.
func TestStopSpinnersReportsEarlyExit(t *testing.T) {
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	if err := syscall.Kill(c.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sleep: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); !exited(c.Process.Pid) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	err := stopSpinners([]*exec.Cmd{c})
	if err == nil || !strings.Contains(err.Error(), "exited before the bench was done") {
		t.Errorf("stopSpinners after the spinner died: %v, want an error that says it exited early", err)
	}
}
