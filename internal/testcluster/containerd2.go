package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Container runtimes the nodes can run (Options.ContainerdVersion).
const (
	// DebianContainerdVersion names Debian's packaged containerd (1.6.20 on
	// Debian 12), installed with apt: the default.
	DebianContainerdVersion = "1.6"
	// Containerd2Version is the containerd 2 release the project tests with
	// (make test-matrix); any 2.x.y the Go module proxy serves and this Go
	// builds is accepted.
	Containerd2Version = "2.3.7"
	// containerdModule is built for ContainerdVersion 2.x.y.
	containerdModule = "github.com/containerd/containerd/v2"
	// runcModule is built for the runc containerd 2 tests with.
	runcModule = "github.com/opencontainers/runc"
)

var containerd2RE = regexp.MustCompile(`^v?(2\.[0-9]+\.[0-9]+)$`)

// resolveContainerdVersion normalizes Options.ContainerdVersion: "" stays ""
// (Debian's containerd for a new cluster, whatever runs for a reused one);
// "1.6" or Debian's "1.6.20" become DebianContainerdVersion; "2.x.y" or
// "v2.x.y" become "2.x.y". Anything else is an error naming the flag and the
// versions that work. Whether the module proxy serves a 2.x.y is checked by
// checkContainerdServed (it needs the network).
func resolveContainerdVersion(v string) (string, error) {
	switch v {
	case "":
		return "", nil
	case DebianContainerdVersion, "1.6.20", "v1.6", "v1.6.20":
		return DebianContainerdVersion, nil
	}
	if m := containerd2RE.FindStringSubmatch(v); m != nil {
		return m[1], nil
	}
	return "", fmt.Errorf("testcluster: ContainerdVersion (--containerd-version) %q is not one that works: "+
		"use %s (Debian's packaged containerd, the default) or a 2.x.y release of %s such as %s (built from the Go module proxy)",
		v, DebianContainerdVersion, containerdModule, Containerd2Version)
}

// containerdBuilt reports whether version is built from the module proxy
// (2.x.y) rather than Debian's package.
func containerdBuilt(version string) bool { return strings.HasPrefix(version, "2.") }

// containerdShown is how a recorded or requested version is printed.
func containerdShown(version string) string {
	if version == "" || version == DebianContainerdVersion {
		return DebianContainerdVersion + " (Debian package)"
	}
	return version + " (built from " + containerdModule + ")"
}

// parseModuleVersions parses `go list -m -versions MODULE` output into its
// versions, without the "v".
func parseModuleVersions(out string) []string {
	f := strings.Fields(strings.TrimSpace(out))
	if len(f) < 2 {
		return nil
	}
	var vs []string
	for _, v := range f[1:] {
		vs = append(vs, strings.TrimPrefix(v, "v"))
	}
	return vs
}

// servedError is the error for a 2.x.y the module proxy does not serve.
func servedError(version string, served []string) error {
	var two []string
	for _, v := range served {
		if containerd2RE.MatchString(v) {
			two = append(two, v)
		}
	}
	return fmt.Errorf("testcluster: ContainerdVersion (--containerd-version) %s is not served by the Go module proxy for %s; served 2.x: %s (tested: %s), or %s for Debian's",
		version, containerdModule, strings.Join(two, " "), Containerd2Version, DebianContainerdVersion)
}

// checkContainerdServed fails when version (2.x.y) is not among the versions
// the Go module proxy lists for github.com/containerd/containerd/v2. It runs
// before anything is built or started. A version already built in the cache
// needs no network.
func checkContainerdServed(ctx context.Context, l layout, version string) error {
	if !containerdBuilt(version) || containerdCacheComplete(l.containerdBinDir()) {
		return nil
	}
	goBin, err := goTool()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nodeexec-tc-versions-")
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	defer os.RemoveAll(dir)
	out, err := runEnv(ctx, []string{"GOWORK=off", "GOFLAGS="}, dir, goBin, "list", "-m", "-versions", containerdModule)
	if err != nil {
		return fmt.Errorf("testcluster: list the versions of %s for --containerd-version: %w", containerdModule, err)
	}
	served := parseModuleVersions(out)
	if !slices.Contains(served, version) {
		return servedError(version, served)
	}
	return nil
}

// containerdBinDir is <cache>/containerd/v<version>/bin for a built version,
// "" for Debian's.
func (l layout) containerdBinDir() string {
	if !containerdBuilt(l.o.ContainerdVersion) {
		return ""
	}
	return filepath.Join(l.o.CacheDir, "containerd", "v"+l.o.ContainerdVersion, "bin")
}

// containerdCommand is the path of containerd, ctr or containerd-shim-runc-v2
// (name) for the cluster's containerd: the name itself (found on daemonPath)
// for Debian's.
func (l layout) containerdCommand(name string) string {
	if d := l.containerdBinDir(); d != "" {
		return filepath.Join(d, name)
	}
	return name
}

