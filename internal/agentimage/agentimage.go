// Package agentimage builds the nodeexec agent image from this repository,
// with no registry and no base image: the nodeexec binary, built static
// (CGO_ENABLED=0, -trimpath), at /usr/local/bin/nodeexec, plus busybox-static
// with a symlink per applet (the holder's `sleep`, a shell for debugging the
// image itself), /etc/passwd, /etc/group and /tmp. The result is a
// docker-archive tarball (testcluster.BuildImage) that
// (*testcluster.Cluster).ImportImage loads into every test node's containerd.
//
// It serves the e2e suite's TestMain and `make agent-image` (cmd/agentimage);
// the library itself only names the image (nsenter.DefaultAgentImage).
package agentimage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nsenter"
)

// BusyboxPath is the busybox-static binary on this machine (Debian's
// busybox-static package, which the test cluster installs).
const BusyboxPath = "/bin/busybox"

// Spec is the agent image named ref, from the nodeexec binary at bin and the
// busybox binary at busybox (both on this machine, both static).
func Spec(ref, bin, busybox string) testcluster.ImageSpec {
	return testcluster.ImageSpec{
		Name: ref,
		Files: []testcluster.ImageFile{
			{Src: bin, Dst: nsenter.AgentPath, Mode: 0o755},
			{Src: busybox, Dst: "/bin/busybox", Mode: 0o755},
			{Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), Dst: "/etc/passwd", Mode: 0o644},
			{Data: []byte("root:x:0:\nnogroup:x:65534:\n"), Dst: "/etc/group", Mode: 0o644},
		},
		Dirs:         []testcluster.ImageDir{{Path: "/tmp", Mode: 0o777 | fs.ModeSticky}, {Path: "/root", Mode: 0o700}},
		BusyboxLinks: "/bin/busybox",
		Cmd:          []string{"/bin/sh"},
	}
}

// Build compiles ./cmd/nodeexec of the module in moduleDir as a static
// binary and writes the agent image named ref to the tarball out. Errors come
// from `go build` (with its output) and testcluster.BuildImage.
func Build(ctx context.Context, moduleDir, ref, out string) error {
	tmp, err := os.MkdirTemp("", "nodeexec-agent-")
	if err != nil {
		return fmt.Errorf("agentimage: %w", err)
	}
	defer os.RemoveAll(tmp)
	bin, err := buildBinary(ctx, moduleDir, tmp)
	if err != nil {
		return err
	}
	if err := testcluster.BuildImage(ctx, out, Spec(ref, bin, BusyboxPath)); err != nil {
		return fmt.Errorf("agentimage: %w", err)
	}
	return nil
}

// buildBinary compiles ./cmd/nodeexec of moduleDir as a static binary in dir.
func buildBinary(ctx context.Context, moduleDir, dir string) (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nodeexec")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/nodeexec")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("agentimage: go build ./cmd/nodeexec in %s: %w\n%s", moduleDir, err, strings.TrimSpace(string(b)))
	}
	return bin, nil
}

// ControllerImage is the NodeScript watcher's image (deploy/deployment.yaml):
// the same static nodeexec binary and busybox, run as `nodeexec watch`.
const ControllerImage = "nodeexec.local/controller:" + nsenter.AgentVersion

// BuildAndImport builds the image named ref from moduleDir and imports it
// into every node of c, and the same image under each of also (one build).
func BuildAndImport(ctx context.Context, c *testcluster.Cluster, moduleDir, ref string, also ...string) error {
	tmp, err := os.MkdirTemp("", "nodeexec-agent-image-")
	if err != nil {
		return fmt.Errorf("agentimage: %w", err)
	}
	defer os.RemoveAll(tmp)
	bin, err := buildBinary(ctx, moduleDir, tmp)
	if err != nil {
		return err
	}
	for i, r := range append([]string{ref}, also...) {
		tarball := filepath.Join(tmp, fmt.Sprintf("image-%d.tar", i))
		if err := testcluster.BuildImage(ctx, tarball, Spec(r, bin, BusyboxPath)); err != nil {
			return fmt.Errorf("agentimage: %w", err)
		}
		if err := c.ImportImage(ctx, tarball); err != nil {
			return fmt.Errorf("agentimage: import %s: %w", r, err)
		}
	}
	return nil
}

// goTool finds the go command: on PATH, else /usr/local/go/bin/go.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		return "/usr/local/go/bin/go", nil
	}
	return "", errors.New("agentimage: the go command is needed to build the agent (not on PATH nor in /usr/local/go/bin)")
}
