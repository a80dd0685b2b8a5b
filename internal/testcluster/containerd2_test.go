package testcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveContainerdVersion(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "1.6": "1.6", "v1.6": "1.6", "1.6.20": "1.6", "2.3.7": "2.3.7", "v2.3.7": "2.3.7", "2.10.0": "2.10.0",
	} {
		got, err := resolveContainerdVersion(in)
		if err != nil || got != want {
			t.Errorf("resolveContainerdVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"1.7.24", "1.6.5", "1.5", "2", "2.3", "2.3.7.1", "3.0.0", "latest", " 2.3.7", "2.3.7-rc.1", "debian"} {
		_, err := resolveContainerdVersion(bad)
		if err == nil {
			t.Errorf("resolveContainerdVersion(%q) accepted", bad)
			continue
		}
		for _, want := range []string{"--containerd-version", DebianContainerdVersion, Containerd2Version} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error for %q lacks %q: %v", bad, want, err)
			}
		}
	}
	// Options.resolve refuses it too, before anything is started
	if _, err := (Options{ContainerdVersion: "1.7.0"}).resolve(); err == nil || !strings.Contains(err.Error(), "--containerd-version") {
		t.Errorf("resolve accepted containerd 1.7.0: %v", err)
	}
}

func TestServedError(t *testing.T) {
	served := parseModuleVersions("github.com/containerd/containerd/v2 v2.0.13 v2.2.9 v2.3.7 v2.4.2\n")
	if strings.Join(served, " ") != "2.0.13 2.2.9 2.3.7 2.4.2" {
		t.Fatalf("parseModuleVersions = %v", served)
	}
	err := servedError("2.9.9", served)
	for _, want := range []string{"--containerd-version", "2.9.9", "2.2.9 2.3.7 2.4.2", "tested: " + Containerd2Version} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if parseModuleVersions("") != nil {
		t.Error("empty output parsed to versions")
	}
}

func TestContainerdLayout(t *testing.T) {
	l := testLayout(t)
	n := l.node(2)
	if l.containerdBinDir() != "" || l.ctr() != "ctr" || l.containerdArgv(n)[0] != "containerd" || l.recordedContainerd() != "1.6" {
		t.Errorf("Debian's containerd: bin %q ctr %q argv %v recorded %q", l.containerdBinDir(), l.ctr(), l.containerdArgv(n), l.recordedContainerd())
	}
	if l.nodeContainerdConfig(n) != containerdConfig(n) {
		t.Error("Debian's containerd does not get the version 2 config")
	}
	o := l.o
	o.ContainerdVersion = "2.3.7"
	l2 := newLayout(o)
	if l2.containerdBinDir() != "/c/containerd/v2.3.7/bin" || l2.ctr() != "/c/containerd/v2.3.7/bin/ctr" ||
		strings.Join(l2.containerdArgv(n), " ") != "/c/containerd/v2.3.7/bin/containerd --config /s/containerd-nodeexec-tc-2/config.toml" ||
		l2.recordedContainerd() != "2.3.7" {
		t.Errorf("containerd 2: bin %q ctr %q argv %v", l2.containerdBinDir(), l2.ctr(), l2.containerdArgv(n))
	}
	if !strings.HasPrefix(l2.nodeContainerdConfig(n), "version = 3\n") {
		t.Error("containerd 2 does not get the version 3 config")
	}
}

func TestContainerdConfigV3(t *testing.T) {
	n := testLayout(t).node(2)
	c := containerdConfigV3(n, "/c/containerd/v2.3.7/bin")
	for _, want := range []string{
		"version = 3\n",
		`root = "/s/containerd-nodeexec-tc-2/root"`,
		`state = "/r/containerd-nodeexec-tc-2/state"`,
		`address = "/r/containerd-nodeexec-tc-2.sock"`,
		`address = "/r/containerd-nodeexec-tc-2.sock.ttrpc"`,
		`path = "/s/containerd-nodeexec-tc-2/opt"`,
		`[plugins."io.containerd.cri.v1.images"]`,
		`snapshotter = "overlayfs"`,
		`sandbox = "nodeexec.local/pause:3.10"`,
		`[plugins."io.containerd.cri.v1.images".registry]` + "\n    config_path = \"" + n.certsDir() + `"`,
		`[plugins."io.containerd.cri.v1.runtime"]`,
		"restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true",
		`default_runtime_name = "runc"`,
		`runtime_type = "io.containerd.runc.v2"`,
		`runtime_path = "/c/containerd/v2.3.7/bin/containerd-shim-runc-v2"`,
		"SystemdCgroup = false",
		`Root = "/r/containerd-nodeexec-tc-2/runc"`,
		`BinaryName = "/c/containerd/v2.3.7/bin/runc"`,
		`bin_dirs = ["/usr/lib/cni"]`,
		`conf_dir = "/s/cni-nodeexec-tc-2/net.d"`,
	} {
		if !strings.Contains(c, want) {
			t.Errorf("containerd 2 config lacks %q:\n%s", want, c)
		}
	}
	for _, old := range []string{"sandbox_image", `"io.containerd.grpc.v1.cri".containerd`, "/run/containerd", "/var/lib/containerd", "version = 2"} {
		if strings.Contains(c, old) {
			t.Errorf("containerd 2 config has %q:\n%s", old, c)
		}
	}
}

func TestCheckContainerdReuse(t *testing.T) {
	for _, c := range []struct {
		want, running string
		ok            bool
	}{
		{"", "", true}, {"", "2.3.7", true}, {"1.6", "", true}, {"1.6", "1.6", true}, {"2.3.7", "2.3.7", true},
		{"2.3.7", "1.6", false}, {"2.3.7", "", false}, {"1.6", "2.3.7", false}, {"2.4.2", "2.3.7", false},
	} {
		o := testLayout(t).o
		o.ContainerdVersion = c.want
		r := newRunner(o)
		err := r.checkContainerdReuse(&clusterState{ContainerdVersion: c.running})
		if (err == nil) != c.ok {
			t.Errorf("want %q running %q: %v", c.want, c.running, err)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), "--containerd-version") || !strings.Contains(err.Error(), "down")) {
			t.Errorf("error names neither the flag nor the fix: %v", err)
		}
		if err == nil && c.running != "" && r.l.recordedContainerd() != c.running {
			t.Errorf("want %q running %q: adopted %q", c.want, c.running, r.l.recordedContainerd())
		}
	}
}

func TestRuncVersionOf(t *testing.T) {
	d := t.TempDir()
	if _, err := runcVersionOf(d); err == nil {
		t.Error("no runc-version file accepted")
	}
	writeFile(t, d+"/script/setup/runc-version", "v1.5.2\n")
	if v, err := runcVersionOf(d); err != nil || v != "1.5.2" {
		t.Errorf("runcVersionOf = %q, %v", v, err)
	}
	writeFile(t, d+"/script/setup/runc-version", "abc123\n")
	if _, err := runcVersionOf(d); err == nil {
		t.Error("a commit accepted as runc version")
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
