package testcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func (l layout) kwokStateDir() string { return filepath.Join(l.o.StateDir, "kwok") }

// kwokArgs is kwok's command line. Its kubeconfig points at the API server inside
// the hub namespace (no socat hop).
func kwokArgs(bin, stateDir string, o KwokOptions) []string {
	argv := []string{bin,
		"--config=" + filepath.Join(stateDir, "config.yaml"),
		"--kubeconfig=" + filepath.Join(stateDir, "kubeconfig"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + KwokNodeSelector,
		"--node-ip=" + kwokNodeIP,
		"--cidr=" + kwokPodCIDR,
		"--server-address=" + kwokServerAddr,
		// one INFO line per patch is 25,000 lines for 5,000 nodes and their pods
		"--v=WARN",
	}
	if o.Heartbeat {
		argv = append(argv, "--node-lease-duration-seconds="+strconv.Itoa(kwokLeaseSeconds))
	}
	if o.Exec {
		for i, a := range argv {
			if strings.HasPrefix(a, "--server-address=") {
				argv = slices.Delete(argv, i, i+1)
				break
			}
		}
		argv = append(argv, kwokExecArgs(stateDir)...)
	}
	return argv
}

func kwokFingerprint(argv []string, config []byte) string {
	h := sha256.New()
	for _, a := range argv {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	h.Write(config)
	return hex.EncodeToString(h.Sum(nil))
}

// waitKwok waits until kwok's HTTP server (with exec: its TLS server on the
// simulated nodes' kubelet endpoint) answers inside the hub namespace.
func (r *runner) waitKwok(ctx context.Context, exec bool) error {
	url, client, err := r.kwokHealthClient(exec)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	rec, _ := r.l.readProc(procKwok)
	return poll(ctx, 30*time.Second, 100*time.Millisecond, "kwok /healthz", func(ctx context.Context) (bool, error) {
		if !rec.alive() {
			return false, errors.New("kwok exited")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("kwok /healthz: %s", resp.Status)
	})
}

// kwokPatch replaces old, which must occur in file (relative to kwok's module
// directory), by new.
type kwokPatch struct{ file, old, new string }

// kwokPatches are the changes kwok is built with: kwokWatchPatch and those of
// kwok_exec.go (kwokExecPatches), in this order.
var kwokPatches = append([]kwokPatch{kwokWatchPatch}, kwokExecPatches...)

// kwokWatchPatch is the one-line change that lets kwok keep its watches.
//
// kwok's informers (pkg/utils/informer) force resourceVersion=0 on every request,
// watches included. kube-apiserver 1.37 (WatchList on by default) turns a watch from
// resourceVersion 0 with allowWatchBookmarks into a watch-list stream
// (sendInitialEvents=true), which needs etcd's RequestWatchProgress; an etcd before
// 3.5 (this cluster ran Debian's 3.4 before it built DefaultEtcdVersion) lacks it,
// so every such watch ends at once with "a watch stream was requested by the client
// but the required storage feature RequestWatchProgress is disabled".
// Stock kwok then sees changes only when its reflectors re-list, backing off up to
// 30 s: nodes and pods move through their stages seconds to tens of seconds late.
// With the patch a watch resumes from the resourceVersion its reflector passes (as
// every client-go informer does); lists still read resourceVersion 0 (the watch
// cache).
var kwokWatchPatch = kwokPatch{
	file: "pkg/utils/informer/event.go",
	old:  "\tif !o.EnableListPager || o.EnableStreamWatch {\n\t\topts.ResourceVersion = \"0\"\n",
	new:  "\tif (!o.EnableListPager || o.EnableStreamWatch) && opts.ResourceVersion == \"\" {\n\t\topts.ResourceVersion = \"0\"\n",
}

// kwokBinary returns the kwok binary for version, building it if it is not in the
// cache, and the directory of kwok's module source (Stage YAMLs). The source comes
// from the Go module proxy (`go mod download`); the build is CGO_ENABLED=0 with the
// cluster's Go build cache. If every patch of kwokPatches applies to the version,
// the binary is built from a patched copy of the source (`go build ./cmd/kwok` in
// it, with kwok's own go.mod and go.sum, plus kwokExtraFiles); otherwise it is
// `go install sigs.k8s.io/kwok/cmd/kwok@version`, and patched is false.
func (r *runner) kwokBinary(ctx context.Context, version string) (bin, modDir string, patched bool, err error) {
	goBin, err := goTool()
	if err != nil {
		return "", "", false, err
	}
	base := filepath.Join(r.o.CacheDir, "kwok", version)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", "", false, err
	}
	env := []string{"GOCACHE=" + r.l.gocache, "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0", "GOWORK=off"}
	out, err := runEnv(ctx, env, base, goBin, "mod", "download", "-json", kwokModule+"@"+version)
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal([]byte(out), &info); jerr != nil || info.Dir == "" {
		return "", "", false, fmt.Errorf("go mod download %s@%s: %v %v %s", kwokModule, version, err, jerr, info.Error)
	}
	files, missing, err := applyKwokPatches(info.Dir)
	if err != nil {
		return "", "", false, err
	}
	if missing != "" {
		bin = filepath.Join(base, "kwok")
		if commandExists(bin) {
			return bin, info.Dir, false, nil
		}
		r.logf("warning: kwok %s: %s changed, building kwok unpatched (its watches may fail on this cluster, and exec cannot be simulated)", version, missing)
		t := time.Now()
		r.logf("building kwok %s (about 1.5 minutes with a cold build cache)", version)
		if _, err := runEnv(ctx, append(env, "GOBIN="+base), base, goBin, "install", "-trimpath", "-ldflags", "-s -w",
			kwokModule+"/cmd/kwok@"+version); err != nil {
			return "", "", false, err
		}
		r.timing("build-kwok", t)
		return bin, info.Dir, false, nil
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(files[name])
		h.Write([]byte{0})
	}
	bin = filepath.Join(base, "kwok-"+hex.EncodeToString(h.Sum(nil)[:6]))
	if commandExists(bin) {
		return bin, info.Dir, true, nil
	}
	t := time.Now()
	r.logf("building kwok %s with its patches (about 1.5 minutes with a cold build cache)", version)
	src := filepath.Join(base, "src")
	if err := os.RemoveAll(src); err != nil {
		return "", "", false, err
	}
	if err := copyTree(info.Dir, src); err != nil {
		return "", "", false, err
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), body, 0o644); err != nil {
			return "", "", false, err
		}
	}
	if _, err := runEnv(ctx, env, src, goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin+".tmp", "./cmd/kwok"); err != nil {
		return "", "", false, err
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", "", false, err
	}
	_ = os.RemoveAll(src)
	r.timing("build-kwok", t)
	return bin, info.Dir, true, nil
}

