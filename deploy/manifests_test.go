package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/ccload/ccload/daemon"
)

// manifestDir is the kustomization that `kubectl apply -k` applies.
const manifestDir = "kubernetes"

// The paths the daemon serves its probes at (daemon.Daemon.Handler).
const (
	healthzPath = daemon.HealthzPath
	readyzPath  = daemon.ReadyzPath
)

// kustomization is the part of kustomize's Kustomization that ours uses.
// It is decoded as strictly as the API types, so a key it does not know
// (a typo, or a feature this test does not check) fails the test.
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string           `json:"namespace,omitempty"`
	Resources       []string         `json:"resources,omitempty"`
	Images          []kustomizeImage `json:"images,omitempty"`
}

// kustomizeImage is one entry of a kustomization's images.
type kustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// DeepCopyObject makes kustomization a runtime.Object, which the
// serializer decodes into.
func (k *kustomization) DeepCopyObject() runtime.Object {
	c := *k
	c.Resources = slices.Clone(k.Resources)
	c.Images = slices.Clone(k.Images)
	return &c
}

// manifests are the objects of the kustomization, decoded.
type manifests struct {
	kust       *kustomization
	daemonSets []*appsv1.DaemonSet
	configMaps []*corev1.ConfigMap
}

// strictDecoder decodes YAML into the API types as the API server's
// strict field validation does: an unknown field, a field spelled in
// another case, or a field given twice is an error.
func strictDecoder() *kjson.Serializer {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err) // the API packages' own registrations cannot fail
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
}

// splitYAML splits a multi-document YAML file into its documents,
// dropping those that hold nothing but comments.
func splitYAML(data []byte) ([][]byte, error) {
	r := kyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if hasContent(doc) {
			docs = append(docs, doc)
		}
	}
}

// hasContent reports whether a YAML document has anything but comments
// and blank lines.
func hasContent(doc []byte) bool {
	for line := range strings.SplitSeq(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") && line != "---" {
			return true
		}
	}
	return false
}

// decodeFile strictly decodes every document of a manifest file into its
// API type.
func decodeFile(data []byte, name string) ([]runtime.Object, error) {
	docs, err := splitYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: split documents: %w", name, err)
	}
	dec := strictDecoder()
	var objs []runtime.Object
	for i, doc := range docs {
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d (%v): %w", name, i+1, gvk, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// loadManifests reads the kustomization in dir and every file it lists.
func loadManifests(t *testing.T, dir string) *manifests {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{kust: &kustomization{}}
	if _, _, err := strictDecoder().Decode(data, nil, m.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if m.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || m.kust.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml is a %s %s, want a kustomize.config.k8s.io/v1beta1 Kustomization", m.kust.APIVersion, m.kust.Kind)
	}
	for _, res := range m.kust.Resources {
		data, err := os.ReadFile(filepath.Join(dir, res))
		if err != nil {
			t.Fatalf("the kustomization lists %s: %v", res, err)
		}
		objs, err := decodeFile(data, res)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			switch o := obj.(type) {
			case *appsv1.DaemonSet:
				m.daemonSets = append(m.daemonSets, o)
			case *corev1.ConfigMap:
				m.configMaps = append(m.configMaps, o)
			default:
				t.Fatalf("%s holds a %T, which this test does not check", res, obj)
			}
		}
	}
	return m
}

// the returns the one DaemonSet and the one ConfigMap.
func (m *manifests) the(t *testing.T) (*appsv1.DaemonSet, *corev1.ConfigMap) {
	t.Helper()
	if len(m.daemonSets) != 1 || len(m.configMaps) != 1 {
		t.Fatalf("the kustomization has %d DaemonSets and %d ConfigMaps, want one of each", len(m.daemonSets), len(m.configMaps))
	}
	return m.daemonSets[0], m.configMaps[0]
}

// daemonArgs is what the DaemonSet asks `ccload daemon` for.
type daemonArgs struct {
	config      string
	metricsAddr string
}

