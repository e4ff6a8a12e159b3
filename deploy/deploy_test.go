package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// doc is one parsed manifest, with the file it came from.
type doc struct {
	file string
	v    map[string]any
}

func (d doc) kind() string { return str(d.v["kind"]) }
func (d doc) name() string { return str(get(d.v, "metadata", "name")) }

func str(v any) string { s, _ := v.(string); return s }

// get walks nested maps by keys; nil when a key is missing.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

// manifests parses every document of every k8s/*.yaml: each must be valid YAML with an
// apiVersion, a kind and a name.
func manifests(t *testing.T) []doc {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in k8s/: %v", err)
	}
	var docs []doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var v map[string]any
			err := dec.Decode(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			d := doc{file: f, v: v}
			if str(v["apiVersion"]) == "" || d.kind() == "" || d.name() == "" {
				t.Fatalf("%s: a document without apiVersion, kind or metadata.name: %v", f, v)
			}
			docs = append(docs, d)
		}
	}
	return docs
}

// only is the one document of kind k, failing unless there is exactly one.
func only(t *testing.T, docs []doc, k string) doc {
	t.Helper()
	var found []doc
	for _, d := range docs {
		if d.kind() == k {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d documents of kind %s, want 1", len(found), k)
	}
	return found[0]
}

// metricName is the series name a PromQL selector starts with.
var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)

