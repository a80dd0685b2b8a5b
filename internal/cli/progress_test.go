package cli

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeexec/nodeexec/nodeexec"
)

func TestProgressLine(t *testing.T) {
	tests := []struct {
		c     progressCounts
		width int
		want  string
	}{
		{progressCounts{Total: 10}, 0, "nodes: 0/10 done, 0 failed, 0 running, 10 pending"},
		{progressCounts{Total: 10, Done: 3, Failed: 1, Running: 4}, 0, "nodes: 3/10 done, 1 failed, 4 running, 3 pending"},
		{progressCounts{Total: 2, Done: 2, Failed: 2}, 0, "nodes: 2/2 done, 2 failed, 0 running, 0 pending"},
		// Never a negative count, whatever the callbacks' order.
		{progressCounts{Total: 2, Done: 2, Running: 1}, 0, "nodes: 2/2 done, 0 failed, 1 running, 0 pending"},
		// Cut to one less than the width: a line that wraps cannot be erased with \r.
		{progressCounts{Total: 10, Done: 3}, 21, "nodes: 3/10 done, 0 "},
		{progressCounts{Total: 10, Done: 3}, 200, "nodes: 3/10 done, 0 failed, 0 running, 7 pending"},
	}
	for _, tt := range tests {
		if got := progressLine(tt.c, tt.width); got != tt.want {
			t.Errorf("progressLine(%+v, %d) = %q, want %q", tt.c, tt.width, got, tt.want)
		}
	}
}

// screen is a fake terminal: it interprets what the CLI writes (text,
// "\n", "\r", and "\x1b[K", erase to the end of the line) into the lines a
// person would see. It fails on any other escape sequence.
type screen struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
	col   int
	raw   strings.Builder
}

func (s *screen) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw.Write(b)
	if len(s.lines) == 0 {
		s.lines = []string{""}
	}
	for i := 0; i < len(b); i++ {
		cur := &s.lines[len(s.lines)-1]
		switch c := b[i]; {
		case c == '\n':
			s.lines = append(s.lines, "")
			s.col = 0
		case c == '\r':
			s.col = 0
		case c == 0x1b:
			if !strings.HasPrefix(string(b[i:]), "\x1b[K") {
				s.t.Errorf("unexpected escape sequence in %q", b[i:])
				return len(b), nil
			}
			*cur = (*cur)[:s.col]
			i += 2
		default:
			if s.col < len(*cur) {
				*cur = (*cur)[:s.col] + string(c) + (*cur)[s.col+1:]
			} else {
				*cur += string(c)
			}
			s.col++
		}
	}
	return len(b), nil
}

// view is the screen's lines; the last one is where the cursor is.
func (s *screen) view() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// fakeNow is a settable clock for the redraw throttle.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func TestProgressInterleaving(t *testing.T) {
	// stdout and stderr are the same terminal: every line of output must
	// land on a line of its own, the progress line only ever last, and gone
	// after stop.
	scr := &screen{t: t}
	clk := &fakeNow{t: time.Unix(0, 0)}
	p := newProgress(scr, func() int { return 80 }, clk.now)
	var o nodeexec.RunnerOptions
	p.hooks(&o)
	stdout, stderr := p.writer(scr, true), p.writer(scr, true)

	fmt.Fprint(stdout, "before the run\n") // not active: passed through
	p.start(3)
	if diff := cmp.Diff([]string{"before the run", "nodes: 0/3 done, 0 failed, 0 running, 3 pending"}, scr.view()); diff != "" {
		t.Fatalf("after start (-want +got):\n%s", diff)
	}
	o.OnStart("a")
	o.OnStart("b")
	fmt.Fprint(stdout, "[a] one\n")
	// Output erased the line; within progressInterval of the last draw it
	// waits for the ticker (or the next event).
	if diff := cmp.Diff([]string{"before the run", "[a] one", ""}, scr.view()); diff != "" {
		t.Errorf("after output (-want +got):\n%s", diff)
	}
	clk.add(progressInterval)
	fmt.Fprint(stderr, "[b] two\n")
	if diff := cmp.Diff([]string{"before the run", "[a] one", "[b] two", "nodes: 0/3 done, 0 failed, 2 running, 1 pending"}, scr.view()); diff != "" {
		t.Errorf("after output past the interval (-want +got):\n%s", diff)
	}
	o.OnResult(nodeexec.NodeResult{Result: nodeexec.Result{Node: "a"}, Attempts: 1})
	o.OnResult(nodeexec.NodeResult{Result: nodeexec.Result{Node: "b"}, Attempts: 1, Err: errors.New("exit 1")})
	if got, want := scr.view()[3], "nodes: 2/3 done, 1 failed, 0 running, 1 pending"; got != want {
		t.Errorf("after two results %q, want %q", got, want)
	}
	// A partial line: the progress line is not drawn after it, even past
	// the interval, until the line is ended.
	clk.add(progressInterval)
	fmt.Fprint(stdout, "[c]+ partial")
	o.OnResult(nodeexec.NodeResult{Result: nodeexec.Result{Node: "c"}, Err: fmt.Errorf("x: %w", nodeexec.ErrSkipped)})
	if diff := cmp.Diff([]string{"before the run", "[a] one", "[b] two", "[c]+ partial"}, scr.view()); diff != "" {
		t.Errorf("after a partial line (-want +got):\n%s", diff)
	}
	fmt.Fprint(stdout, "\n")
	if got, want := scr.view()[4], "nodes: 3/3 done, 1 failed, 0 running, 0 pending"; got != want {
		t.Errorf("after the line ended %q, want %q (a skipped node is done, not failed)", got, want)
	}
	p.stop()
	p.stop()
	fmt.Fprint(stderr, "SUMMARY\n")
	if diff := cmp.Diff([]string{"before the run", "[a] one", "[b] two", "[c]+ partial", "SUMMARY", ""}, scr.view()); diff != "" {
		t.Errorf("after stop (-want +got):\n%s", diff)
	}
}

func TestProgressOff(t *testing.T) {
	// One node: nothing drawn, writers pass bytes through unchanged.
	scr := &screen{t: t}
	p := newProgress(scr, nil, time.Now)
	var o nodeexec.RunnerOptions
	p.hooks(&o)
	w := p.writer(scr, true)
	p.start(1)
	o.OnStart("a")
	fmt.Fprint(w, "out\n")
	o.OnResult(nodeexec.NodeResult{Result: nodeexec.Result{Node: "a"}, Attempts: 1})
	p.stop()
	if got := scr.raw.String(); got != "out\n" {
		t.Errorf("one node wrote %q, want only the output", got)
	}
	// A nil progress (not a terminal, -o json, --no-progress) is a no-op.
	var none *progress
	none.hooks(&o)
	none.start(5)
	none.stop()
	if w := none.writer(scr, true); w != scr {
		t.Error("nil progress wrapped the writer")
	}
}

func TestProgressTicker(t *testing.T) {
	// The ticker draws the line again after output erased it.
	scr := &screen{t: t}
	clk := &fakeNow{t: time.Unix(0, 0)}
	p := newProgress(scr, nil, clk.now)
	w := p.writer(scr, true)
	p.start(2)
	defer p.stop()
	fmt.Fprint(w, "[a] line\n")
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := scr.view()
		if v[len(v)-1] == "nodes: 0/2 done, 0 failed, 0 running, 2 pending" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("progress line not redrawn by the ticker: %q", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
