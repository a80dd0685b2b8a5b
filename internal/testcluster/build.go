package testcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Debian packages the cluster needs. Start installs the missing ones.
func requiredPackages() []string {
	return []string{
		"containerd", "runc", "containernetworking-plugins", // runtime, bridge/host-local/portmap CNI
		"iptables", // portmap CNI plugin, kubernetes Service DNAT
		"socat",    // API server forwarders
		"busybox-static",
		"util-linux", "mount", "iproute2", // nsenter, unshare, umount, ip
		// Prometheus, Alertmanager, Pushgateway (monitoring.go)
		"prometheus", "prometheus-alertmanager", "prometheus-pushgateway",
		// the e2e tests: a terminal to type in as a person would, and the
		// player of shell --record's asciicast files
		"tmux", "asciinema",
	}
}

// requiredCommands must be found (on daemonPath) after the packages are installed.
func requiredCommands() []string {
	return []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "socat",
		"nsenter", "unshare", "umount", "ip", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local",
		"/usr/lib/cni/portmap", busyboxPath, "/usr/bin/prometheus", "/usr/bin/prometheus-alertmanager",
		"/usr/bin/prometheus-pushgateway", "tmux", "asciinema"}
}

const busyboxPath = "/bin/busybox" // from busybox-static: a static binary

// parseDpkgStatus parses `dpkg-query -W -f '${Package}\t${db:Status-Status}\n'` output
// into the set of installed packages.
func parseDpkgStatus(out string) map[string]bool {
	installed := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		pkg, status, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && status == "installed" {
			installed[strings.SplitN(pkg, ":", 2)[0]] = true
		}
	}
	return installed
}

// ensurePackages installs the missing required packages with apt-get (one
// `apt-get update`, then one install). Services the packages ship are not started:
// a temporary policy-rc.d forbids it unless the machine already has one.
func (r *runner) ensurePackages(ctx context.Context) error {
	pkgs := requiredPackages()
	if containerdBuilt(r.o.ContainerdVersion) {
		pkgs = append(pkgs, containerd2Packages()...)
	}
	args := append([]string{"-W", "-f", "${Package}\t${db:Status-Status}\n"}, pkgs...)
	out, _ := exec.CommandContext(ctx, "dpkg-query", args...).Output() // exit 1 when some are unknown
	installed := parseDpkgStatus(string(out))
	var missing []string
	for _, p := range pkgs {
		if !installed[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		r.logf("apt-get install %s", strings.Join(missing, " "))
		const policy = "/usr/sbin/policy-rc.d"
		if _, err := os.Stat(policy); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(policy, []byte("#!/bin/sh\n# written by nodeexec testcluster during apt-get install\nexit 101\n"), 0o755); err == nil {
				defer os.Remove(policy)
			}
		}
		env := []string{"DEBIAN_FRONTEND=noninteractive"}
		if _, err := runEnv(ctx, env, "", "apt-get", "update", "-qq"); err != nil {
			return fmt.Errorf("install packages: %w", err)
		}
		inst := append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)
		if _, err := runEnv(ctx, env, "", "apt-get", inst...); err != nil {
			return fmt.Errorf("install packages: %w", err)
		}
		if err := r.disablePackagedServices(ctx, missing); err != nil {
			return err
		}
	}
	var absent []string
	for _, c := range requiredCommands() {
		if !commandExists(c) {
			absent = append(absent, c)
		}
	}
	if len(absent) > 0 {
		return fmt.Errorf("install packages: still missing after installing %v: %v", requiredPackages(), absent)
	}
	return nil
}

func commandExists(c string) bool {
	if strings.HasPrefix(c, "/") {
		st, err := os.Stat(c)
		return err == nil && st.Mode()&0o111 != 0
	}
	for _, dir := range filepath.SplitList(daemonPath) {
		if st, err := os.Stat(filepath.Join(dir, c)); err == nil && st.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// goTool finds the go command.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		return "/usr/local/go/bin/go", nil
	}
	return "", errors.New("the go command is needed to build the Kubernetes binaries and helpers (not on PATH nor in /usr/local/go/bin)")
}

// k8sBuild describes one build of the Kubernetes binaries from the Go module proxy.
// k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the k8s.io/*
// staging modules with ./staging/... directories), so a scratch module requires
// k8s.io/kubernetes@vX.Y.Z, replaces each staging module with its published
// v0.Y.Z tag, and builds the cmd packages from the dependency.
type k8sBuild struct {
	Version string // 1.37.1
	SrcDir  string // scratch module
	BinDir  string // output
	GoCache string // GOCACHE
}

// replaceLineRE matches a replace directive (in or outside a block) that points to
// a ./staging/src/... directory.
var replaceLineRE = regexp.MustCompile(`^\s*(?:replace\s+)?(\S+)(?:\s+v\S+)?\s+=>\s+\./staging/src/\S+\s*$`)

