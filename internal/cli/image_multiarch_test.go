package cli

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// fakeBinary writes a minimal static (or dynamic) ELF for machine.
func fakeBinary(t *testing.T, machine elf.Machine, dynamic bool) string {
	t.Helper()
	var b bytes.Buffer
	phnum := uint16(1)
	if dynamic {
		phnum = 2
	}
	_ = binary.Write(&b, binary.LittleEndian, elf.Header64{
		Ident: [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:  uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: phnum,
	})
	_ = binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_LOAD), Filesz: 64, Memsz: 64})
	if dynamic {
		_ = binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP), Off: 200, Filesz: 28, Memsz: 28})
	}
	p := filepath.Join(t.TempDir(), "nodeexec")
	if err := os.WriteFile(p, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImagePushPlatforms(t *testing.T) {
	var requests atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	// Not a source tree: a platform without --binary cannot be built.
	t.Chdir(t.TempDir())
	amd := fakeBinary(t, elf.EM_X86_64, false)
	arm := fakeBinary(t, elf.EM_AARCH64, false)
	armDyn := fakeBinary(t, elf.EM_AARCH64, true)
	both := "linux/amd64,linux/arm64"
	ref := host + "/nodeexec:multi"

	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown arch", []string{"--platform", "linux/s390x", "--binary", "linux/s390x=" + amd}, []string{"--platform", "linux/s390x"}},
		{"unknown os", []string{"--platform", "windows/amd64"}, []string{"--platform", "windows/amd64"}},
		{"duplicate platform", []string{"--platform", "linux/amd64,linux/amd64", "--binary", "linux/amd64=" + amd}, []string{"--platform", "linux/amd64 is listed twice"}},
		{"empty platform", []string{"--platform", ""}, []string{"--platform", "no platform"}},
		{"binary not asked", []string{"--platform", "linux/amd64", "--binary", "linux/amd64=" + amd, "--binary", "linux/arm64=" + arm}, []string{"--binary", "linux/arm64 is not in --platform"}},
		{"binary without =", []string{"--platform", both, "--binary", arm}, []string{"--binary", "PLATFORM=PATH"}},
		{"binary twice", []string{"--platform", both, "--binary", "linux/arm64=" + arm, "--binary", "linux/arm64=" + arm}, []string{"--binary", "a second binary for linux/arm64"}},
		{"wrong machine", []string{"--platform", both, "--binary", "linux/amd64=" + amd, "--binary", "linux/arm64=" + amd}, []string{"linux/arm64=" + amd, "architecture is not its platform's", "linux/amd64 ELF"}},
		{"not static", []string{"--platform", both, "--binary", "linux/amd64=" + amd, "--binary", "linux/arm64=" + armDyn}, []string{"linux/arm64=" + armDyn, "dynamically linked"}},
		{"missing binary", []string{"--platform", both, "--binary", "linux/amd64=" + amd, "--binary", "linux/arm64=" + filepath.Join(t.TempDir(), "missing")}, []string{"linux/arm64=", "missing"}},
		{"no binary outside a source tree", []string{"--platform", "linux/arm64"}, []string{"no binary for linux/arm64", "--binary linux/arm64=PATH"}},
		{"two binaries without --platform", []string{"--binary", amd, "--binary", amd}, []string{"--binary given 2 times"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := requests.Load()
			got := run(t, "", append(append([]string{"image", "push"}, c.args...), ref)...)
			if got.code == 0 {
				t.Fatalf("exit 0, want a refusal\n%s", got.errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(got.errOut, w) {
					t.Errorf("stderr does not say %q:\n%s", w, got.errOut)
				}
			}
			if n := requests.Load() - before; n != 0 {
				t.Errorf("%d requests reached the registry, want none", n)
			}
		})
	}

	got := run(t, "", "image", "push", "--platform", both, "--binary", "linux/amd64="+amd, "--binary", "linux/arm64="+arm, ref)
	if got.code != 0 {
		t.Fatalf("push: exit %d\n%s", got.code, got.errOut)
	}
	for _, w := range []string{"an image index for 2 platforms", "linux/amd64", "linux/arm64", "MB compressed"} {
		if !strings.Contains(got.errOut, w) {
			t.Errorf("stderr does not say %q:\n%s", w, got.errOut)
		}
	}
	d, err := name.NewDigest(strings.TrimSpace(got.out))
	if err != nil {
		t.Fatalf("stdout %q: %v", got.out, err)
	}
	idx, err := remote.Index(d)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 2 || m.Manifests[0].Platform.String() != "linux/amd64" || m.Manifests[1].Platform.String() != "linux/arm64" {
		t.Fatalf("index read back: %+v, %v", m, err)
	}
	// Again: the same digest.
	again := run(t, "", "image", "push", "--platform", both, "--binary", "linux/arm64="+arm, "--binary", "linux/amd64="+amd, ref)
	if again.code != 0 || again.out != got.out {
		t.Errorf("second push of the same binaries: exit %d, %q, want %q", again.code, again.out, got.out)
	}
	// Without --platform: one image, as before.
	single := run(t, "", "image", "push", "--binary", amd, host+"/nodeexec:single")
	if single.code != 0 {
		t.Fatalf("single-arch push: exit %d\n%s", single.code, single.errOut)
	}
	sd, err := name.NewDigest(strings.TrimSpace(single.out))
	if err != nil {
		t.Fatal(err)
	}
	if img, err := remote.Image(sd); err != nil {
		t.Fatal(err)
	} else if cf, err := img.ConfigFile(); err != nil || cf.Architecture != "amd64" {
		t.Errorf("single-arch image: %v, %v", cf, err)
	}
}
