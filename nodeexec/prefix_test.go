package nodeexec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"strings"
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
	long := strings.Repeat("x", MaxLineBytes)
	tests := []struct {
		name     string
		noPrefix bool
		writes   []string
		// want is one entry per Write on the underlying writer, Flush included.
		want []string
	}{
		{
			name:   "whole lines",
			writes: []string{"a\n", "b\nc\n"},
			want:   []string{"[n] a\n", "[n] b\n[n] c\n"},
		},
		{
			name:   "line split over writes is held back",
			writes: []string{"ab", "c\nde", "f\n\ng"},
			want:   []string{"[n] abc\n", "[n] def\n[n] \n", "[n]+ g\n"},
		},
		{
			name:   "no trailing partial line: flush writes nothing",
			writes: []string{"x\n"},
			want:   []string{"[n] x\n"},
		},
		{
			name:   "only a partial line is marked continued at flush",
			writes: []string{"par", "tial"},
			want:   []string{"[n]+ partial\n"},
		},
		{
			name:   "binary passes through: NUL, CR, invalid UTF-8",
			writes: []string{"\x00\r\xff\xfe\n\r\n", "\x80"},
			want:   []string{"[n] \x00\r\xff\xfe\n[n] \r\n", "[n]+ \x80\n"},
		},
		{
			name:   "a line of exactly MaxLineBytes is one piece",
			writes: []string{long + "\n"},
			want:   []string{"[n] " + long + "\n"},
		},
		{
			name:   "a line of exactly MaxLineBytes, its newline in the next write",
			writes: []string{long, "\n"},
			want:   []string{"[n] " + long + "\n"},
		},
		{
			name:   "a longer line is written in marked pieces",
			writes: []string{long + "yz\n"},
			want:   []string{"[n]+ " + long + "\n[n] yz\n"},
		},
		{
			name:   "a longer line over many writes",
			writes: []string{long[:10], long[10:], "y", "z", "\n"},
			want:   []string{"[n]+ " + long + "\n", "[n] yz\n"},
		},
		{
			name:   "two pieces and a partial end",
			writes: []string{long + long + "q"},
			want:   []string{"[n]+ " + long + "\n[n]+ " + long + "\n", "[n]+ q\n"},
		},
		{
			name:     "without prefix pieces are written unchanged",
			noPrefix: true,
			writes:   []string{"a", "b\nc", long + "y\n"},
			want:     []string{"ab\n", "c" + long + "y\n"},
		},
		{
			name:     "without prefix a partial last line gets a newline",
			noPrefix: true,
			writes:   []string{"a", "b\nc"},
			want:     []string{"ab\n", "c\n"},
		},
		{
			name:   "nothing written",
			writes: nil,
			want:   nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &callRecorder{}
			p := newPrefixWriter("n", tt.noPrefix, &lockedWriter{w: rec})
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
	p := newPrefixWriter("n", false, &lockedWriter{w: rec})
	if _, err := p.Write([]byte("partial")); err != nil {
		t.Errorf("Write of a partial line touched the writer: %v", err)
	}
	if _, err := p.Write([]byte(" line\n")); !errors.Is(err, boom) {
		t.Errorf("Write of a complete line = %v, want %v", err, boom)
	}
	p2 := newPrefixWriter("n", false, &lockedWriter{w: rec})
	_, _ = p2.Write([]byte("tail"))
	if err := p2.Flush(); !errors.Is(err, boom) {
		t.Errorf("Flush() = %v, want %v", err, boom)
	}
	p3 := newPrefixWriter("n", false, &lockedWriter{w: rec})
	if _, err := p3.Write(make([]byte, 3*writeChunkBytes)); !errors.Is(err, boom) {
		t.Errorf("Write of a long line = %v, want %v", err, boom)
	}
}

// rejoin undoes the prefixes of one node's output (see ContinuedPrefix) and
// checks that every output line is prefixed and no longer than MaxLineBytes.
func rejoin(t testing.TB, node string, out []byte) []byte {
	t.Helper()
	prefix, cont := []byte(LinePrefix(node)), []byte(ContinuedPrefix(node))
	var got []byte
	for len(out) > 0 {
		i := bytes.IndexByte(out, '\n')
		if i < 0 {
			t.Fatalf("output ends without a newline: %q", trunc(out))
		}
		line := out[:i+1]
		out = out[i+1:]
		switch {
		case bytes.HasPrefix(line, cont):
			line = line[len(cont) : len(line)-1]
		case bytes.HasPrefix(line, prefix):
			line = line[len(prefix):]
		default:
			t.Fatalf("output line without a prefix: %q", trunc(line))
		}
		if n := len(bytes.TrimSuffix(line, []byte("\n"))); n > MaxLineBytes {
			t.Fatalf("output line holds %d bytes of the node's output, more than MaxLineBytes", n)
		}
		got = append(got, line...)
	}
	return got
}

func trunc(b []byte) []byte { return b[:min(len(b), 80)] }

// chunks cuts b into writes whose sizes cycle through sizes (1 to 256 KiB).
func chunks(b []byte, sizes []byte) [][]byte {
	var out [][]byte
	for i := 0; len(b) > 0; i++ {
		n := 1
		if len(sizes) > 0 {
			s := int(sizes[i%len(sizes)])
			n = 1 + s*s*4 // up to 256 KiB
		}
		n = min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// checkBounded fails when the writer holds more than its documented bounds.
func checkBounded(t testing.TB, p *prefixWriter) {
	t.Helper()
	if len(p.pend) > MaxLineBytes || cap(p.pend) > 2*MaxLineBytes {
		t.Fatalf("held back %d bytes (capacity %d), more than MaxLineBytes %d", len(p.pend), cap(p.pend), MaxLineBytes)
	}
	if limit := writeChunkBytes + MaxLineBytes + len(p.cont) + 1; cap(p.buf) > 2*limit {
		t.Fatalf("gathering buffer capacity %d, more than twice its bound %d", cap(p.buf), limit)
	}
}

func FuzzPrefixWriterRejoin(f *testing.F) {
	f.Add([]byte("a\nb\n"), []byte{0})
	f.Add([]byte("partial"), []byte{1, 2})
	f.Add([]byte("\x00\r\n\xff\xfe\n\r"), []byte{0})
	f.Add(bytes.Repeat([]byte("y"), MaxLineBytes+1), []byte{200})
	f.Add(append(bytes.Repeat([]byte("z"), MaxLineBytes), '\n'), []byte{127, 0})
	f.Add(append(bytes.Repeat([]byte("z\n"), 40000), bytes.Repeat([]byte("w"), 3*MaxLineBytes)...), []byte{255, 3})
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		var out bytes.Buffer
		p := newPrefixWriter("node-1", false, &lockedWriter{w: &out})
		for _, c := range chunks(data, sizes) {
			if n, err := p.Write(c); n != len(c) || err != nil {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(c))
			}
			checkBounded(t, p)
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := rejoin(t, "node-1", out.Bytes()); !bytes.Equal(got, data) {
			t.Fatalf("rejoined output differs from the input: got %d bytes, want %d", len(got), len(data))
		}

		// Without a prefix the bytes pass unchanged, plus a newline after a
		// partial last line.
		out.Reset()
		p = newPrefixWriter("node-1", true, &lockedWriter{w: &out})
		for _, c := range chunks(data, sizes) {
			_, _ = p.Write(c)
			checkBounded(t, p)
		}
		_ = p.Flush()
		want := data
		if len(data) > 0 && data[len(data)-1] != '\n' {
			want = append(bytes.Clone(data), '\n')
		}
		if !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("output without prefix differs from the input: got %d bytes, want %d", out.Len(), len(want))
		}
	})
}

