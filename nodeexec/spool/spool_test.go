package spool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// errWriter takes limit bytes, then fails, as a cut stream does.
type errWriter struct {
	buf   bytes.Buffer
	limit int
}

func (w *errWriter) Write(p []byte) (int, error) {
	if room := w.limit - w.buf.Len(); len(p) > room {
		w.buf.Write(p[:room])
		return room, errors.New("broken pipe")
	}
	return w.buf.Write(p)
}

func TestServeThenAttachResumes(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a", "run1")
	s, err := spool.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The client's stream breaks after 1000 bytes of stdout.
	cut := &errWriter{limit: 1000}
	var errOut bytes.Buffer
	served := make(chan error, 1)
	go func() {
		_, err := s.Serve(ctx, cut, &errOut)
		served <- err
	}()
	var wantOut, wantErr strings.Builder
	for i := range 500 {
		line := fmt.Sprintf("line%d\n", i)
		wantOut.WriteString(line)
		if _, err := s.Stdout().Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			e := fmt.Sprintf("err%d\n", i)
			wantErr.WriteString(e)
			s.Stderr().Write([]byte(e))
		}
	}
	if err := <-served; err == nil || !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("Serve: got %v, want the write error", err)
	}
	if err := s.Finish(3); err != nil {
		t.Fatal(err)
	}

	// The client attaches again from what it received.
	var out, errs bytes.Buffer
	end, err := spool.Attach(ctx, dir, int64(cut.buf.Len()), int64(errOut.Len()), &out, &errs, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if end != (spool.End{Code: 3, Stdout: int64(wantOut.Len()), Stderr: int64(wantErr.Len())}) {
		t.Errorf("end %+v, want exit 3 and the whole output's sizes", end)
	}
	if got := cut.buf.String() + out.String(); got != wantOut.String() {
		t.Errorf("stdout resumed wrong: %d bytes, want %d", len(got), wantOut.Len())
	}
	if got := errOut.String() + errs.String(); got != wantErr.String() {
		t.Errorf("stderr: got %q, want %q", got, wantErr.String())
	}
}

