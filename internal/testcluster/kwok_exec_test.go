package testcluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

func TestKwokExecOptions(t *testing.T) {
	if _, err := (KwokOptions{Exec: true}).resolve(); err == nil || !strings.Contains(err.Error(), "AgentBinary") {
		t.Errorf("Exec without AgentBinary: %v, want an error naming AgentBinary", err)
	}
	o, err := KwokOptions{Exec: true, AgentBinary: "bin/nodeexec"}.resolve()
	if err != nil || !filepath.IsAbs(o.AgentBinary) || !strings.HasSuffix(o.AgentBinary, "/bin/nodeexec") {
		t.Errorf("resolve: %+v, %v; want an absolute AgentBinary", o, err)
	}
	// without Exec the binary plays no part (equal options compare equal)
	if o, _ := (KwokOptions{AgentBinary: "x"}).resolve(); o.AgentBinary != "" {
		t.Errorf("AgentBinary kept without Exec: %q", o.AgentBinary)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkAgentBinary(script); err == nil || !strings.Contains(err.Error(), "static nodeexec binary") {
		t.Errorf("a shell script as AgentBinary: %v", err)
	}
	if err := checkAgentBinary(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing AgentBinary: no error")
	}
}

func TestKwokExecArgs(t *testing.T) {
	plain := kwokArgs("/c/kwok", "/s/kwok", KwokOptions{})
	if !slices.Contains(plain, "--server-address=127.0.0.1:10247") || slices.ContainsFunc(plain, func(a string) bool { return strings.HasPrefix(a, "--tls") || strings.HasPrefix(a, "--node-port") }) {
		t.Errorf("argv without Exec: %v", plain)
	}
	argv := kwokArgs("/c/kwok", "/s/kwok", KwokOptions{Exec: true})
	for _, want := range []string{"--server-address=10.252.0.1:10250", "--node-port=10250",
		"--tls-cert-file=/s/kwok/serving.crt", "--tls-private-key-file=/s/kwok/serving.key", "--node-ip=10.252.0.1"} {
		if !slices.Contains(argv, want) {
			t.Errorf("Exec argv %v lacks %s", argv, want)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(argv), func(a string) bool { return !strings.HasPrefix(a, "--server-address=") })); n != 1 {
		t.Errorf("Exec argv has %d --server-address: %v", n, argv)
	}
	in := inKwokSandbox(procRecord{PID: 42}, argv)
	if diff := cmp.Diff([]string{"nsenter", "-t", "42", "-m", "-u", "-i", "-n", "-p", "--", "/c/kwok"}, in[:10]); diff != "" {
		t.Errorf("inKwokSandbox (-want +got):\n%s", diff)
	}
}

func TestKwokExecConfig(t *testing.T) {
	o, err := KwokOptions{Exec: true, AgentBinary: "/b/nodeexec", FailNodes: []string{"kwok-node-3"}, PodCompleteAfter: time.Second}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	b, err := kwokConfig(testStages(t, false), o)
	if err != nil {
		t.Fatal(err)
	}
	stages := parseKwokConfig(t, b)
	var names []string
	for _, s := range stages {
		names = append(names, s.Kind+"/"+s.Metadata.Name)
	}
	want := []string{"KwokConfiguration/", "Stage/node-initialize", "Stage/pod-create", "Stage/pod-init-container-running",
		"Stage/pod-init-container-completed", "Stage/pod-ready", "Stage/pod-complete", "Stage/pod-delete",
		"Stage/nodeexec-pod-complete", "Stage/nodeexec-pod-fail", "Stage/nodeexec-pod-ready-again",
		"ClusterExec/nodeexec", "ClusterAttach/nodeexec", "ClusterLogs/nodeexec", "ClusterPortForward/nodeexec"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("documents (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(b), "enableDebuggingHandlers: true") {
		t.Errorf("KwokConfiguration without enableDebuggingHandlers: true:\n%s", b)
	}
	// pods that wait for an exec (agent hold, the debug pod's sleep) or a
	// port-forward (agent serve) are never ended by our stages
	held := []string{`.metadata.labels["app.kubernetes.io/component"] NotIn agent`, ".spec.containers[0].command[2] NotIn hold", ".spec.containers[0].command[0] NotIn sleep"}
	for _, name := range []string{"nodeexec-pod-complete", "nodeexec-pod-fail"} {
		got := exprString(stageByName(stages, name))
		if diff := cmp.Diff(held, got[2:5]); diff != "" {
			t.Errorf("%s selector (-want +got):\n%s", name, diff)
		}
	}

	// the exec resources, as kwok reads them
	var docs []map[string]any
	for _, doc := range strings.Split(string(b), "---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if m != nil && m["kind"] != "Stage" && m["kind"] != "KwokConfiguration" {
			docs = append(docs, m)
		}
	}
	wantDocs := []map[string]any{
		{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterExec", "metadata": map[string]any{"name": "nodeexec"},
			"spec": map[string]any{"execs": []any{map[string]any{"local": map[string]any{"workDir": "/"}}}}},
		{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterAttach", "metadata": map[string]any{"name": "nodeexec"},
			"spec": map[string]any{"attaches": []any{map[string]any{"logsFile": "/var/log/kwok/container.log"}}}},
		{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": map[string]any{"name": "nodeexec"},
			"spec": map[string]any{"logs": []any{map[string]any{"logsFile": "/var/log/kwok/container.log", "follow": false}}}},
		{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterPortForward", "metadata": map[string]any{"name": "nodeexec"},
			"spec": map[string]any{"forwards": []any{map[string]any{"target": map[string]any{"address": "127.0.0.1", "port": float64(KwokAgentPort)}}}}},
	}
	if diff := cmp.Diff(wantDocs, docs); diff != "" {
		t.Errorf("exec resources (-want +got):\n%s", diff)
	}

	// without Exec: no exec resources, and only the resident agents are held
	o.Exec = false
	b, err = kwokConfig(testStages(t, false), o)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "ClusterExec") || strings.Contains(string(b), "NotIn sleep") {
		t.Errorf("config without Exec has exec resources or holds debug pods:\n%s", b)
	}
}