// TestManifestsMatchTheServer: the example's probes, scrape path, ports, flags, volumes and the
// autoscaler's metric all exist: the paths answer 200 on a server running the fake backend, the
// metric is on its /metrics, the flags are dflash serve's, the names refer to each other.
func TestManifestsMatchTheServer(t *testing.T) {
	docs := manifests(t)
	dep := only(t, docs, "Deployment")
	pod := get(dep.v, "spec", "template")
	containers := list(get(pod, "spec", "containers"))
	if len(containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", dep.file, len(containers))
	}
	c := containers[0]

	// Ports: the probes', the Service's and the scrape annotation's all name the one port the
	// container and the image expose.
	ports := list(get(c, "ports"))
	if len(ports) != 1 {
		t.Fatalf("%s: %d ports, want 1", dep.file, len(ports))
	}
	portName, port := str(get(ports[0], "name")), get(ports[0], "containerPort")
	portNum, _ := port.(int)
	samePort := func(what string, p any) {
		t.Helper()
		if p != portName && p != port {
			t.Errorf("%s is %v, the container's port is %s (%v)", what, p, portName, port)
		}
	}
	var paths []string
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		h := get(c, probe, "httpGet")
		if h == nil {
			t.Fatalf("%s: no %s.httpGet", dep.file, probe)
		}
		samePort(probe+" port", get(h, "port"))
		paths = append(paths, str(get(h, "path")))
	}
	if paths[0] != "/ready" || paths[1] != "/health" {
		t.Errorf("probes on %v, want readiness on /ready and liveness on /health", paths)
	}
	ann := get(pod, "metadata", "annotations")
	scrape := str(get(ann, "prometheus.io/path"))
	paths = append(paths, scrape)
	if p, err := strconv.Atoi(str(get(ann, "prometheus.io/port"))); err != nil || p != portNum {
		t.Errorf("prometheus.io/port %q, want %d", str(get(ann, "prometheus.io/port")), portNum)
	}
	if sel := get(dep.v, "spec", "selector", "matchLabels"); !equalMaps(sel, get(pod, "metadata", "labels")) {
		t.Errorf("Deployment selector %v does not match its pods' labels %v", sel, get(pod, "metadata", "labels"))
	}
	svc := only(t, docs, "Service")
	for _, p := range list(get(svc.v, "spec", "ports")) {
		samePort("Service targetPort", get(p, "targetPort"))
	}
	if !equalMaps(get(svc.v, "spec", "selector"), get(pod, "metadata", "labels")) {
		t.Errorf("Service selector %v does not select the pods' labels %v", get(svc.v, "spec", "selector"), get(pod, "metadata", "labels"))
	}
	dockerfile, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^EXPOSE ` + strconv.Itoa(portNum) + `$`).Match(dockerfile) {
		t.Errorf("Dockerfile does not EXPOSE %d", portNum)
	}

	// Flags: every --flag of the container's args is one dflash serve defines.
	serveSrc, err := os.ReadFile("../cmd/dflash/serve.go")
	if err != nil {
		t.Fatal(err)
	}
	args := list(get(c, "args"))
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("container args %v do not start with serve", args)
	}
	for _, a := range args {
		if s := str(a); strings.HasPrefix(s, "--") {
			name, _, _ := strings.Cut(strings.TrimPrefix(s, "--"), "=")
			if !regexp.MustCompile(`fs\.\w+\("` + regexp.QuoteMeta(name) + `"`).Match(serveSrc) {
				t.Errorf("container arg %s is not a flag of dflash serve", s)
			}
		}
	}

	// Volumes: each mount names a volume of the pod, and its claim or config map is a manifest.
	vols := map[string]any{}
	for _, v := range list(get(pod, "spec", "volumes")) {
		vols[str(get(v, "name"))] = v
	}
	for _, m := range list(get(c, "volumeMounts")) {
		v, ok := vols[str(get(m, "name"))]
		if !ok {
			t.Errorf("mount %v names no volume", m)
			continue
		}
		if claim := str(get(v, "persistentVolumeClaim", "claimName")); claim != "" && !named(docs, "PersistentVolumeClaim", claim) {
			t.Errorf("volume %v claims %s, which no manifest defines", v, claim)
		}
		if cm := str(get(v, "configMap", "name")); cm != "" && !named(docs, "ConfigMap", cm) {
			t.Errorf("volume %v mounts config map %s, which no manifest defines", v, cm)
		}
	}

	// The autoscaler scales the Deployment on metrics prometheus-adapter serves.
	hpa := only(t, docs, "HorizontalPodAutoscaler")
	if ref := get(hpa.v, "spec", "scaleTargetRef"); str(get(ref, "kind")) != "Deployment" || str(get(ref, "name")) != dep.name() {
		t.Errorf("HPA scales %v, want the Deployment %s", ref, dep.name())
	}
	var hpaMetrics []string
	for _, m := range list(get(hpa.v, "spec", "metrics")) {
		if name := str(get(m, "pods", "metric", "name")); name != "" {
			hpaMetrics = append(hpaMetrics, name)
		}
	}
	if !slices.Contains(hpaMetrics, "dflash_queue_depth") {
		t.Errorf("HPA metrics %v, want the queue depth", hpaMetrics)
	}
	adapted, series := adapterMetrics(t, docs)
	for _, m := range hpaMetrics {
		if !slices.Contains(adapted, m) {
			t.Errorf("HPA metric %s is not one prometheus-adapter serves (%v)", m, adapted)
		}
	}

	// Last, the running server: every path answers 200, every series is on /metrics.
	s := server.New(server.Config{}, &fake.Backend{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		ts.Close()
	})
	for _, p := range paths {
		if st, _ := fetch(t, ts.URL+p); st != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", p, st)
		}
	}
	_, body := fetch(t, ts.URL+scrape)
	exposed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			exposed[f[2]] = true
		}
	}
	for _, m := range append(series, hpaMetrics...) {
		if !exposed[m] {
			t.Errorf("metric %s is not on the server's %s", m, scrape)
		}
	}
}

// adapterMetrics reads the prometheus-adapter rules embedded in a ConfigMap: the names it serves
// (name.as) and the series its queries select.
func adapterMetrics(t *testing.T, docs []doc) (served, series []string) {
	t.Helper()
	for _, d := range docs {
		cfg := str(get(d.v, "data", "config.yaml"))
		if d.kind() != "ConfigMap" || cfg == "" {
			continue
		}
		var rules map[string]any
		if err := yaml.Unmarshal([]byte(cfg), &rules); err != nil {
			t.Fatalf("%s: config.yaml: %v", d.file, err)
		}
		for _, r := range list(rules["rules"]) {
			sq := metricName.FindString(str(get(r, "seriesQuery")))
			as := str(get(r, "name", "as"))
			if sq == "" || as == "" {
				t.Fatalf("%s: rule %v has no series or name", d.file, r)
			}
			series, served = append(series, sq), append(served, as)
		}
	}
	if len(served) == 0 {
		t.Fatal("no prometheus-adapter rules in any ConfigMap")
	}
	return served, series
}

func named(docs []doc, kind, name string) bool {
	return slices.ContainsFunc(docs, func(d doc) bool { return d.kind() == kind && d.name() == name })
}

func equalMaps(a, b any) bool {
	am, _ := a.(map[string]any)
	bm, _ := b.(map[string]any)
	if len(am) == 0 || len(am) != len(bm) {
		return false
	}
	for k, v := range am {
		if bm[k] != v {
			return false
		}
	}
	return true
}

func fetch(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