// applyKwokPatches returns the files of kwok's source in modDir that differ from
// the module's once kwokPatches are applied (by path relative to modDir, with
// their new contents), kwokExtraFiles included; or, when a patch does not apply,
// the file it was meant for (missing).
func applyKwokPatches(modDir string) (files map[string][]byte, missing string, err error) {
	files = map[string][]byte{}
	for _, p := range kwokPatches {
		body, ok := files[p.file]
		if !ok {
			if body, err = os.ReadFile(filepath.Join(modDir, p.file)); err != nil {
				return nil, "", err
			}
		}
		if !bytes.Contains(body, []byte(p.old)) {
			return nil, p.file, nil
		}
		files[p.file] = bytes.Replace(body, []byte(p.old), []byte(p.new), 1)
	}
	for name, body := range kwokExtraFiles {
		files[name] = []byte(body)
	}
	return files, "", nil
}

// copyTree copies the regular files and directories under src to dst, writable
// (module cache files are read-only).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o644)
		}
		return nil
	})
}

// kwokStageFiles are the Stage documents taken from kwok's module source
// (kustomize/stage/...), in this order.
func kwokStageFiles(heartbeat bool) []string {
	files := []string{"node/fast/node-initialize.yaml"}
	if heartbeat {
		files = append(files, "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml")
	}
	for _, s := range []string{"pod-create", "pod-init-container-running", "pod-init-container-completed",
		"pod-ready", "pod-complete", "pod-delete"} {
		files = append(files, "pod/general/"+s+".yaml")
	}
	return files
}

