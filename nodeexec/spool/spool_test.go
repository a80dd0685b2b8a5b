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
