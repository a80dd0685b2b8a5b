package release

// VersionVar is the variable `nodeexec version` reads the release version
// from, set at link time with -X.
const VersionVar = "github.com/nodeexec/nodeexec/internal/cli.version"

// GoBuildArgs are the arguments of `go build` (after "go") that build the
// static nodeexec binary ./cmd/nodeexec into out, reproducibly: -trimpath
// (no local paths), -buildvcs=false (no VCS stamp), -ldflags "-s -w
// -buildid=" (no symbols, no build ID) and, when version is not empty,
// "-X VersionVar=version". Run it from the module's root with GoBuildEnv.
// make dist (cmd/dist) and the agent image's cross-compiled binaries
// (internal/agentimage.BuildBinaryFor) both build with these.
func GoBuildArgs(version, out string) []string {
	return goBuildArgs(version, out, "./cmd/nodeexec")
}

// GoBuildSpoolArgs are GoBuildArgs for nodeexec-spool (./cmd/nodeexec-spool,
// the small program the agent image holds beside nodeexec), with the same
// reproducible flags and no version.
func GoBuildSpoolArgs(out string) []string {
	return goBuildArgs("", out, "./cmd/nodeexec-spool")
}

func goBuildArgs(version, out, pkg string) []string {
	ldflags := "-s -w -buildid="
	if version != "" {
		ldflags += " -X " + VersionVar + "=" + version
	}
	return []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, pkg}
}

// GoBuildEnv is what GoBuildArgs' build adds to the environment for the
// platform goos/goarch: CGO_ENABLED=0 (a static binary), GOOS and GOARCH.
func GoBuildEnv(goos, goarch string) []string {
	return []string{"CGO_ENABLED=0", "GOOS=" + goos, "GOARCH=" + goarch}
}
