package main

import (
	"os"
	"testing"
)

// runAsCLIEnv makes the test binary behave as ccload itself: tests that
// need the CLI as a separate process (the daemon, crash tests) run their
// own binary with it set, which works in the vmtests guests too, where
// there is no Go toolchain to build ccload with.
const runAsCLIEnv = "CCLOAD_TEST_RUN_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(runAsCLIEnv) != "" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// selfAsCLI returns the path of this test binary and the environment
// that makes it run as ccload.
func selfAsCLI(t *testing.T) (string, []string) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
	return bin, append(os.Environ(), runAsCLIEnv+"=1")
}
