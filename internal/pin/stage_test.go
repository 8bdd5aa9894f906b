package pin

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
)

// The stage is plain directories; pins need a bpffs, and are tested where
// they are made (loader, telemetry/sockops, telemetry/hop). These tests
// check the directory protocol on any file system.

func TestStageCommit(t *testing.T) {
	root := t.TempDir()
	final := filepath.Join(root, "cc")
	s, err := NewStage(root, "cc", final)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(s.Path("")), "staging-cc-") {
		t.Errorf("stage at %s, want staging-cc-<random>", s.Path(""))
	}
	if err := os.WriteFile(s.Path("params"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	aborted := false
	s.OnAbort(func() { aborted = true })
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Abort() // a no-op after Commit
	if aborted {
		t.Error("Abort after Commit ran the undo functions")
	}
	if _, err := os.Stat(filepath.Join(final, "params")); err != nil {
		t.Errorf("committed pin missing: %v", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("root holds %v, want only the final directory", entries)
	}
}

func TestStageAbort(t *testing.T) {
	root := t.TempDir()
	s, err := NewStage(root, "int", filepath.Join(root, "int"))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	s.OnAbort(func() { order = append(order, "first registered") })
	s.OnAbort(func() {
		if _, err := os.Stat(s.Path("")); err == nil {
			t.Error("an undo function ran before the pins were removed")
		}
		order = append(order, "last registered")
	})
	s.Abort()
	s.Abort() // once only
	if want := []string{"last registered", "first registered"}; !reflect.DeepEqual(order, want) {
		t.Errorf("undo order %v, want %v", order, want)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("root holds %v after Abort, want nothing", entries)
	}
}

func TestStageCommitRefusesExisting(t *testing.T) {
	root := t.TempDir()
	final := filepath.Join(root, "hop")
	if err := os.MkdirAll(filepath.Join(final, "tc_egress"), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := NewStage(root, "hop", final)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path("hop_config"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(); err == nil {
		t.Fatal("Commit over a directory another process committed succeeded")
	}
	s.Abort()
	if entries, _ := os.ReadDir(root); len(entries) != 1 || entries[0].Name() != "hop" {
		t.Errorf("root holds %v, want only the other process's directory", entries)
	}
}

func TestStageNames(t *testing.T) {
	root := t.TempDir()
	seen := map[string]bool{}
	for range 3 {
		s, err := NewStage(root, "hop-eth0-3-ns5", filepath.Join(root, "x"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Abort()
		name := filepath.Base(s.Path(""))
		if seen[name] {
			t.Errorf("two stages named %s", name)
		}
		seen[name] = true
		if got := stageLabel(name); got != "hop-eth0-3-ns5" {
			t.Errorf("stageLabel(%q) = %q, want the label given", name, got)
		}
		if strings.Contains(name, ".") {
			t.Errorf("%s has a dot, which bpffs refuses", name)
		}
	}
}

// staleStage makes a directory named as a stage whose owner is dead: no
// one holds its lock.
func staleStage(t *testing.T, root, label string) string {
	t.Helper()
	dir := filepath.Join(root, stagePrefix+label+"-0123456789abcdef")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "params"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCleanStale(t *testing.T) {
	root := t.TempDir()
	live, err := NewStage(root, "theta_powertcp", filepath.Join(root, "theta_powertcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	dead := staleStage(t, root, "hop-eth0-3-ns5")
	if err := os.Mkdir(filepath.Join(root, "int"), 0o700); err != nil {
		t.Fatal(err)
	}

	var seen []StaleStage
	removed, err := CleanStale(root, func(s StaleStage) error {
		seen = append(seen, s)
		if _, err := os.Stat(filepath.Join(s.Dir, "params")); err != nil {
			t.Errorf("the cleaner ran after the stage's pins were removed: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{dead}; !reflect.DeepEqual(removed, want) {
		t.Errorf("CleanStale removed %v, want %v", removed, want)
	}
	if want := []StaleStage{{Dir: dead, Label: "hop-eth0-3-ns5"}}; !reflect.DeepEqual(seen, want) {
		t.Errorf("the cleaner saw %+v, want %+v", seen, want)
	}
	for _, keep := range []string{live.Path(""), filepath.Join(root, "int")} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("CleanStale removed %s: %v", keep, err)
		}
	}
	// The live stage still commits.
	if err := live.Commit(); err != nil {
		t.Fatal(err)
	}
	if removed, err := CleanStale(root); err != nil || len(removed) != 0 {
		t.Errorf("CleanStale after the commit = %v, %v; want nothing to do", removed, err)
	}
	if removed, err := CleanStale(filepath.Join(root, "missing")); err != nil || len(removed) != 0 {
		t.Errorf("CleanStale of a missing root = %v, %v; want nothing", removed, err)
	}
}

func TestCleanStaleKeepsWhatACleanerCannotUndo(t *testing.T) {
	root := t.TempDir()
	dead := staleStage(t, root, "onramp-eth0-3-ns5")
	boom := errors.New("cannot reach the interface")
	removed, err := CleanStale(root, func(StaleStage) error { return boom })
	if !errors.Is(err, boom) || len(removed) != 0 {
		t.Errorf("CleanStale with a failing cleaner = %v, %v; want its error and nothing removed", removed, err)
	}
	if _, err := os.Stat(filepath.Join(dead, "params")); err != nil {
		t.Errorf("the stage went despite its cleaner's error: %v", err)
	}
	if removed, err := CleanStale(root); err != nil || len(removed) != 1 {
		t.Errorf("CleanStale without the cleaner = %v, %v; want the stage removed", removed, err)
	}
}

// TestCleanStaleAcrossPIDNamespaces holds a stage's lock from a process in
// a PID namespace of its own, as a containerised daemon would: its stage
// is live while it runs, and stale once it is killed.
func TestCleanStaleAcrossPIDNamespaces(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"unshare", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Skip(t, "no "+tool+"(1) here")
		}
	}
	root := t.TempDir()
	dir := staleStage(t, root, "int")
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "flock", "--exclusive", dir,
		"sh", "-c", "echo locked; exec sleep 60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
	t.Cleanup(kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("the lock holder said %q, %v", line, err)
	}
	if removed, err := CleanStale(root); err != nil || len(removed) != 0 {
		t.Fatalf("CleanStale while another PID namespace holds the stage = %v, %v; want nothing removed", removed, err)
	}
	kill()
	// The holder, sleep in the new PID namespace, dies when the kernel
	// gets to it after unshare: the lock goes with it, a moment later.
	var removed []string
	for i := 0; i < 100 && len(removed) == 0; i++ {
		if removed, err = CleanStale(root); err != nil {
			t.Fatal(err)
		}
		if len(removed) == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !reflect.DeepEqual(removed, []string{dir}) {
		t.Errorf("CleanStale within 5 s of the holder's kill = %v; want %s removed", removed, dir)
	}
}
