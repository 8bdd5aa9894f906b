// Package promtest runs a real Prometheus server for tests: the one of
// Debian's prometheus package, scraping one target every second, with its
// storage in the test's temporary directory. Tests query it through its
// HTTP API to check that what ccload serves is what Prometheus ingests.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
)

// Binary is the Prometheus server of Debian's prometheus package.
const Binary = "/usr/bin/prometheus"

// Server is a Prometheus server that a test started.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL string

	client *http.Client
	log    *testutil.Buffer
}

// config is the server's prometheus.yml: one job that scrapes target
// (host:port, path /metrics) every second.
const config = `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ccload
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`

// startTimeout bounds the wait for the server to answer.
const startTimeout = 60 * time.Second

// Run starts a Prometheus server that scrapes target (host:port, serving
// /metrics over HTTP) every second, waits until it is ready, and stops it
// when t ends. It skips t when the server is not installed.
func Run(t testing.TB, target string) *Server {
	t.Helper()
	testutil.RequireFile(t, Binary, "the Prometheus server (Debian package prometheus)")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, target), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{URL: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}, log: &testutil.Buffer{}}
	cmd := exec.Command(Binary,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", Binary, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus output:\n%s", s.log)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		if err := s.ready(ctx); err == nil {
			return s
		}
		select {
		case err := <-done:
			t.Fatalf("prometheus exited before it was ready: %v\n%s", err, s.log)
		case <-ctx.Done():
			t.Fatalf("prometheus was not ready within %v\n%s", startTimeout, s.log)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freeAddr returns a loopback address with a port that nothing listens
// on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// ready asks the server's readiness endpoint.
func (s *Server) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/-/ready", nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /-/ready: %s", resp.Status)
	}
	return nil
}

// queryResponse is the part of /api/v1/query's answer that Query reads.
type queryResponse struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// Query evaluates the PromQL expression q now and returns the value of
// the first series of the resulting vector (wrap q in max() or sum() when
// it selects several); ok is false when the vector is empty.
func (s *Server) Query(ctx context.Context, q string) (v float64, ok bool, err error) {
	u := s.URL + "/api/v1/query?" + url.Values{"query": {q}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("query %q: %w", q, err)
	}
	defer resp.Body.Close()
	var r queryResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, false, fmt.Errorf("query %q: decode the answer (%s): %w", q, resp.Status, err)
	}
	if r.Status != "success" {
		return 0, false, fmt.Errorf("query %q: %s: %s", q, resp.Status, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return 0, false, fmt.Errorf("query %q: a %s, not an instant vector", q, r.Data.ResultType)
	}
	if len(r.Data.Result) == 0 {
		return 0, false, nil
	}
	str, isStr := r.Data.Result[0].Value[1].(string)
	if !isStr {
		return 0, false, fmt.Errorf("query %q: the sample's value is %v, not a string", q, r.Data.Result[0].Value[1])
	}
	v, err = strconv.ParseFloat(str, 64)
	if err != nil {
		return 0, false, fmt.Errorf("query %q: %w", q, err)
	}
	return v, true, nil
}

// Wait queries q every half second until its value satisfies cond, and
// returns that value; it gives up when ctx ends, with the last answer in
// the error.
func (s *Server) Wait(ctx context.Context, q string, cond func(float64) bool) (float64, error) {
	var last string
	for {
		v, ok, err := s.Query(ctx, q)
		switch {
		case err != nil:
			last = err.Error()
		case !ok:
			last = "no series"
		case cond(v):
			return v, nil
		default:
			last = fmt.Sprintf("value %g", v)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("query %q: %w; last answer: %s", q, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Log is what the server printed so far.
func (s *Server) Log() string { return s.log.String() }
