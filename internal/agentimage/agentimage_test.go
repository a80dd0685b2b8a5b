package agentimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nsenter"
)

// TestSpecBuilds builds the image from Spec (with a stand-in for the
// nodeexec binary) and checks the layer: the agent at nsenter.AgentPath,
// busybox with its sleep applet (the holder), and the reference.
func TestSpecBuilds(t *testing.T) {
	if _, err := os.Stat(BusyboxPath); err != nil {
		t.Fatalf("%s is needed (Debian busybox-static): %v", BusyboxPath, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nodeexec")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho agent\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "agent.tar")
	if err := testcluster.BuildImage(t.Context(), out, Spec(nsenter.DefaultAgentImage, bin, BusyboxPath)); err != nil {
		t.Fatal(err)
	}
	archive := readTar(t, mustRead(t, out))
	var manifest []struct {
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(archive["manifest.json"].data, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || len(manifest[0].Layers) != 1 || strings.Join(manifest[0].RepoTags, ",") != nsenter.DefaultAgentImage {
		t.Fatalf("manifest = %+v, want one image tagged %s with one layer", manifest, nsenter.DefaultAgentImage)
	}
	layer := readTar(t, archive[manifest[0].Layers[0]].data)
	agent, ok := layer[strings.TrimPrefix(nsenter.AgentPath, "/")]
	if !ok || string(agent.data) != "#!/bin/sh\necho agent\n" || agent.hdr.Mode&0o111 == 0 {
		t.Errorf("layer lacks an executable %s with the binary's contents (found: %v)", nsenter.AgentPath, ok)
	}
	sleep, ok := layer["bin/sleep"]
	if !ok || sleep.hdr.Typeflag != tar.TypeSymlink {
		t.Errorf("layer lacks the busybox applet link bin/sleep (the holder process): %+v", sleep.hdr)
	}
	if _, ok := layer["bin/busybox"]; !ok {
		t.Error("layer lacks bin/busybox")
	}
}

func TestDefaultAgentImageIsPinned(t *testing.T) {
	ref := nsenter.DefaultAgentImage
	if !strings.HasPrefix(ref, "nodeexec.local/agent:") || strings.HasSuffix(ref, ":latest") || !strings.HasSuffix(ref, ":"+nsenter.AgentVersion) {
		t.Errorf("DefaultAgentImage = %q, want nodeexec.local/agent:%s", ref, nsenter.AgentVersion)
	}
}

type entry struct {
	hdr  tar.Header
	data []byte
}

func readTar(t *testing.T, b []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(h.Name, "./")] = entry{hdr: *h, data: data}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The Deployment in deploy/ runs the image `make controller-image` builds.
func TestControllerImageMatchesDeploy(t *testing.T) {
	b := mustRead(t, "../../deploy/deployment.yaml")
	if !strings.Contains(string(b), "image: "+ControllerImage+"\n") {
		t.Errorf("deploy/deployment.yaml does not run %s", ControllerImage)
	}
	mk := mustRead(t, "../../Makefile")
	if !strings.Contains(string(mk), "--image "+ControllerImage+"\n") {
		t.Errorf("the Makefile's controller-image target does not build %s", ControllerImage)
	}
}
