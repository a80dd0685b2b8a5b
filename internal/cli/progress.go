package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/internal/term"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// progressInterval is how often the progress line is redrawn after output
// erased it; a node's start or end redraws it at once.
const progressInterval = 150 * time.Millisecond

// eraseLine returns the cursor to the start of the line and erases it.
const eraseLine = "\r\x1b[K"

// progressCounts is where a multi-node run stands. Done counts every node
// with a result (failed and skipped included), Failed those that ran and
// failed; pending is what neither started nor ended.
type progressCounts struct {
	Total, Done, Failed, Running int
}

// progressLine renders counts as the one-line indicator, cut to fit a
// terminal width columns wide (0: unknown, not cut) without wrapping.
func progressLine(c progressCounts, width int) string {
	pending := max(c.Total-c.Done-c.Running, 0)
	s := fmt.Sprintf("nodes: %d/%d done, %d failed, %d running, %d pending", c.Done, c.Total, c.Failed, c.Running, pending)
	if width > 1 && len(s) > width-1 {
		s = s[:width-1]
	}
	return s
}

// progress draws progressLine on a terminal during a run and keeps it out of
// the way of the run's output: writers from writer erase the line before
// their bytes reach the terminal, and it is drawn again after them (at once
// when it was last drawn progressInterval ago, else by the ticker). It is
// drawn only while the cursor is at the start of a line, so a partial line
// of output is never followed by it. The zero total (before start, or one
// node) draws nothing; its writers pass bytes through.
type progress struct {
	mu      sync.Mutex
	term    io.Writer  // where the line is drawn (stderr)
	width   func() int // the terminal's width, 0 if unknown
	now     func() time.Time
	counts  progressCounts
	active  bool // between start (several nodes) and stop
	shown   bool // the line is on the terminal
	midLine bool // the last output to the terminal did not end its line
	drawn   time.Time
	quit    chan struct{}
	wg      sync.WaitGroup
}

func newProgress(w io.Writer, width func() int, now func() time.Time) *progress {
	return &progress{term: w, width: width, now: now}
}

// runProgress is the progress indicator for `run` when it applies: text
// output, stderr a terminal, no --no-progress. Else nil, and nothing extra
// is ever written.
func runProgress(c *ucli.Context, streams Streams) *progress {
	if c.Bool("no-progress") || c.String("output") != formatText {
		return nil
	}
	fd, ok := term.Fd(streams.ErrOut)
	if !ok {
		return nil
	}
	width := func() int {
		if s, err := term.Size(fd); err == nil {
			return int(s.Width)
		}
		return 0
	}
	return newProgress(streams.ErrOut, width, time.Now)
}

// writer returns w, the destination of the run's output, wrapped so that
// the progress line is erased before output and redrawn after. onTerm says
// whether w writes to the same terminal; if not, w is returned as it is.
// A nil progress returns w.
func (p *progress) writer(w io.Writer, onTerm bool) io.Writer {
	if p == nil || !onTerm {
		return w
	}
	return &progressWriter{p: p, w: w}
}

// hooks sets o's OnStart and OnResult to count nodes (keeping an OnResult
// already set).
func (p *progress) hooks(o *nodeexec.RunnerOptions) {
	if p == nil {
		return
	}
	o.OnStart = func(string) { p.update(func(c *progressCounts) { c.Running++ }) }
	next := o.OnResult
	o.OnResult = func(r nodeexec.NodeResult) {
		// A skipped node never started; it is done, not failed.
		skipped := errors.Is(r.Err, nodeexec.ErrSkipped)
		p.update(func(c *progressCounts) {
			c.Done++
			if !skipped {
				c.Running = max(c.Running-1, 0)
			}
			if r.Err != nil && !skipped {
				c.Failed++
			}
		})
		if next != nil {
			next(r)
		}
	}
}

// start shows the line for a run on total nodes (only for several) and
// starts the ticker that redraws it after output.
func (p *progress) start(total int) {
	if p == nil || total < 2 {
		return
	}
	p.mu.Lock()
	p.counts = progressCounts{Total: total}
	p.active = true
	p.quit = make(chan struct{})
	p.drawLocked()
	p.mu.Unlock()
	p.wg.Go(func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.mu.Lock()
				if !p.shown {
					p.drawLocked()
				}
				p.mu.Unlock()
			}
		}
	})
}

// stop erases the line for good; output written afterwards (the summary)
// is not disturbed. Safe to call more than once, and on nil.
func (p *progress) stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if !p.active {
		p.mu.Unlock()
		return
	}
	p.active = false
	p.eraseLocked()
	close(p.quit)
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *progress) update(f func(*progressCounts)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.counts)
	p.drawLocked()
}

// drawLocked (re)draws the line, when active and the cursor is at the
// start of a line or on the line itself.
func (p *progress) drawLocked() {
	if !p.active || p.midLine {
		return
	}
	w := 0
	if p.width != nil {
		w = p.width()
	}
	line := progressLine(p.counts, w)
	if p.shown {
		_, _ = io.WriteString(p.term, "\r"+line+"\x1b[K")
	} else {
		_, _ = io.WriteString(p.term, line)
	}
	p.shown = true
	p.drawn = p.now()
}

func (p *progress) eraseLocked() {
	if p.shown {
		_, _ = io.WriteString(p.term, eraseLine)
		p.shown = false
	}
}

// progressWriter is one output stream on the progress line's terminal.
type progressWriter struct {
	p *progress
	w io.Writer
}

func (pw *progressWriter) Write(b []byte) (int, error) {
	p := pw.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eraseLocked()
	n, err := pw.w.Write(b)
	if n > 0 {
		p.midLine = !bytes.HasSuffix(b[:n], []byte("\n"))
	}
	if p.now().Sub(p.drawn) >= progressInterval {
		p.drawLocked()
	}
	return n, err
}