// TestPrefixWriterLongLineMemory: one 100 MB line, written as a stream
// delivers it, allocates a few hundred KiB, not the line.
func TestPrefixWriterLongLineMemory(t *testing.T) {
	const total = 100 << 20
	chunk := bytes.Repeat([]byte("a"), 32<<10)
	var out countWriter
	p := newPrefixWriter("tc-node-1", false, &lockedWriter{w: &out})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for n := 0; n < total; n += len(chunk) {
		if _, err := p.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2<<20 {
		t.Errorf("a %d MiB line allocated %d KiB, want at most 2 MiB", total>>20, alloc>>10)
	}
	pieces := (total + MaxLineBytes - 1) / MaxLineBytes
	if want := int64(total + pieces*(len(ContinuedPrefix("tc-node-1"))+1)); out.n != want {
		t.Errorf("wrote %d bytes, want %d (%d pieces, each prefixed and ended)", out.n, want, pieces)
	}
	if out.calls > pieces {
		t.Errorf("%d writes for %d MiB in %d KiB writes, want at most one per %d KiB piece", out.calls, total>>20, len(chunk)>>10, MaxLineBytes>>10)
	}

	// One large write reaches the writer in writeChunkBytes chunks.
	var big countWriter
	p = newPrefixWriter("tc-node-1", false, &lockedWriter{w: &big})
	if _, err := p.Write(bytes.Repeat([]byte("0123456789abcde\n"), 4<<20/16)); err != nil {
		t.Fatal(err)
	}
	if max := 4<<20*2/writeChunkBytes + 1; big.calls > max {
		t.Errorf("a 4 MiB write of short lines took %d writes, want at most %d", big.calls, max)
	}
}

// countWriter counts bytes and calls.
type countWriter struct {
	n     int64
	calls int
}

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	c.calls++
	return len(p), nil
}