func TestServeFollowsUntilFinish(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	s, err := spool.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	type result struct {
		end spool.End
		err error
	}
	done := make(chan result, 1)
	go func() {
		end, err := s.Serve(context.Background(), &out, &errs)
		done <- result{end, err}
	}()
	s.Stdout().Write([]byte("a\n"))
	s.Stderr().Write([]byte("b\n"))
	select {
	case r := <-done:
		t.Fatalf("Serve returned before Finish: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
	s.Stdout().Write([]byte("c\n"))
	if err := s.Finish(0); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.end != (spool.End{Stdout: 4, Stderr: 2}) || out.String() != "a\nc\n" || errs.String() != "b\n" {
		t.Fatalf("got %+v err %v stdout %q stderr %q", r.end, r.err, out.String(), errs.String())
	}
}

func TestAttachWaitsForTheEnd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	s, err := spool.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Stdout().Write([]byte("early\n"))
	go func() {
		time.Sleep(30 * time.Millisecond)
		s.Stdout().Write([]byte("late\n"))
		s.Finish(42)
	}()
	var out bytes.Buffer
	end, err := spool.Attach(context.Background(), dir, 0, 0, &out, nil, time.Millisecond)
	if err != nil || end.Code != 42 || out.String() != "early\nlate\n" {
		t.Fatalf("got %+v err %v stdout %q", end, err, out.String())
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	if _, err := spool.Create("relative"); err == nil {
		t.Error("Create accepted a relative path")
	}
	dir := filepath.Join(base, "run")
	s, err := spool.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spool.Create(dir); !errors.Is(err, spool.ErrExists) {
		t.Errorf("second Create: got %v, want ErrExists", err)
	}
	if _, err := spool.Attach(ctx, filepath.Join(base, "none"), 0, 0, nil, nil, 0); !errors.Is(err, spool.ErrNotFound) {
		t.Errorf("Attach on nothing: got %v, want ErrNotFound", err)
	}
	s.Stdout().Write([]byte("abc"))
	s.Finish(0)
	if _, err := spool.Attach(ctx, dir, 4, 0, nil, nil, 0); err == nil || !strings.Contains(err.Error(), "beyond the 3 bytes") {
		t.Errorf("offset past the end: got %v", err)
	}
	if _, err := spool.Attach(ctx, dir, -1, 0, nil, nil, 0); err == nil {
		t.Error("negative offset accepted")
	}
	if !spool.Exists(dir) || spool.Exists(filepath.Join(base, "none")) {
		t.Error("Exists is wrong")
	}

	// An unfinished spool: Attach ends with ctx.
	dir2 := filepath.Join(base, "run2")
	if _, err := spool.Create(dir2); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := spool.Attach(cctx, dir2, 0, 0, nil, nil, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unfinished: got %v, want the context's end", err)
	}
}

func TestSweep(t *testing.T) {
	parent := t.TempDir()
	now := time.Now()
	mk := func(name string, finished bool, age time.Duration) {
		s, err := spool.Create(filepath.Join(parent, name))
		if err != nil {
			t.Fatal(err)
		}
		if finished {
			s.Finish(0)
			os.Chtimes(filepath.Join(parent, name, spool.ExitFile), now.Add(-age), now.Add(-age))
		}
		os.Chtimes(filepath.Join(parent, name), now.Add(-age), now.Add(-age))
	}
	mk("old-done", true, time.Hour)
	mk("new-done", true, time.Minute)
	mk("running", false, time.Hour)
	mk("abandoned", false, 48*time.Hour)
	if n := spool.Sweep(parent, now, spool.DefaultRetention, spool.DefaultAbandoned); n != 2 {
		t.Errorf("removed %d, want 2", n)
	}
	for name, want := range map[string]bool{"old-done": false, "new-done": true, "running": true, "abandoned": false} {
		if got := spool.Exists(filepath.Join(parent, name)); got != want {
			t.Errorf("%s exists = %v, want %v", name, got, want)
		}
	}
	if n := spool.Sweep(filepath.Join(parent, "missing"), now, 0, 0); n != 0 {
		t.Errorf("missing parent: %d", n)
	}
}

func TestCheckDir(t *testing.T) {
	for _, dir := range []string{
		spool.DefaultParent + "/nodeexec-tc-1-abcde",
		spool.DefaultParent + "/a1b2c3d4e5f6g7h8",
		spool.DefaultParent + "/A_b.c-d",
		spool.Path(strings.Repeat("x", spool.MaxNameLength)),
	} {
		if err := spool.CheckDir(dir); err != nil {
			t.Errorf("CheckDir(%q): %v, want nil", dir, err)
		}
	}
	for _, dir := range []string{
		"", "/", "/x", "/usr/local/new", "/usr/local/bin", "/dev", "relative", "tmp/nodeexec/spool/a",
		spool.DefaultParent, spool.DefaultParent + "/",
		spool.DefaultParent + "/.", spool.DefaultParent + "/..", spool.DefaultParent + "/../../../usr/local/new",
		spool.DefaultParent + "/a/b", spool.DefaultParent + "//a", spool.DefaultParent + "/a/", spool.DefaultParent + "/./a",
		spool.DefaultParent + "/.hidden", spool.DefaultParent + "/a b", spool.DefaultParent + "/a\x00b", spool.DefaultParent + "/é",
		spool.DefaultParent + "x/a", "/tmp/nodeexec/spoolx/a",
		spool.Path(strings.Repeat("x", spool.MaxNameLength+1)),
	} {
		err := spool.CheckDir(dir)
		if !errors.Is(err, spool.ErrBadDir) || !strings.Contains(err.Error(), spool.DefaultParent) && !strings.Contains(err.Error(), "spool name") {
			t.Errorf("CheckDir(%q): %v, want an error wrapping ErrBadDir that names the fix", dir, err)
		}
	}
	for _, name := range []string{"", ".", "..", "a/b", "/", ".x"} {
		if err := spool.CheckName(name); !errors.Is(err, spool.ErrBadDir) {
			t.Errorf("CheckName(%q): %v, want ErrBadDir", name, err)
		}
	}
}

// TestSweepLeavesForeign: Sweep removes only directories that an agent
// made (a spool's name and a spool's files, nothing else), however old the
// rest of its parent is.
func TestSweepLeavesForeign(t *testing.T) {
	parent := t.TempDir()
	now := time.Now()
	old := now.Add(-48 * time.Hour)
	age := func(p string) {
		t.Helper()
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	mkdir := func(name string, files ...string) string {
		t.Helper()
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("0\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			age(filepath.Join(dir, f))
		}
		age(dir)
		return dir
	}
	// One old finished spool: removed.
	s, err := spool.Create(filepath.Join(parent, "done"))
	if err != nil {
		t.Fatal(err)
	}
	s.Finish(0)
	age(filepath.Join(parent, "done", spool.ExitFile))
	// What is not the agents', all old: kept.
	bin := mkdir("bin", "nodeexec", "sh")                                               // a directory such as /usr/local/bin
	dev := mkdir("dev", "stdout", "stderr", "null")                                     // /dev has stdout and stderr
	mixed := mkdir("mixed", spool.PIDFile, spool.StdoutFile, spool.StderrFile, "other") // a spool's files and more
	empty := mkdir("empty")
	hidden := mkdir(".hidden", spool.PIDFile, spool.StdoutFile, spool.StderrFile, spool.ExitFile) // not a spool's name
	target := mkdir("target-dir", spool.PIDFile, spool.StdoutFile, spool.StderrFile, spool.ExitFile)
	if err := os.Rename(target, filepath.Join(t.TempDir(), "elsewhere")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(parent, "link")
	if err := os.Symlink(filepath.Join(parent, "bin"), link); err != nil {
		t.Fatal(err)
	}
	if n := spool.Sweep(parent, now, spool.DefaultRetention, spool.DefaultAbandoned); n != 1 {
		t.Errorf("removed %d, want 1 (the old spool)", n)
	}
	if _, err := os.Stat(filepath.Join(parent, "done")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old spool is still there: %v", err)
	}
	for _, p := range []string{bin, filepath.Join(bin, "nodeexec"), dev, mixed, filepath.Join(mixed, "other"), empty, hidden, link} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v, want it left alone", p, err)
		}
	}
	// The sweep of a parent such as / (a --spool /x) leaves it whole.
	if spool.Exists(dev) || spool.Exists(bin) || spool.Exists(mixed) || spool.Exists(link) {
		t.Error("Exists took a directory that is not a spool for one")
	}
}
