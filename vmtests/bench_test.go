package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchArgs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "--scenario longflow  --cc dctcp,bpf_dctcp", want: []string{"--scenario", "longflow", "--cc", "dctcp,bpf_dctcp"}},
		{in: "   ", wantErr: "needs ccload bench's arguments"},
		{in: "--scenario longflow --out /x", wantErr: "leave out --out"},
		{in: "--out=/x", wantErr: "leave out --out"},
	} {
		got, err := benchArgs(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("benchArgs(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("benchArgs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// benchArchive builds what the guest's `tar czf - -C /tmp bench | base64`
// prints, wrapped at 76 columns as busybox's base64 does.
func benchArchive(t *testing.T, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "bench/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: "bench/" + name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	enc := base64.StdEncoding.EncodeToString(buf.Bytes())
	var lines []string
	for len(enc) > 76 {
		lines, enc = append(lines, enc[:76]), enc[76:]
	}
	return strings.Join(append(lines, enc), "\r\n")
}

func TestParseBenchAndUnpack(t *testing.T) {
	files := map[string]string{"results.json": `{"schema":"x"}`, "longflow-queue.png": strings.Repeat("P", 300)}
	console := strings.Join([]string{
		"CCLOAD-VMTEST booted 6.12.0",
		"CCLOAD-VMTEST bench-begin",
		"longflow: 100 Mbit/s bottleneck",
		"  dctcp  dctcp  95",
		"CCLOAD-VMTEST bench-end exit=0",
		"CCLOAD-VMTEST bench-archive-begin",
		benchArchive(t, files),
		"CCLOAD-VMTEST bench-archive-end",
		"CCLOAD-VMTEST done",
	}, "\r\n")
	out, exit, archive, err := parseBench(console)
	if err != nil || exit != 0 {
		t.Fatalf("parseBench: exit %d, err %v", exit, err)
	}
	if out != "longflow: 100 Mbit/s bottleneck\n  dctcp  dctcp  95\n" {
		t.Errorf("output = %q", out)
	}
	dir := t.TempDir()
	n, err := unpackBench(archive, dir)
	if err != nil || n != len(files) {
		t.Fatalf("unpackBench: %d files, %v; want %d", n, err, len(files))
	}
	for name, body := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != body {
			t.Errorf("%s: %q, %v", name, got, err)
		}
	}
}

func TestParseBenchWithoutResults(t *testing.T) {
	for _, tc := range []struct {
		name, console string
		exit          int
	}{
		{"never ended", "CCLOAD-VMTEST bench-begin\nbuilding...\n", -1},
		{"failed", "CCLOAD-VMTEST bench-begin\nccload: no sch_fq_codel\nCCLOAD-VMTEST bench-end exit=1\nCCLOAD-VMTEST bench-archive-begin\nCCLOAD-VMTEST bench-archive-end\n", 1},
	} {
		_, exit, archive, err := parseBench(tc.console)
		if err != nil || exit != tc.exit || archive != nil {
			t.Errorf("%s: exit %d, archive %d bytes, err %v; want exit %d and no archive", tc.name, exit, len(archive), err, tc.exit)
		}
	}
}