// TestKwokPatchesApply applies kwokPatches to kwok's module source, when the
// module cache has it (the e2e tests build it; CI's unit run may not).
func TestKwokPatchesApply(t *testing.T) {
	gopath := os.Getenv("GOMODCACHE")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go", "pkg", "mod")
	}
	modDir := filepath.Join(gopath, "sigs.k8s.io", "kwok@"+DefaultKwokVersion)
	if _, err := os.Stat(modDir); err != nil {
		t.Skipf("kwok %s source not in the module cache: %v", DefaultKwokVersion, err)
	}
	files, missing, err := applyKwokPatches(modDir)
	if err != nil || missing != "" {
		t.Fatalf("patches: missing %q, %v", missing, err)
	}
	for _, p := range kwokPatches {
		if !strings.Contains(string(files[p.file]), p.new) {
			t.Errorf("%s lacks %q", p.file, p.new)
		}
	}
	extra := files["pkg/kwok/server/nodeexec_exec.go"]
	for _, want := range []string{"KWOK_NODE_NAME=", "KWOK_POD_NAME=", "func nodeexecExitCode(", "ExitStatus() int", "func (s *Server) nodeexecAttach("} {
		if !strings.Contains(string(extra), want) {
			t.Errorf("nodeexec_exec.go lacks %q", want)
		}
	}
	// a patch that does not apply names its file
	dir := t.TempDir()
	for _, p := range kwokPatches {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p.file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.file), []byte("changed"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, missing, err := applyKwokPatches(dir); err != nil || missing != kwokPatches[0].file {
		t.Errorf("changed source: missing %q, %v", missing, err)
	}
}

// The stock node-initialize stage names a node's Hostname address after kwok's
// --node-name (empty), which makes it clear the addresses every other run;
// kwokConfig names it after the node, in the real stage and in the fixture.
func TestFixNodeAddresses(t *testing.T) {
	stages := testStages(t, false)
	gopath := os.Getenv("GOMODCACHE")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go", "pkg", "mod")
	}
	if real, err := readKwokStages(filepath.Join(gopath, "sigs.k8s.io", "kwok@"+DefaultKwokVersion), false); err == nil {
		stages = real
	} else {
		t.Logf("kwok %s source not in the module cache (%v): the fixture's stages", DefaultKwokVersion, err)
	}
	cfg, err := kwokConfig(stages, KwokOptions{Exec: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(cfg), "\n---\n") {
		var st map[string]any
		if err := yaml.Unmarshal([]byte(doc), &st); err != nil {
			t.Fatal(err)
		}
		if name, _, _ := unstructuredString(st, "metadata", "name"); name != "node-initialize" {
			continue
		}
		tmpl, _, _ := unstructuredString(st, "spec", "next", "statusTemplate")
		if strings.Contains(tmpl, kwokHostnameAddress) || !strings.Contains(tmpl, kwokHostnameAddressFix) {
			t.Errorf("node-initialize's statusTemplate still names the Hostname after kwok's --node-name:\n%s", tmpl)
		}
		return
	}
	t.Fatal("no node-initialize stage in the config")
}

func TestFixNodeAddressesChangedStage(t *testing.T) {
	st := map[string]any{"spec": map[string]any{"next": map[string]any{"statusTemplate": "phase: Running"}}}
	if err := fixNodeAddresses(st); err == nil || !strings.Contains(err.Error(), kwokHostnameAddress) {
		t.Errorf("a stage without the Hostname template: %v, want an error naming it", err)
	}
	if err := fixNodeAddresses(map[string]any{}); err == nil {
		t.Error("a stage without a statusTemplate: no error")
	}
}