// BenchmarkPrefixWriter: throughput of the prefixing writer on long lines
// (one line, no newline), short lines (80 bytes) and tiny ones (2 bytes),
// in 32 KiB writes as the exec stream delivers them.
func BenchmarkPrefixWriter(b *testing.B) {
	cases := []struct {
		name string
		line []byte
	}{
		{"long-line", bytes.Repeat([]byte("a"), 32<<10)},
		{"80-byte-lines", append(bytes.Repeat([]byte("b"), 79), '\n')},
		{"2-byte-lines", []byte("y\n")},
	}
	for _, c := range cases {
		chunk := bytes.Repeat(c.line, max(1, (32<<10)/len(c.line)))
		for _, noPrefix := range []bool{false, true} {
			name := c.name
			if noPrefix {
				name += "/no-prefix"
			}
			b.Run(name, func(b *testing.B) {
				p := newPrefixWriter("tc-node-1", noPrefix, &lockedWriter{w: io.Discard})
				b.SetBytes(int64(len(chunk)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.Write(chunk); err != nil {
						b.Fatal(err)
					}
				}
				_ = p.Flush()
			})
		}
	}
}

func FuzzRecorder(f *testing.F) {
	f.Add([]byte("abc"), []byte{0}, uint16(2))
	f.Add(bytes.Repeat([]byte("0123456789"), 1000), []byte{3, 200, 1}, uint16(100))
	f.Fuzz(func(t *testing.T, data, sizes []byte, max uint16) {
		r := newRecorder(int(max), true)
		for _, c := range chunks(data, sizes) {
			_, _ = r.Write(c)
			if cap(r.tail) > 4*int(max)+64 {
				t.Fatalf("tail buffer capacity %d for a tail of %d bytes", cap(r.tail), max)
			}
		}
		got := r.output()
		want := data[max0(len(data)-int(max)):]
		if int(max) == 0 {
			want = nil
		}
		if !bytes.Equal(got.Tail, want) || got.Bytes != int64(len(data)) {
			t.Fatalf("tail %q (%d bytes), want %q (%d)", trunc(got.Tail), got.Bytes, trunc(want), len(data))
		}
		if sum := sha256.Sum256(data); got.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("digest %s, want %x", got.SHA256, sum)
		}
	})
}

func max0(n int) int { return max(0, n) }

// BenchmarkRecorder: the digest and tail every node's streams pass through.
func BenchmarkRecorder(b *testing.B) {
	chunk := bytes.Repeat([]byte("a"), 32<<10)
	r := newRecorder(DefaultTailBytes, true)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		_, _ = r.Write(chunk)
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
