package pin

import (
	"fmt"
	"os"
	"syscall"
)

// Environment variables of the crash tests. They are read at each kill
// point, so nothing is kept in package state.
const (
	// KillAtEnv names a kill point: the process SIGKILLs itself when it
	// reaches it, as a crash or `kill -9` would stop it there.
	KillAtEnv = "CCLOAD_KILL_AT"
	// KillTraceEnv, when non-empty, makes every kill point print
	// "killpoint NAME" to stderr, so that a test can list the points a
	// command passes through.
	KillTraceEnv = "CCLOAD_KILL_TRACE"
)

// KillPoint marks a step of a staged sequence after which a crash must
// leave nothing that the next ccload command cannot clean up. It does
// nothing unless the crash tests set KillAtEnv or KillTraceEnv.
func KillPoint(name string) {
	if os.Getenv(KillTraceEnv) != "" {
		fmt.Fprintf(os.Stderr, "killpoint %s\n", name)
	}
	if at := os.Getenv(KillAtEnv); at != "" && at == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; wait for it to land
	}
}