type kwokStage struct {
	file string
	doc  []byte
}

func readKwokStages(modDir string, heartbeat bool) ([]kwokStage, error) {
	var stages []kwokStage
	for _, f := range kwokStageFiles(heartbeat) {
		b, err := os.ReadFile(filepath.Join(modDir, "kustomize", "stage", f))
		if err != nil {
			return nil, err
		}
		stages = append(stages, kwokStage{f, b})
	}
	return stages, nil
}

// kwokConfig renders kwok's --config: a KwokConfiguration (more parallel workers),
// the stock stages (pod-complete changed to skip nodeexec pods, pod-delete to skip
// ended pods), and our stages that end nodeexec pods.
func kwokConfig(stock []kwokStage, o KwokOptions) ([]byte, error) {
	var docs [][]byte
	conf, err := yaml.Marshal(map[string]any{
		"apiVersion": "config.kwok.x-k8s.io/v1alpha1",
		"kind":       "KwokConfiguration",
		"options": map[string]any{
			"podPlayStageParallelism":  kwokParallelism,
			"nodePlayStageParallelism": kwokParallelism,
			"nodeLeaseParallelism":     kwokParallelism,
		},
	})
	if err != nil {
		return nil, err
	}
	docs = append(docs, conf)
	names := map[string]bool{}
	for _, s := range stock {
		var st map[string]any
		if err := yaml.Unmarshal(s.doc, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", s.file, err)
		}
		if st["kind"] != "Stage" {
			return nil, fmt.Errorf("%s: kind %v, want Stage", s.file, st["kind"])
		}
		name, _, _ := unstructuredString(st, "metadata", "name")
		var expr map[string]any
		switch name {
		case "pod-complete":
			// its selector (Running, Ready, owned by a Job) could also match a nodeexec
			// pod; of two matching stages kwok picks one at random by weight
			expr = map[string]any{"key": `.metadata.labels["` + KwokPodLabel + `"]`, "operator": "NotIn", "values": []any{KwokPodLabelValue}}
		case "pod-delete":
			// the API server removes a Succeeded or Failed pod itself (grace period 0),
			// but first writes its deletionTimestamp; kwok would then try to delete the
			// pod too, usually after it is gone: one failed DELETE per pod
			expr = map[string]any{"key": ".status.phase", "operator": "NotIn", "values": []any{"Succeeded", "Failed"}}
		}
		if (name == "pod-create" || name == "pod-ready") && o.PodStartDelay > 0 {
			if err := setStageDelay(st, o.PodStartDelay, 2*o.PodStartDelay); err != nil {
				return nil, fmt.Errorf("%s: %w", s.file, err)
			}
		}
		if expr != nil {
			if err := appendMatchExpression(st, expr); err != nil {
				return nil, fmt.Errorf("%s: %w", s.file, err)
			}
		}
		names[name] = true
		b, err := yaml.Marshal(st)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	for _, want := range []string{"node-initialize", "pod-create", "pod-ready", "pod-complete", "pod-delete"} {
		if !names[want] {
			return nil, fmt.Errorf("kwok's stage %s is missing", want)
		}
	}
	extra := nodeexecStages(o)
	if o.Exec {
		extra = append(extra, kwokExecDocs()...)
	}
	for _, st := range extra {
		b, err := yaml.Marshal(st)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	return append([]byte("---\n"), bytes.Join(docs, []byte("---\n"))...), nil
}

// setStageDelay sets a stage's delay to between d and jitter (kwok's
// durationMilliseconds and jitterDurationMilliseconds), keeping its per-pod
// annotation overrides.
func setStageDelay(st map[string]any, d, jitter time.Duration) error {
	spec, ok := st["spec"].(map[string]any)
	if !ok {
		return fmt.Errorf("spec is not an object")
	}
	delay, ok := spec["delay"].(map[string]any)
	if !ok {
		return fmt.Errorf("spec.delay is not an object")
	}
	delay["durationMilliseconds"] = d.Milliseconds()
	delay["jitterDurationMilliseconds"] = jitter.Milliseconds()
	return nil
}

func unstructuredString(m map[string]any, path ...string) (string, bool, error) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return "", false, fmt.Errorf("%s is not an object", p)
		}
		cur, ok = mm[p]
		if !ok {
			return "", false, nil
		}
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func appendMatchExpression(stage map[string]any, expr map[string]any) error {
	spec, ok := stage["spec"].(map[string]any)
	if !ok {
		return errors.New("no spec")
	}
	sel, ok := spec["selector"].(map[string]any)
	if !ok {
		return errors.New("no spec.selector")
	}
	exprs, _ := sel["matchExpressions"].([]any)
	sel["matchExpressions"] = append(exprs, expr)
	return nil
}

// nodeexecStages end nodeexec pods that kwok has made Running: Succeeded (exit code
// 0) after PodCompleteAfter, or Failed (exit code 1) on FailNodes; not those that
// wait for an exec or a port-forward (heldPodExprs), which run until deleted. The two
// selectors exclude each other, and the stock stages match no Running nodeexec pod
// (pod-complete is changed by kwokConfig), so no two stages compete for a pod.
// Deleting a pod still works: a terminated pod is removed by the API server at
// once, a running one by the stock pod-delete stage.
func nodeexecStages(o KwokOptions) []map[string]any {
	base := append([]any{
		map[string]any{"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
		map[string]any{"key": ".status.phase", "operator": "In", "values": []any{"Running"}},
	}, heldPodExprs(o.Exec)...)
	stage := func(name string, exprs []any, template string) map[string]any {
		return map[string]any{
			"apiVersion": "kwok.x-k8s.io/v1alpha1",
			"kind":       "Stage",
			"metadata":   map[string]any{"name": name},
			"spec": map[string]any{
				"resourceRef": map[string]any{"apiGroup": "v1", "kind": "Pod"},
				"selector": map[string]any{
					"matchLabels":      map[string]any{KwokPodLabel: KwokPodLabelValue},
					"matchExpressions": exprs,
				},
				"weight": 1,
				"delay":  map[string]any{"durationMilliseconds": o.PodCompleteAfter.Milliseconds()},
				"next":   map[string]any{"statusTemplate": template},
			},
		}
	}
	var fail []any
	for _, n := range o.FailNodes {
		fail = append(fail, n)
	}
	okExprs := slices.Clone(base)
	if len(fail) > 0 { // NotIn needs at least one value
		okExprs = append(okExprs, map[string]any{"key": ".spec.nodeName", "operator": "NotIn", "values": fail})
	}
	stages := []map[string]any{stage("nodeexec-pod-complete", okExprs, podEndTemplate(corev1.PodSucceeded, 0, "Completed", "PodCompleted"))}
	if len(fail) > 0 {
		failExprs := append(slices.Clone(base), map[string]any{"key": ".spec.nodeName", "operator": "In", "values": fail})
		stages = append(stages, stage("nodeexec-pod-fail", failExprs, podEndTemplate(corev1.PodFailed, 1, "Error", "PodFailed")))
	}
	return stages
}

// podEndTemplate is a kwok status template (Go text/template over the pod as JSON,
// applied as a strategic merge patch of the status) that ends the pod the way a
// kubelet does when its only run of each container exits.
func podEndTemplate(phase corev1.PodPhase, exitCode int, reason, condReason string) string {
	return `{{ $now := Now }}
{{ $root := . }}
conditions:
- lastProbeTime: null
  lastTransitionTime: {{ $now | Quote }}
  reason: ` + condReason + `
  status: "False"
  type: Ready
- lastProbeTime: null
  lastTransitionTime: {{ $now | Quote }}
  reason: ` + condReason + `
  status: "False"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
{{ $name := .name }}
{{ $started := $now }}
{{ range $root.status.containerStatuses }}{{ if eq .name $name }}{{ with .state }}{{ with .running }}{{ $started = .startedAt }}{{ end }}{{ end }}{{ end }}{{ end }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: ` + strconv.Itoa(exitCode) + `
      finishedAt: {{ $now | Quote }}
      reason: ` + reason + `
      startedAt: {{ $started | Quote }}
{{ end }}
phase: ` + string(phase) + `
`
}