// ctr is the ctr client matching the nodes' containerd.
func (l layout) ctr() string { return l.containerdCommand("ctr") }

// containerdArgv starts node n's containerd.
func (l layout) containerdArgv(n nodeSpec) []string {
	return []string{l.containerdCommand("containerd"), "--config", filepath.Join(n.ContainerdDir, "config.toml")}
}

// nodeContainerdConfig renders node n's containerd config for the cluster's
// containerd: version 2 for Debian's 1.6, version 3 for 2.x.
func (l layout) nodeContainerdConfig(n nodeSpec) string {
	if d := l.containerdBinDir(); d != "" {
		return containerdConfigV3(n, d)
	}
	return containerdConfig(n)
}

// containerd2Binaries are built from the containerd module; runc comes from
// the runc module.
func containerd2Binaries() []string { return []string{"containerd", "containerd-shim-runc-v2", "ctr"} }

// completeMarker is written into a build's bin directory last: a directory
// without it is never used.
const completeMarker = ".complete"

func containerdCacheComplete(bin string) bool {
	if bin == "" {
		return false
	}
	if _, err := os.Stat(filepath.Join(bin, completeMarker)); err != nil {
		return false
	}
	for _, c := range append(containerd2Binaries(), "runc") {
		if !commandExists(filepath.Join(bin, c)) {
			return false
		}
	}
	return true
}

// buildContainerd2 builds containerd, containerd-shim-runc-v2 and ctr from
// github.com/containerd/containerd/v2@v<version> (one go build, CGO off, no
// btrfs/devmapper/zfs snapshotters) and runc at the version containerd's
// CI tests with (script/setup/runc-version in the module) from
// github.com/opencontainers/runc (cgo, seccomp: needs libseccomp-dev) into
// <cache>/containerd/v<version>/bin. The binaries are built in a temporary
// directory that is renamed into place with a completion marker, so a
// half-built cache is never used; the caller holds the cache lock. Cached:
// nothing is done when the directory is complete.
func (r *runner) buildContainerd2(ctx context.Context) error {
	version := r.o.ContainerdVersion
	bin := r.l.containerdBinDir()
	if bin == "" {
		return nil
	}
	if containerdCacheComplete(bin) {
		r.logf("containerd v%s binaries cached in %s", version, bin)
		return nil
	}
	goBin, err := goTool()
	if err != nil {
		return err
	}
	top := filepath.Dir(bin)
	src := filepath.Join(top, "src")
	for _, d := range []string{src, top, r.l.gocache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("build containerd: %w", err)
		}
	}
	_ = os.RemoveAll(bin) // incomplete
	tmp, err := os.MkdirTemp(top, ".build-")
	if err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}

	t := time.Now()
	env := []string{"GOCACHE=" + r.l.gocache, "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0"}
	out, err := runEnv(ctx, env, src, goBin, "mod", "download", "-json", containerdModule+"@v"+version)
	if err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}
	var info struct{ Dir, GoMod, Error string }
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Dir == "" {
		return fmt.Errorf("build containerd: go mod download %s@v%s: %v %s", containerdModule, version, err, info.Error)
	}
	goLine := "go 1.24"
	if kmod, err := os.ReadFile(info.GoMod); err == nil {
		if _, g, _ := parseKubernetesGoMod(string(kmod)); g != "" {
			goLine = g
		}
	}
	runcVersion, err := runcVersionOf(info.Dir)
	if err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}
	gomod := fmt.Sprintf("module nodeexec-testcluster-containerd\n\n%s\n\nrequire %s v%s\n", goLine, containerdModule, version)
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}
	_ = os.Remove(filepath.Join(src, "go.sum"))
	get := []string{"get"}
	for _, c := range containerd2Binaries() {
		get = append(get, containerdModule+"/cmd/"+c+"@v"+version)
	}
	if _, err := runEnv(ctx, env, src, goBin, get...); err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}
	r.logf("building containerd, containerd-shim-runc-v2, ctr v%s (cold: about 3 minutes on 2 cores)", version)
	args := []string{"build", "-trimpath", "-tags", "no_btrfs no_devmapper no_zfs",
		"-ldflags", "-s -w -X " + containerdModule + "/version.Version=v" + version,
		"-o", tmp + string(filepath.Separator)}
	for _, c := range containerd2Binaries() {
		args = append(args, containerdModule+"/cmd/"+c)
	}
	if _, err := runEnv(ctx, env, src, goBin, args...); err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}
	r.timing("build-containerd-v"+version, t)

	t = time.Now()
	if err := r.buildRunc(ctx, goBin, filepath.Join(top, "src-runc"), runcVersion, filepath.Join(tmp, "runc")); err != nil {
		return err
	}
	r.timing("build-runc-v"+runcVersion, t)
	if err := os.WriteFile(filepath.Join(tmp, completeMarker),
		[]byte(fmt.Sprintf("containerd v%s\nrunc v%s\n", version, runcVersion)), 0o644); err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return fmt.Errorf("build containerd: %w", err)
	}
	return nil
}