// parseDaemonArgs reads the container's args as `ccload` would: the
// daemon subcommand and its flags, each known to the daemon.
func parseDaemonArgs(args []string) (daemonArgs, error) {
	var a daemonArgs
	if len(args) == 0 || args[0] != "daemon" {
		return a, fmt.Errorf("args %q do not run `ccload daemon`", args)
	}
	for i := 1; i < len(args); i++ {
		name, val, hasVal := strings.Cut(args[i], "=")
		var dst *string
		switch name {
		case "--config":
			dst = &a.config
		case "--metrics-addr":
			dst = &a.metricsAddr
		case "--dry-run":
			return a, errors.New("--dry-run changes nothing: the DaemonSet must not run it")
		case "--cleanup-on-exit":
			return a, errors.New("--cleanup-on-exit would remove every CC at each rolling update: the DaemonSet must not run it")
		default:
			return a, fmt.Errorf("%q is not a flag of ccload daemon", args[i])
		}
		if !hasVal {
			if i+1 >= len(args) {
				return a, fmt.Errorf("%s has no value", name)
			}
			i++
			val = args[i]
		}
		*dst = val
	}
	if a.config == "" {
		a.config = daemon.DefaultConfigPath
	}
	if a.metricsAddr == "" {
		return a, errors.New("no --metrics-addr: the daemon would serve no probes")
	}
	return a, nil
}

func TestKustomization(t *testing.T) {
	m := loadManifests(t, manifestDir)
	ds, _ := m.the(t)
	if m.kust.Namespace != "kube-system" {
		t.Errorf("namespace %q, want kube-system (system-node-critical pods are commonly admitted only there)", m.kust.Namespace)
	}
	// Every manifest in the directory is applied, and nothing else.
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(m.kust.Resources, base) {
			t.Errorf("%s is not listed in kustomization.yaml's resources", f)
		}
	}
	// The images entry rewrites the DaemonSet's image.
	var names []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		names = append(names, strings.Split(c.Image, ":")[0])
	}
	for _, img := range m.kust.Images {
		if !slices.Contains(names, img.Name) {
			t.Errorf("kustomization images: %q names no image of the DaemonSet (%q)", img.Name, names)
		}
	}
}

func TestConfigMapPassesDaemonValidation(t *testing.T) {
	m := loadManifests(t, manifestDir)
	ds, cm := m.the(t)
	args, err := parseDaemonArgs(ds.Spec.Template.Spec.Containers[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	key := path.Base(args.config)
	text, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s, the file --config names", cm.Name, key)
	}
	_, d, err := daemon.ParseConfig([]byte(text), "configmap.yaml:"+key)
	if err != nil {
		t.Fatalf("the daemon refuses the ConfigMap's config: %v", err)
	}
	if len(d.CCs) == 0 || d.Default == "" || d.INT == nil || d.Clock == nil {
		t.Errorf("the config is missing a part: %d CCs, default %q, INT %v, clock %v", len(d.CCs), d.Default, d.INT != nil, d.Clock != nil)
	}
	if len(d.OnRamp) != 0 {
		t.Errorf("the default config enables On-Ramp, which needs sch_fq on every node")
	}
	// The On-Ramp example, left commented, is valid once uncommented.
	var uncommented []string
	for line := range strings.SplitSeq(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# "); ok && (strings.HasPrefix(rest, "onramp:") || strings.HasPrefix(rest, "  ")) {
			line = rest
		}
		uncommented = append(uncommented, line)
	}
	_, d, err = daemon.ParseConfig([]byte(strings.Join(uncommented, "\n")), "configmap.yaml (On-Ramp uncommented)")
	if err != nil {
		t.Fatalf("the commented On-Ramp example is not valid: %v", err)
	}
	if len(d.OnRamp) != 1 {
		t.Errorf("uncommenting the On-Ramp example gives %d On-Ramp entries, want 1", len(d.OnRamp))
	}
}

