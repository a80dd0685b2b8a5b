package nodeexec

import (
	"bytes"
	"io"
	"sync"
	"time"
)

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
// partial last line until it is completed or Flush is called. It never splits
// a line between two writes to out, so lines of different nodes never
// interleave mid-line.
type prefixWriter struct {
	prefix []byte
	out    *lockedWriter
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	var chunk []byte
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		chunk = append(chunk, p.prefix...)
		chunk = append(chunk, p.buf[:i+1]...)
		p.buf = p.buf[i+1:]
	}
	if len(chunk) > 0 {
		if err := p.out.write(chunk); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// Flush writes a partial last line, newline-terminated.
func (p *prefixWriter) Flush() error {
	if len(p.buf) == 0 {
		return nil
	}
	line := append(append(append([]byte{}, p.prefix...), p.buf...), '\n')
	p.buf = nil
	return p.out.write(line)
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
