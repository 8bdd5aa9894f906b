package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// benchResult is what a guest's `ccload bench` run (--bench) left.
type benchResult struct {
	// Args are the arguments `ccload bench` ran with in the guest.
	Args []string `json:"args"`
	// Exit is ccload's exit code; -1 when the run never ended.
	Exit int `json:"exit"`
	// Output is what the bench printed: progress and the table.
	Output string `json:"output"`
	// Dir is where the guest's --out directory (results.json and the
	// plots) was unpacked on the host; empty when nothing came back.
	Dir string `json:"dir,omitempty"`
}

// benchArgs checks the arguments given to --bench. The guest passes them
// on split at white space, and the host chooses --out.
func benchArgs(s string) ([]string, error) {
	args := strings.Fields(s)
	if len(args) == 0 {
		return nil, errors.New("--bench needs ccload bench's arguments, e.g. --bench '--scenario longflow --cc dctcp,bpf_dctcp'")
	}
	for _, a := range args {
		if a == "--out" || strings.HasPrefix(a, "--out=") {
			return nil, errors.New("--bench: leave out --out; the results come back to --bench-out")
		}
	}
	return args, nil
}

// parseBench reads the bench markers of a guest's console: the bench's
// output, its exit code and the base64 tar.gz of its --out directory.
func parseBench(text string) (output string, exit int, archive []byte, err error) {
	var out, b64 strings.Builder
	exit = -1
	state := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case line == "CCLOAD-VMTEST bench-begin":
			state = "output"
		case strings.HasPrefix(line, "CCLOAD-VMTEST bench-end exit="):
			exit, _ = strconv.Atoi(strings.TrimPrefix(line, "CCLOAD-VMTEST bench-end exit="))
			state = ""
		case line == "CCLOAD-VMTEST bench-archive-begin":
			state = "archive"
		case line == "CCLOAD-VMTEST bench-archive-end":
			state = ""
		case state == "output":
			out.WriteString(line + "\n")
		case state == "archive":
			b64.WriteString(strings.TrimSpace(line))
		}
	}
	if b64.Len() == 0 {
		return out.String(), exit, nil, nil
	}
	archive, err = base64.StdEncoding.DecodeString(b64.String())
	if err != nil {
		return out.String(), exit, nil, fmt.Errorf("decode the bench results from the console: %w", err)
	}
	return out.String(), exit, archive, nil
}

// unpackBench writes the regular files of a tar.gz archive of the guest's
// bench directory into dir, flat: the archive holds one directory of
// results.json and PNGs.
func unpackBench(archive []byte, dir string) (int, error) {
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return 0, fmt.Errorf("bench archive: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	tr := tar.NewReader(zr)
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("bench archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 64<<20))
		if err != nil {
			return n, fmt.Errorf("bench archive %s: %w", h.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(h.Name)), b, 0o644); err != nil {
			return n, err
		}
		n++
	}
}

// collectBench adds a guest's bench run to r, unpacking its results into
// o.benchOut/<release>. Without --bench it returns r as it is.
func collectBench(r kernelResult, o options, text string, logf func(string, ...any)) kernelResult {
	if o.bench == nil {
		return r
	}
	b := &benchResult{Args: o.bench}
	r.Bench = b
	out, exit, archive, err := parseBench(text)
	b.Output, b.Exit = out, exit
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if archive == nil {
		if r.Error == "" {
			r.Error = "the bench left no results (see " + r.ConsoleLogLoc + ")"
		}
		return r
	}
	name := r.Release
	if name == "" {
		name = r.Series
	}
	dir := filepath.Join(o.benchOut, name)
	n, err := unpackBench(archive, dir)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	b.Dir = dir
	logf("kernel %s: bench exit %d, %d files in %s", name, exit, n, dir)
	return r
}

// reportBench prints each guest's bench output and where its results
// went, and returns the exit code: 0 when every guest's bench ran to the
// end with exit 0.
func reportBench(w io.Writer, results []kernelResult, took time.Duration, logf func(string, ...any)) int {
	code := 0
	for _, r := range results {
		fmt.Fprintf(w, "\n== %s (%s) ==\n", orSeries(r), r.Accel)
		if r.Bench != nil {
			fmt.Fprint(w, r.Bench.Output)
		}
		if !r.ok() {
			code = 1
			msg := r.Error
			if msg == "" && r.Bench != nil {
				msg = fmt.Sprintf("ccload bench exited %d", r.Bench.Exit)
			}
			fmt.Fprintf(w, "FAILED: %s (console: %s)\n", msg, r.ConsoleLogLoc)
			continue
		}
		fmt.Fprintf(w, "results: %s\n", r.Bench.Dir)
	}
	logf("bench on %d kernel(s) took %v", len(results), took.Round(time.Second))
	return code
}