func TestDaemonSetRunsAsTheDaemonNeeds(t *testing.T) {
	m := loadManifests(t, manifestDir)
	ds, cm := m.the(t)
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("the pod has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("selector %v: %v (an empty selector matches every pod)", ds.Spec.Selector, err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %s does not match the template's labels %v", sel, ds.Spec.Template.Labels)
	}

	checks := []struct {
		what string
		ok   bool
	}{
		{"hostNetwork", pod.HostNetwork},
		{"dnsPolicy ClusterFirstWithHostNet", pod.DNSPolicy == corev1.DNSClusterFirstWithHostNet},
		{"priorityClassName system-node-critical", pod.PriorityClassName == "system-node-critical"},
		{"a privileged container", c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged},
		{"updateStrategy RollingUpdate", ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType},
		{"maxUnavailable 1", ds.Spec.UpdateStrategy.RollingUpdate != nil && ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable != nil &&
			*ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == intstr.FromInt32(1)},
		{"a toleration of every taint", slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
			return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
		})},
		{"terminationGracePeriodSeconds", pod.TerminationGracePeriodSeconds != nil && *pod.TerminationGracePeriodSeconds > 0},
		{"cpu and memory requests", !c.Resources.Requests.Cpu().IsZero() && !c.Resources.Requests.Memory().IsZero()},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("the DaemonSet lacks %s", ck.what)
		}
	}

	// Every mount has its volume, and every volume is mounted.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		if _, ok := volumes[vm.Name]; !ok {
			t.Errorf("volumeMount %s (at %s) has no volume", vm.Name, vm.MountPath)
		}
		mounts[vm.MountPath] = vm
	}
	for name := range volumes {
		if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == name }) {
			t.Errorf("volume %s is not mounted", name)
		}
	}

	// The host's bpffs, Bidirectional, and the host's cgroup hierarchy.
	hostPaths := []struct {
		mountPath, hostPath string
		typ                 corev1.HostPathType
		propagation         corev1.MountPropagationMode
	}{
		{"/sys/fs/bpf", "/sys/fs/bpf", corev1.HostPathDirectoryOrCreate, corev1.MountPropagationBidirectional},
		{"/sys/fs/cgroup", "/sys/fs/cgroup", corev1.HostPathDirectory, ""},
	}
	for _, hp := range hostPaths {
		vm, ok := mounts[hp.mountPath]
		if !ok {
			t.Errorf("nothing is mounted at %s", hp.mountPath)
			continue
		}
		src := volumes[vm.Name].HostPath
		if src == nil || src.Path != hp.hostPath || src.Type == nil || *src.Type != hp.typ {
			t.Errorf("%s is mounted from %+v, want the host's %s (%s)", hp.mountPath, src, hp.hostPath, hp.typ)
		}
		if hp.propagation != "" {
			got := corev1.MountPropagationNone // the API server's default
			if vm.MountPropagation != nil {
				got = *vm.MountPropagation
			}
			if got != hp.propagation {
				t.Errorf("%s is mounted with propagation %s, want %s", hp.mountPath, got, hp.propagation)
			}
		}
		if vm.ReadOnly {
			t.Errorf("%s is mounted read-only; the daemon writes there", hp.mountPath)
		}
	}

	// The ConfigMap is mounted where --config points.
	args, err := parseDaemonArgs(c.Args)
	if err != nil {
		t.Fatal(err)
	}
	vm, ok := mounts[path.Dir(args.config)]
	if !ok {
		t.Fatalf("nothing is mounted at %s, where --config %s is", path.Dir(args.config), args.config)
	}
	if src := volumes[vm.Name].ConfigMap; src == nil || src.Name != cm.Name || len(src.Items) != 0 {
		t.Errorf("%s is mounted from %+v, want all of ConfigMap %s", vm.MountPath, volumes[vm.Name].VolumeSource, cm.Name)
	}
}

