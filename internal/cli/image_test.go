package cli

import (
	"bytes"
	"debug/elf"
	"encoding/base64"
	"encoding/binary"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// staticELF is a minimal statically linked linux/amd64 ELF executable
// (headers only), with a PT_INTERP header when dynamic.
func staticELF(t *testing.T, dynamic bool) string {
	t.Helper()
	var b bytes.Buffer
	phnum := uint16(1)
	if dynamic {
		phnum = 2
	}
	_ = binary.Write(&b, binary.LittleEndian, elf.Header64{
		Ident: [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:  uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
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

func TestImagePush(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "ci" || p != "secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	t.Setenv("HOME", t.TempDir())
	noCreds := t.TempDir()
	creds := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("ci:secret"))
	if err := os.WriteFile(filepath.Join(creds, "config.json"), []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := staticELF(t, false)

	t.Setenv("DOCKER_CONFIG", creds)
	r := run(t, "", "image", "push", "--binary", bin, host+"/team/nodeexec")
	if r.code != 0 || !strings.HasPrefix(r.out, host+"/team/nodeexec@sha256:") || strings.Count(r.out, "\n") != 1 {
		t.Fatalf("push with credentials: code %d stdout %q stderr %q; want the digest reference alone", r.code, r.out, r.errOut)
	}
	ref := strings.TrimSpace(r.out)
	for _, want := range []string{"--agent-image " + ref, "NODEEXEC_AGENT_IMAGE", "spec.backend.image", "images: [{name: nodeexec.local/agent, newName: " + host + "/team/nodeexec, digest: sha256:"} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errOut)
		}
	}
	if again := run(t, "", "image", "push", "--binary", bin, host+"/team/nodeexec:other"); again.code != 0 || strings.TrimPrefix(again.out, host+"/team/nodeexec") != strings.TrimPrefix(r.out, host+"/team/nodeexec") {
		t.Errorf("the same binary pushed again gives %q (code %d), want the same digest as %q", again.out, again.code, r.out)
	}

	bad := map[string]struct {
		config string
		args   []string
		want   string
	}{
		"no credentials": {noCreds, []string{"--binary", bin, host + "/team/nodeexec"}, "docker login " + host},
		"dynamic binary": {creds, []string{"--binary", staticELF(t, true), host + "/team/nodeexec"}, "CGO_ENABLED=0"},
		"not a binary":   {creds, []string{"--binary", "/etc/hostname", host + "/team/nodeexec"}, "not an ELF file"},
		"bad reference":  {creds, []string{"--binary", bin, host + "/Team/NodeExec"}, "not a valid image reference"},
		"digest":         {creds, []string{"--binary", bin, ref}, "give a tag"},
		"no reference":   {creds, []string{"--binary", bin}, "give exactly one REGISTRY/REPOSITORY[:TAG]"},
		"unreachable":    {creds, []string{"--binary", bin, "127.0.0.1:1/nodeexec"}, "cannot reach the registry"},
	}
	for name, tt := range bad {
		t.Run(name, func(t *testing.T) {
			t.Setenv("DOCKER_CONFIG", tt.config)
			r := run(t, "", append([]string{"image", "push"}, tt.args...)...)
			if r.code == 0 || r.out != "" || !strings.Contains(r.errOut, tt.want) {
				t.Errorf("code %d stdout %q stderr %q; want a failure saying %q", r.code, r.out, r.errOut, tt.want)
			}
		})
	}
}
