package nodeexec

import (
	"bytes"
	"io"
	"sync"
	"time"
)

// MaxLineBytes is the longest piece of one output line that Runner holds
// back or writes at once when it prefixes or line-buffers output: a longer
// line is written in pieces of MaxLineBytes bytes (the prefix and the newline
// not counted), so that memory stays bounded whatever a node prints. See
// ContinuedPrefix for how the pieces are marked.
const MaxLineBytes = 64 << 10

// writeChunkBytes is how much prefixed output a writer gathers before it
// passes it on: large writes reach the shared writer in few calls, and the
// gathering buffer stays bounded.
const writeChunkBytes = 256 << 10

// LinePrefix is the prefix Runner puts before each line of node's output:
// "[node] ".
func LinePrefix(node string) string { return "[" + node + "] " }

// ContinuedPrefix is the prefix of an output line whose newline Runner added,
// "[node]+ ": the node's line goes on in the next line prefixed "[node] " or
// "[node]+ " (it was longer than MaxLineBytes and is written in pieces), or
// the node's output ended there without a newline. A reader rejoins a node's
// output exactly by removing the prefixes and, after each ContinuedPrefix
// line, the newline. Node names cannot contain ']', so no output can be
// mistaken for either prefix.
func ContinuedPrefix(node string) string { return "[" + node + "]+ " }

// lockedWriter serialises whole lines from many nodes onto one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) write(p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(p)
	return err
}

// prefixWriter writes each complete line to out with a prefix, holding back a
// partial last line until it is completed, reaches MaxLineBytes, or Flush is
// called. It never splits a piece between two writes to out, so output of
// different nodes never interleaves within a piece.
//
// With a prefix, a piece that does not end its line (a line longer than
// MaxLineBytes, or the last one without a newline at Flush) is written with
// cont instead of prefix and a newline added (see ContinuedPrefix). Without
// a prefix (both empty) pieces are written as they are, except that Flush
// ends a last partial line with a newline so the next node's output starts on
// a line of its own.
//
// Memory: at most MaxLineBytes held back and writeChunkBytes+MaxLineBytes+
// prefix gathered for out, whatever the input. Work per byte: one
// bytes.IndexByte scan and one or two copies with a prefix; without one, a
// bytes.LastIndexByte scan per write, and complete lines are passed on
// without a copy.
type prefixWriter struct {
	prefix, cont []byte
	out          *lockedWriter
	pend         []byte // the current line's bytes not yet written, at most MaxLineBytes
	buf          []byte // output gathered for out
}

// newPrefixWriter returns a writer of node's lines to out, prefixed unless
// noPrefix is set.
func newPrefixWriter(node string, noPrefix bool, out *lockedWriter) *prefixWriter {
	p := &prefixWriter{out: out}
	if !noPrefix {
		p.prefix, p.cont = []byte(LinePrefix(node)), []byte(ContinuedPrefix(node))
	}
	return p
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	if len(p.prefix) == 0 {
		if err := p.writeRaw(b); err != nil {
			return 0, err
		}
		return n, nil
	}
	for len(b) > 0 {
		room := MaxLineBytes - len(p.pend)
		// A newline right after a full piece still ends that piece's line.
		i := bytes.IndexByte(b[:min(len(b), room+1)], '\n')
		switch {
		case i >= 0: // the line ends within this piece
			p.emit(p.prefix, b[:i+1], false)
			b = b[i+1:]
		case len(b) <= room: // a partial line: hold it back
			p.pend = append(p.pend, b...)
			b = nil
		default: // the piece is full and the line goes on
			p.emit(p.cont, b[:room], true)
			b = b[room:]
		}
		if len(p.buf) >= writeChunkBytes {
			if err := p.send(); err != nil {
				return 0, err
			}
		}
	}
	if err := p.send(); err != nil {
		return 0, err
	}
	return n, nil
}

// writeRaw is Write without a prefix: the held-back bytes and b up to its
// last newline go to out at once (copied only up to writeChunkBytes, the rest
// passed as it is, under one lock); a partial line is held back and written
// as it is whenever it reaches MaxLineBytes.
func (p *prefixWriter) writeRaw(b []byte) error {
	if k := bytes.LastIndexByte(b, '\n') + 1; k > 0 {
		lines := b[:k]
		b = b[k:]
		p.out.mu.Lock()
		var err error
		if len(p.pend) > 0 {
			n := min(len(lines), writeChunkBytes)
			p.buf = append(append(p.buf[:0], p.pend...), lines[:n]...)
			lines = lines[n:]
			p.pend = p.pend[:0]
			_, err = p.out.w.Write(p.buf)
			p.buf = p.buf[:0]
		}
		if err == nil && len(lines) > 0 {
			_, err = p.out.w.Write(lines)
		}
		p.out.mu.Unlock()
		if err != nil {
			return err
		}
	}
	for len(p.pend)+len(b) > MaxLineBytes {
		room := MaxLineBytes - len(p.pend)
		p.emit(nil, b[:room], true)
		b = b[room:]
		if err := p.send(); err != nil {
			return err
		}
	}
	p.pend = append(p.pend, b...)
	return nil
}

// emit gathers one piece: prefix, the held-back bytes, b and, when
// continued and prefixed, a newline.
func (p *prefixWriter) emit(prefix, b []byte, continued bool) {
	p.buf = append(p.buf, prefix...)
	p.buf = append(p.buf, p.pend...)
	p.buf = append(p.buf, b...)
	if continued && len(p.prefix) > 0 {
		p.buf = append(p.buf, '\n')
	}
	p.pend = p.pend[:0]
}

// send passes the gathered output to out.
func (p *prefixWriter) send() error {
	if len(p.buf) == 0 {
		return nil
	}
	err := p.out.write(p.buf)
	p.buf = p.buf[:0]
	return err
}

// Flush writes a partial last line, ended with a newline (and marked with
// the continued prefix when there is a prefix).
func (p *prefixWriter) Flush() error {
	if len(p.pend) == 0 {
		return nil
	}
	p.emit(p.cont, nil, true)
	if len(p.prefix) == 0 {
		p.buf = append(p.buf, '\n')
	}
	err := p.send()
	p.pend, p.buf = nil, nil
	return err
}

// firstByteWriter calls onFirst when the first byte passes through.
type firstByteWriter struct {
	w       io.Writer
	once    *sync.Once
	onFirst func()
}

func (f *firstByteWriter) Write(b []byte) (int, error) {
	if len(b) > 0 {
		f.once.Do(f.onFirst)
	}
	if f.w == nil {
		return len(b), nil
	}
	return f.w.Write(b)
}

// RecordFirstOutput returns a copy of req whose Stdout and Stderr note the
// time of the first byte on either, and a function returning that time (zero
// if nothing arrived). Backends use it to fill Result.FirstOutput.
func RecordFirstOutput(req Request, now func() time.Time) (Request, func() time.Time) {
	var (
		once  sync.Once
		mu    sync.Mutex
		first time.Time
	)
	mark := func() {
		t := now()
		mu.Lock()
		first = t
		mu.Unlock()
	}
	req.Stdout = &firstByteWriter{w: req.Stdout, once: &once, onFirst: mark}
	req.Stderr = &firstByteWriter{w: req.Stderr, once: &once, onFirst: mark}
	return req, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}
