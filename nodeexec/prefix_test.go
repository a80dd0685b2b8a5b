package nodeexec

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// callRecorder records every Write call separately.
type callRecorder struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (c *callRecorder) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	c.calls = append(c.calls, string(p))
	return len(p), nil
}

func TestPrefixWriter(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		writes []string
		// want is one entry per Write on the underlying writer, Flush included.
		want []string
	}{
		{
			name:   "whole lines",
			prefix: "[n] ",
			writes: []string{"a\n", "b\nc\n"},
			want:   []string{"[n] a\n", "[n] b\n[n] c\n"},
		},
		{
			name:   "line split over writes is held back",
			prefix: "[n] ",
			writes: []string{"ab", "c\nde", "f\n\ng"},
			want:   []string{"[n] abc\n", "[n] def\n[n] \n", "[n] g\n"},
		},
		{
			name:   "no trailing partial line: flush writes nothing",
			prefix: "[n] ",
			writes: []string{"x\n"},
			want:   []string{"[n] x\n"},
		},
		{
			name:   "only a partial line",
			prefix: "[n] ",
			writes: []string{"par", "tial"},
			want:   []string{"[n] partial\n"},
		},
		{
			name:   "nil prefix still buffers lines",
			prefix: "",
			writes: []string{"a", "b\nc"},
			want:   []string{"ab\n", "c\n"},
		},
		{
			name:   "nothing written",
			prefix: "[n] ",
			writes: nil,
			want:   nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &callRecorder{}
			var prefix []byte
			if tt.prefix != "" {
				prefix = []byte(tt.prefix)
			}
			p := &prefixWriter{prefix: prefix, out: &lockedWriter{w: rec}}
			for _, w := range tt.writes {
				n, err := p.Write([]byte(w))
				if err != nil || n != len(w) {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
			}
			if err := p.Flush(); err != nil {
				t.Fatalf("Flush() = %v", err)
			}
			// A second flush has nothing left to write.
			if err := p.Flush(); err != nil {
				t.Fatalf("second Flush() = %v", err)
			}
			if diff := cmp.Diff(tt.want, rec.calls); diff != "" {
				t.Errorf("writes to the underlying writer mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrefixWriterErrors(t *testing.T) {
	boom := errors.New("boom")
	rec := &callRecorder{err: boom}
	p := &prefixWriter{prefix: []byte("[n] "), out: &lockedWriter{w: rec}}
	if _, err := p.Write([]byte("partial")); err != nil {
		t.Errorf("Write of a partial line touched the writer: %v", err)
	}
	if _, err := p.Write([]byte(" line\n")); !errors.Is(err, boom) {
		t.Errorf("Write of a complete line = %v, want %v", err, boom)
	}
	p2 := &prefixWriter{prefix: []byte("[n] "), out: &lockedWriter{w: rec}}
	_, _ = p2.Write([]byte("tail"))
	if err := p2.Flush(); !errors.Is(err, boom) {
		t.Errorf("Flush() = %v, want %v", err, boom)
	}
}

func TestRecordFirstOutput(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

	t.Run("first byte on stderr wins", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		var out, errOut bytes.Buffer
		req, first := RecordFirstOutput(Request{Stdout: &out, Stderr: &errOut}, clk.Now)
		if got := first(); !got.IsZero() {
			t.Fatalf("first() before any output = %v, want zero", got)
		}
		clk.Step(time.Second)
		// An empty write is not output.
		if _, err := req.Stdout.Write(nil); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
		if _, err := io.WriteString(req.Stderr, "e"); err != nil {
			t.Fatal(err)
		}
		want := clk.Now()
		clk.Step(time.Second)
		if _, err := io.WriteString(req.Stdout, "o"); err != nil {
			t.Fatal(err)
		}
		if got := first(); !got.Equal(want) {
			t.Errorf("first() = %v, want %v (time of the first non-empty write)", got, want)
		}
		if out.String() != "o" || errOut.String() != "e" {
			t.Errorf("output not passed through: stdout %q, stderr %q", out.String(), errOut.String())
		}
	})

	t.Run("nil writers discard", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		req, first := RecordFirstOutput(Request{}, clk.Now)
		n, err := io.WriteString(req.Stdout, "abc")
		if n != 3 || err != nil {
			t.Errorf("Write to a nil Stdout = %d, %v; want 3, nil", n, err)
		}
		if got := first(); !got.Equal(t0) {
			t.Errorf("first() = %v, want %v", got, t0)
		}
	})
}
