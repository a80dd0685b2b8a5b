// Command dist builds nodeexec's release archives into a directory (make
// dist), one per release.Platforms entry, each holding the static binary as
// kubectl-nodeexec, and with -manifest renders the krew manifest with their
// SHA-256s (make krew-manifest). The same source, Go toolchain and version
// give the same archives, byte for byte: no build ID, no VCS stamp, no paths,
// fixed archive metadata.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/nodeexec/nodeexec/internal/release"
)

func main() {
	version := flag.String("version", "", "release version, e.g. v0.1.0 (linked in: nodeexec --version)")
	out := flag.String("out", "dist", "directory for the archives")
	manifest := flag.String("manifest", "", "also write the krew manifest to this file (e.g. "+release.ManifestPath+")")
	flag.Parse()
	if err := run(*version, *out, *manifest); err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

func run(version, out, manifest string) error {
	if err := release.CheckVersion(version); err != nil {
		return fmt.Errorf("-version: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "nodeexec-dist-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sums := map[release.Platform]string{}
	for _, p := range release.Platforms {
		bin := filepath.Join(tmp, p.OS+"_"+p.Arch)
		cmd := exec.Command("go", release.GoBuildArgs(version, bin)...)
		cmd.Env = append(os.Environ(), release.GoBuildEnv(p.OS, p.Arch)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		fmt.Fprintf(os.Stderr, "dist: building %s\n", p)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build for %s: %w", p, err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		archive, sum, err := release.Archive([]release.File{{Name: release.BinaryName, Mode: 0o755, Data: data}})
		if err != nil {
			return err
		}
		name := filepath.Join(out, release.ArchiveName(p))
		if err := os.WriteFile(name, archive, 0o644); err != nil {
			return err
		}
		bsum := sha256.Sum256(data)
		fmt.Printf("%s  %s (binary %s)\n", sum, name, hex.EncodeToString(bsum[:12]))
		sums[p] = sum
	}
	if manifest == "" {
		return nil
	}
	b, err := release.Manifest(version, sums)
	if err != nil {
		return err
	}
	if err := os.WriteFile(manifest, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dist: wrote %s for %s\n", manifest, version)
	return nil
}
