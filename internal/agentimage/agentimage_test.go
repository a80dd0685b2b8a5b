package agentimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// fakeELF returns a minimal ELF64 little-endian executable for machine,
// with a PT_INTERP program header when interp is set (a dynamically linked
// binary) and payload after the headers.
func fakeELF(machine elf.Machine, interp bool, payload string) []byte {
	var b bytes.Buffer
	phnum := uint16(1)
	if interp {
		phnum = 2
	}
	ident := [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT), byte(elf.ELFOSABI_NONE)}
	hdr := elf.Header64{
		Ident: ident, Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Entry: 0x400000, Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: phnum,
	}
	_ = binary.Write(&b, binary.LittleEndian, hdr)
	_ = binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Vaddr: 0x400000, Filesz: 64, Memsz: 64, Align: 0x1000})
	if interp {
		_ = binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R), Off: 200, Filesz: 28, Memsz: 28, Align: 1})
	}
	b.WriteString(payload)
	return b.Bytes()
}

func TestCheck(t *testing.T) {
	tests := map[string]struct {
		bin      []byte
		wantArch string
		wantErr  string
	}{
		"static amd64":  {bin: fakeELF(elf.EM_X86_64, false, "x"), wantArch: "amd64"},
		"static arm64":  {bin: fakeELF(elf.EM_AARCH64, false, "x"), wantArch: "arm64"},
		"dynamic":       {bin: fakeELF(elf.EM_X86_64, true, "x"), wantErr: "dynamically linked"},
		"not ELF":       {bin: []byte("\xcf\xfa\xed\xfe mach-o"), wantErr: "not an ELF file"},
		"shell script":  {bin: []byte("#!/bin/sh\necho hi\n"), wantErr: "not an ELF file"},
		"odd machine":   {bin: fakeELF(elf.EM_SPARCV9, false, "x"), wantErr: "not an architecture"},
		"empty":         {bin: nil, wantErr: "not an ELF file"},
		"truncated ELF": {bin: fakeELF(elf.EM_X86_64, false, "")[:20], wantErr: "not an ELF file"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			arch, err := Check(bytes.NewReader(tt.bin))
			if tt.wantErr == "" {
				if err != nil || arch != tt.wantArch {
					t.Fatalf("Check = %q, %v; want %q", arch, err, tt.wantArch)
				}
				return
			}
			if !errors.Is(err, ErrNotStatic) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
				t.Fatalf("Check error = %v; want ErrNotStatic saying %q and naming the CGO_ENABLED=0 build", err, tt.wantErr)
			}
		})
	}
}

// TestImageReproducible: the image is a function of the binary's bytes.
func TestImageReproducible(t *testing.T) {
	bin := fakeELF(elf.EM_X86_64, false, strings.Repeat("nodeexec", 1000))
	digest := func(b []byte) v1.Hash {
		t.Helper()
		img, err := Image(Binaries{Nodeexec: b})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := digest(bin), digest(bytes.Clone(bin))
	if a != b {
		t.Errorf("two builds of the same binary: %s and %s", a, b)
	}
	other := fakeELF(elf.EM_X86_64, false, strings.Repeat("nodeexec", 1000)+"!")
	if c := digest(other); c == a {
		t.Errorf("a different binary gives the same digest %s", c)
	}
}

// TestImageLayout: one layer with the directories, nodeexec and
// nodeexec-spool, fixed metadata; the config's platform from the binaries.
func TestImageLayout(t *testing.T) {
	bin, small := fakeELF(elf.EM_AARCH64, false, "agent"), fakeELF(elf.EM_AARCH64, false, "spool")
	img, err := Image(Binaries{Nodeexec: bin, Spool: small})
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" || !cf.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("platform %s/%s created %s, want linux/arm64 at the epoch", cf.OS, cf.Architecture, cf.Created)
	}
	if diff := cmp.Diff(v1.Config{Entrypoint: []string{agent.Path}, Env: []string{PathEnv}}, cf.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v, %v: want one", layers, err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s", mt)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type entry struct {
		Name     string
		Type     byte
		Mode     int64
		Uid, Gid int
		ModTime  int64
		Data     string
	}
	var got []entry
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got = append(got, entry{h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime.Unix(), string(data)})
	}
	want := []entry{
		{"usr/", tar.TypeDir, 0o755, 0, 0, 0, ""},
		{"usr/local/", tar.TypeDir, 0o755, 0, 0, 0, ""},
		{"usr/local/bin/", tar.TypeDir, 0o755, 0, 0, 0, ""},
		{"usr/local/bin/nodeexec", tar.TypeReg, 0o755, 0, 0, 0, string(bin)},
		{"usr/local/bin/nodeexec-spool", tar.TypeReg, 0o755, 0, 0, 0, string(small)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer (-want +got):\n%s", diff)
	}
	if _, err := Image(Binaries{Nodeexec: fakeELF(elf.EM_X86_64, true, "x")}); !errors.Is(err, ErrNotStatic) {
		t.Errorf("Image of a dynamic binary: %v, want ErrNotStatic", err)
	}
	x86 := fakeELF(elf.EM_X86_64, false, "x")
	if _, err := Image(Binaries{Nodeexec: x86, Spool: fakeELF(elf.EM_X86_64, true, "x")}); !errors.Is(err, ErrNotStatic) || !strings.Contains(err.Error(), "nodeexec-spool") {
		t.Errorf("Image with a dynamic nodeexec-spool: %v, want ErrNotStatic naming it", err)
	}
	if _, err := Image(Binaries{Nodeexec: x86, Spool: small}); !errors.Is(err, ErrWrongArch) || !strings.Contains(err.Error(), "nodeexec-spool") {
		t.Errorf("Image with an arm64 nodeexec-spool beside an amd64 nodeexec: %v, want ErrWrongArch naming it", err)
	}
}