// parseKubernetesGoMod returns the module paths kubernetes' go.mod replaces with
// ./staging/src/... directories, and its go and godebug lines.
func parseKubernetesGoMod(gomod string) (staging []string, goLine string, godebug []string) {
	for _, line := range strings.Split(gomod, "\n") {
		if m := replaceLineRE.FindStringSubmatch(line); m != nil {
			staging = append(staging, m[1])
			continue
		}
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "go ") && goLine == "":
			goLine = t
		case strings.HasPrefix(t, "godebug "):
			godebug = append(godebug, t)
		}
	}
	return staging, goLine, godebug
}

// scratchGoMod renders the scratch module's go.mod.
func scratchGoMod(version string, staging []string, goLine string, godebug []string) string {
	minor, patch := k8sMinorPatch(version)
	var b strings.Builder
	b.WriteString("module nodeexec-testcluster-k8sbuild\n\n")
	if goLine != "" {
		b.WriteString(goLine + "\n\n")
	}
	for _, g := range godebug {
		b.WriteString(g + "\n")
	}
	if len(godebug) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "require k8s.io/kubernetes v%s\n\n", version)
	for _, m := range staging {
		fmt.Fprintf(&b, "replace %s => %s v0.%s.%s\n", m, m, minor, patch)
	}
	return b.String()
}

// k8sLDFlags sets the version information `make` would (without it the binaries
// report v0.0.0-master).
func k8sLDFlags(version string, buildDate time.Time) string {
	minor, _ := k8sMinorPatch(version)
	fl := []string{"-s", "-w"}
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fl = append(fl,
			"-X", p+".gitVersion=v"+version,
			"-X", p+".gitMajor=1",
			"-X", p+".gitMinor="+minor,
			"-X", p+".gitTreeState=clean",
			"-X", p+".gitCommit=modproxy",
			"-X", p+".buildDate="+buildDate.UTC().Format(time.RFC3339))
	}
	return strings.Join(fl, " ")
}

// run builds the binaries that are missing from BinDir.
func (b k8sBuild) run(ctx context.Context, r *runner) error {
	var need []string
	for _, c := range kubeBinaries() {
		if !commandExists(filepath.Join(b.BinDir, c)) {
			need = append(need, c)
		}
	}
	if len(need) == 0 {
		r.logf("Kubernetes v%s binaries cached in %s", b.Version, b.BinDir)
		return nil
	}
	goBin, err := goTool()
	if err != nil {
		return err
	}
	for _, d := range []string{b.SrcDir, b.BinDir, b.GoCache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("build Kubernetes: %w", err)
		}
	}
	env := []string{"GOCACHE=" + b.GoCache, "GOFLAGS=-mod=mod", "CGO_ENABLED=0"}
	gomod, _ := os.ReadFile(filepath.Join(b.SrcDir, "go.mod"))
	if _, err := os.Stat(filepath.Join(b.SrcDir, "go.sum")); err != nil ||
		!bytes.Contains(gomod, []byte("require k8s.io/kubernetes v"+b.Version+"\n")) {
		t := time.Now()
		_ = os.Remove(filepath.Join(b.SrcDir, "go.mod"))
		_ = os.Remove(filepath.Join(b.SrcDir, "go.sum"))
		out, err := runEnv(ctx, env, b.SrcDir, goBin, "mod", "download", "-json", "k8s.io/kubernetes@v"+b.Version)
		if err != nil {
			return fmt.Errorf("build Kubernetes: %w", err)
		}
		var info struct{ GoMod, Error string }
		if err := json.Unmarshal([]byte(out), &info); err != nil || info.GoMod == "" {
			return fmt.Errorf("build Kubernetes: go mod download k8s.io/kubernetes@v%s: %v %s", b.Version, err, info.Error)
		}
		kmod, err := os.ReadFile(info.GoMod)
		if err != nil {
			return fmt.Errorf("build Kubernetes: %w", err)
		}
		staging, goLine, godebug := parseKubernetesGoMod(string(kmod))
		if len(staging) == 0 {
			return fmt.Errorf("build Kubernetes: no staging replaces found in %s", info.GoMod)
		}
		if err := os.WriteFile(filepath.Join(b.SrcDir, "go.mod"), []byte(scratchGoMod(b.Version, staging, goLine, godebug)), 0o644); err != nil {
			return fmt.Errorf("build Kubernetes: %w", err)
		}
		// go get resolves and records every requirement (and go.sum) of the main packages
		get := []string{"get"}
		for _, c := range kubeBinaries() {
			get = append(get, "k8s.io/kubernetes/cmd/"+c+"@v"+b.Version)
		}
		if _, err := runEnv(ctx, env, b.SrcDir, goBin, get...); err != nil {
			return fmt.Errorf("build Kubernetes: %w", err)
		}
		r.timing("k8s-module-resolve", t)
	}
	// One go build for every binary needed: the module's packages are loaded once
	// and the binaries compiled and linked in parallel (-p), instead of one go
	// build (load, then a serial link) per binary.
	t := time.Now()
	r.logf("building %s v%s (a cold build of all four takes about 10 minutes on 2 cores)", strings.Join(need, ", "), b.Version)
	tmp, err := os.MkdirTemp(b.BinDir, ".build-")
	if err != nil {
		return fmt.Errorf("build Kubernetes: %w", err)
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-trimpath", "-ldflags", k8sLDFlags(b.Version, time.Now()), "-o", tmp + string(filepath.Separator)}
	for _, c := range need {
		args = append(args, "k8s.io/kubernetes/cmd/"+c)
	}
	if _, err := runEnv(ctx, env, b.SrcDir, goBin, args...); err != nil {
		return fmt.Errorf("build Kubernetes: %w", err)
	}
	for _, c := range need {
		if err := os.Rename(filepath.Join(tmp, c), filepath.Join(b.BinDir, c)); err != nil {
			return fmt.Errorf("build Kubernetes: %w", err)
		}
	}
	r.timing("build-kubernetes", t)
	return nil
}