func TestProbesHitTheDaemon(t *testing.T) {
	m := loadManifests(t, manifestDir)
	ds, _ := m.the(t)
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	args, err := parseDaemonArgs(c.Args)
	if err != nil {
		t.Fatal(err)
	}
	host, portText, err := net.SplitHostPort(args.metricsAddr)
	if err != nil {
		t.Fatalf("--metrics-addr %q: %v", args.metricsAddr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("--metrics-addr %q: %v", args.metricsAddr, err)
	}
	// The kubelet probes the node's 127.0.0.1 (hostNetwork), where a
	// daemon listening on every address, or on loopback, answers.
	if ip := net.ParseIP(host); host != "" && (ip == nil || !(ip.IsUnspecified() || ip.IsLoopback())) {
		t.Errorf("--metrics-addr %s does not listen on 127.0.0.1, where the probes go", args.metricsAddr)
	}

	named := map[string]int32{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	if named["metrics"] != int32(port) {
		t.Errorf("port metrics is %d, want the daemon's %d", named["metrics"], port)
	}
	resolve := func(p intstr.IntOrString) int {
		if p.Type == intstr.String {
			return int(named[p.StrVal])
		}
		return p.IntValue()
	}
	probes := []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"startupProbe", c.StartupProbe, healthzPath},
		{"livenessProbe", c.LivenessProbe, healthzPath},
		{"readinessProbe", c.ReadinessProbe, readyzPath},
	}
	for _, p := range probes {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s is not an httpGet probe", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Host != "127.0.0.1" || resolve(g.Port) != port || g.Path != p.path {
			t.Errorf("%s gets http://%s:%s%s, want http://127.0.0.1:%d%s", p.name, g.Host, g.Port.String(), g.Path, port, p.path)
		}
	}
	ann := ds.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != portText || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("prometheus annotations %v, want scrape true, port %s, path /metrics", ann, portText)
	}

	// The daemon serves those paths: /healthz while alive, /readyz (503)
	// before its first reconcile, /metrics always.
	h := daemon.New(daemon.Options{}).Handler()
	for p, want := range map[string]int{healthzPath: http.StatusOK, readyzPath: http.StatusServiceUnavailable, "/metrics": http.StatusOK} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		if rec.Code != want {
			t.Errorf("the daemon answers GET %s with %d, want %d", p, rec.Code, want)
		}
	}
}

// TestStrictDecodingRejects shows that the decoder the tests above use is
// strict: each change below is a mistake that a lenient decoder would
// drop without a word, and the API server would refuse (or ignore).
func TestStrictDecodingRejects(t *testing.T) {
	orig, err := os.ReadFile(filepath.Join(manifestDir, "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeFile(orig, "daemonset.yaml"); err != nil {
		t.Fatalf("the DaemonSet itself does not decode: %v", err)
	}
	tests := []struct {
		name     string
		old, new string
		want     string // a part of the error
	}{
		{"unknown field", "      hostNetwork: true\n", "      hostNetwork: true\n      hostNetwrk: true\n", `unknown field "spec.template.spec.hostNetwrk"`},
		{"duplicate field", "      hostNetwork: true\n", "      hostNetwork: true\n      hostNetwork: false\n", `"hostNetwork" already set`},
		{"field in the wrong case", "      hostNetwork: true\n", "      HostNetwork: true\n", `unknown field "spec.template.spec.HostNetwork"`},
		{"duplicate key in a list item", "            - name: metrics\n", "            - name: metrics\n              name: metrics2\n", `"name" already set`},
		{"unknown field in a probe", "            failureThreshold: 30\n", "            failureTreshold: 30\n", `unknown field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if bytes.Count(orig, []byte(tt.old)) != 1 {
				t.Fatalf("daemonset.yaml has %q %d times, want once: update this test", tt.old, bytes.Count(orig, []byte(tt.old)))
			}
			bad := bytes.Replace(orig, []byte(tt.old), []byte(tt.new), 1)
			_, err := decodeFile(bad, "daemonset.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("decoding with %s: %v, want an error saying %s", tt.name, err, tt.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	// The kustomization is decoded as strictly.
	var k kustomization
	if _, _, err := strictDecoder().Decode([]byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n"), nil, &k); err == nil {
		t.Errorf("a kustomization with resource: (for resources:) decodes without an error")
	}
}