// runcVersionOf reads the runc version containerd's CI tests with from the
// module's script/setup/runc-version ("v1.5.2"), without the "v".
func runcVersionOf(moduleDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(moduleDir, "script", "setup", "runc-version"))
	if err != nil {
		return "", fmt.Errorf("the runc version containerd tests with: %w", err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(b)), "v")
	if !versionRE.MatchString(v) {
		return "", fmt.Errorf("the runc version containerd tests with: %q in script/setup/runc-version is not a release", v)
	}
	return v, nil
}

// buildRunc builds runc version (a module without replace directives: its
// main package is the module root) with cgo and seccomp into out.
func (r *runner) buildRunc(ctx context.Context, goBin, src, version, out string) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("build runc: %w", err)
	}
	gomod := fmt.Sprintf("module nodeexec-testcluster-runc\n\ngo 1.24\n\nrequire %s v%s\n", runcModule, version)
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
		return fmt.Errorf("build runc: %w", err)
	}
	_ = os.Remove(filepath.Join(src, "go.sum"))
	env := []string{"GOCACHE=" + r.l.gocache, "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=1"}
	if _, err := runEnv(ctx, env, src, goBin, "get", runcModule+"@v"+version); err != nil {
		return fmt.Errorf("build runc: %w", err)
	}
	r.logf("building runc v%s (cgo, seccomp)", version)
	if _, err := runEnv(ctx, env, src, goBin, "build", "-trimpath", "-tags", "seccomp urfave_cli_no_docs",
		"-ldflags", "-s -w -X main.version="+version+" -X main.gitCommit=modproxy", "-o", out, runcModule); err != nil {
		return fmt.Errorf("build runc: %w", err)
	}
	return nil
}

// containerd2Packages are the Debian packages a containerd 2 build needs
// (runc links libseccomp).
func containerd2Packages() []string { return []string{"libseccomp-dev", "gcc", "pkg-config"} }

// containerdConfigV3 renders a node's containerd 2.x config (version 3: the
// CRI plugin is split into io.containerd.cri.v1.images, .runtime and
// io.containerd.grpc.v1.cri). Same paths and settings as containerdConfig;
// the runc shim and runc are the built ones in bin.
func containerdConfigV3(n nodeSpec, bin string) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = %[5]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[7]q
  # registry hosts (certs.d/<registry>/hosts.toml): the test registry, its CA, mirrors
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %[10]q

[plugins."io.containerd.cri.v1.runtime"]
  # This machine's root lacks CAP_SYS_RESOURCE (see containerdConfig)
  restrict_oom_score_adj = true
  # pod network namespaces are pinned under the state dir, not /run/netns
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %[11]q
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[8]q
        BinaryName = %[12]q
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %[9]q
`,
		containerdPaths(n, filepath.Join(bin, "containerd-shim-runc-v2"), filepath.Join(bin, "runc"))...)
}

// checkContainerdReuse refuses to reuse a running cluster whose containerd is
// not the explicitly requested one; with no ContainerdVersion any runs. It
// then adopts the running cluster's version (the ctr, containerd binary and
// config a restart uses).
func (r *runner) checkContainerdReuse(st *clusterState) error {
	running := st.ContainerdVersion
	if running == "" {
		running = DebianContainerdVersion // recorded before the field existed
	}
	if want := r.o.ContainerdVersion; want != "" && want != running {
		return fmt.Errorf("testcluster: a cluster with containerd %s is running (--containerd-version %s asked); run `testcluster down` first",
			containerdShown(running), want)
	}
	r.adoptContainerd(st)
	return nil
}

// adoptContainerd makes r use the containerd recorded in st.
func (r *runner) adoptContainerd(st *clusterState) {
	if st == nil || st.ContainerdVersion == r.o.ContainerdVersion {
		return
	}
	r.o.ContainerdVersion = st.ContainerdVersion
	r.l = newLayout(r.o)
}

// ContainerdVersion is the running cluster's containerd: DebianContainerdVersion
// ("1.6", Debian's package) or the 2.x.y built from the module proxy.
func (c *Cluster) ContainerdVersion() string {
	if containerdBuilt(c.r.o.ContainerdVersion) {
		return c.r.o.ContainerdVersion
	}
	return DebianContainerdVersion
}

// recordedContainerd is the version a new cluster records in its state.
func (l layout) recordedContainerd() string {
	if containerdBuilt(l.o.ContainerdVersion) {
		return l.o.ContainerdVersion
	}
	return DebianContainerdVersion
}