// DefaultEtcdVersion of go.etcd.io/etcd/server/v3 built for the control plane.
// Kubernetes 1.37 supports etcd 3.5 and 3.6; an older etcd (Debian's 3.4)
// lacks watch progress notifications, so the API server turns off
// RequestWatchProgress and with it what a real cluster does: watch-list
// streaming of informers' initial lists and consistent lists from the watch
// cache.
const DefaultEtcdVersion = "3.6.16"

// etcdMain is the etcd binary's main package: etcd's own main, which the
// module's replace directives keep from being `go install`ed.
const etcdMain = `package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`

func (l layout) etcdBinary(version string) string {
	return filepath.Join(l.binDir, "etcd-v"+version)
}

// buildEtcd builds etcd version from the Go module proxy in a scratch
// module (cached: cold, under a minute on 2 cores).
func (r *runner) buildEtcd(ctx context.Context, version string) (string, error) {
	out := r.l.etcdBinary(version)
	if commandExists(out) {
		return out, nil
	}
	r.logf("building go.etcd.io/etcd/server/v3 v%s (cold: under a minute on 2 cores)", version)
	return out, r.buildScratch(ctx, "etcd", filepath.Join(r.o.CacheDir, "src", "etcd-v"+version), out,
		map[string][]byte{"main.go": []byte(etcdMain), "go.mod": []byte("module nodeexec-testcluster-etcd\n\ngo 1.24\n")},
		"go.etcd.io/etcd/server/v3@v"+version)
}

//go:embed pause/main.go
var pauseSource []byte

// buildPause builds the pause binary (the sandbox container's process, also each
// node's init) from the embedded source in a scratch module. The file name carries
// the source hash, so a changed source is rebuilt.
func (r *runner) buildPause(ctx context.Context) (string, error) {
	sum := sha256.Sum256(pauseSource)
	out := filepath.Join(r.l.binDir, "pause-"+hex.EncodeToString(sum[:6]))
	if commandExists(out) {
		return out, nil
	}
	return out, r.buildScratch(ctx, "pause", filepath.Join(r.o.CacheDir, "src", "pause"), out,
		map[string][]byte{"main.go": pauseSource, "go.mod": []byte("module nodeexec-testcluster-pause\n\ngo 1.22\n")})
}

// buildScratch builds binary out from a scratch module in directory src
// holding files (by name: its main package and go.mod): first `go get` of
// each module@version in get (recorded in go.mod and go.sum), then `go build
// -trimpath -ldflags "-s -w"`, with CGO off and the cluster's Go build
// cache. what names the build in errors.
func (r *runner) buildScratch(ctx context.Context, what, src, out string, files map[string][]byte, get ...string) error {
	goBin, err := goTool()
	if err != nil {
		return err
	}
	for _, d := range []string{src, filepath.Dir(out)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("build %s: %w", what, err)
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), body, 0o644); err != nil {
			return fmt.Errorf("build %s: %w", what, err)
		}
	}
	env := []string{"GOCACHE=" + r.l.gocache, "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off"}
	if len(get) > 0 {
		if _, err := runEnv(ctx, env, src, goBin, append([]string{"get"}, get...)...); err != nil {
			return fmt.Errorf("build %s: %w", what, err)
		}
	}
	if _, err := runEnv(ctx, env, src, goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", out+".tmp", "."); err != nil {
		return fmt.Errorf("build %s: %w", what, err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return fmt.Errorf("build %s: %w", what, err)
	}
	return nil
}

// baseImages builds the images every cluster needs: the sandbox image (PauseImage)
// and busybox (ToolsImage and BusyboxImage, one image), by name.
func baseImages(ctx context.Context, pauseBin string) (map[string]v1.Image, error) {
	pause, err := NewImage(ctx, pauseImageSpec(pauseBin))
	if err != nil {
		return nil, err
	}
	tools, err := NewImage(ctx, toolsImageSpec(busyboxPath))
	if err != nil {
		return nil, err
	}
	return map[string]v1.Image{PauseImage: pause, ToolsImage: tools, BusyboxImage: tools}, nil
}