// TestReadBinaries: nodeexec-spool is taken from beside the binary, and
// is optional; the image of a binary alone has nodeexec alone.
func TestReadBinaries(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nodeexec")
	big, small := fakeELF(elf.EM_X86_64, false, "big"), fakeELF(elf.EM_X86_64, false, "small")
	if err := os.WriteFile(bin, big, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := ReadBinaries(bin)
	if err != nil || !bytes.Equal(b.Nodeexec, big) || b.Spool != nil {
		t.Fatalf("ReadBinaries without nodeexec-spool: %v, spool %q", err, b.Spool)
	}
	alone, err := ImageFromFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nodeexec-spool"), small, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err = ReadBinaries(bin); err != nil || !bytes.Equal(b.Spool, small) {
		t.Fatalf("ReadBinaries with nodeexec-spool: %v, spool %q", err, b.Spool)
	}
	both, err := ImageFromFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := alone.Digest()
	db, _ := both.Digest()
	if da == db {
		t.Error("the image with nodeexec-spool has the digest of the one without")
	}
	if _, err := ReadBinaries(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadBinaries of a missing binary: no error")
	}
}

// TestDockerfileMatches keeps the repository's Dockerfile (final stage)
// equal to what Image builds: FROM scratch, the binaries at BinaryPath and
// SpoolBinaryPath, PATH, the entrypoint, no USER.
func TestDockerfileMatches(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var final []string // instructions of the last stage
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			final = nil
		}
		final = append(final, line)
	}
	var from, env, user string
	var dsts, entrypoint []string
	for _, in := range final {
		op, arg, _ := strings.Cut(in, " ")
		switch strings.ToUpper(op) {
		case "FROM":
			from = arg
		case "COPY":
			f := strings.Fields(arg)
			dsts = append(dsts, f[len(f)-1])
		case "ENV":
			env = arg
		case "USER":
			user = arg
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(arg), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: want the exec (JSON) form: %v", arg, err)
			}
		default:
			t.Errorf("Dockerfile's final stage has %q, which Image does not do", in)
		}
	}
	if from != "scratch" || !cmp.Equal(dsts, []string{BinaryPath, SpoolBinaryPath}) || env != PathEnv || user != User {
		t.Errorf("Dockerfile final stage: FROM %q, COPY to %q, ENV %q, USER %q; want scratch, %s and %s, %s, %q", from, dsts, env, user, BinaryPath, SpoolBinaryPath, PathEnv, User)
	}
	if !cmp.Equal(entrypoint, Entrypoint()) {
		t.Errorf("ENTRYPOINT %q, want %q", entrypoint, Entrypoint())
	}
}

func TestDefaultAgentImageIsPinned(t *testing.T) {
	ref := agent.DefaultImage
	if !strings.HasPrefix(ref, "nodeexec.local/agent:") || strings.HasSuffix(ref, ":latest") || !strings.HasSuffix(ref, ":"+agent.Version) {
		t.Errorf("agent.DefaultImage = %q, want nodeexec.local/agent:%s", ref, agent.Version)
	}
}

// The Deployment in deploy/ runs the one image (agent and controller), and
// the Makefile's controller-image target builds it.
func TestDeployRunsTheImage(t *testing.T) {
	b, err := os.ReadFile("../../deploy/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "image: "+agent.DefaultImage+"\n") {
		t.Errorf("deploy/deployment.yaml does not run %s", agent.DefaultImage)
	}
}
