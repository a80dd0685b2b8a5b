package spool

import (
	"bytes"
	"fmt"
	"io"
)

// End is how a spooled run ended: the command's exit status and how many
// bytes of stdout and stderr it wrote.
type End struct {
	Code           int
	Stdout, Stderr int64
}

// trailerPrefix starts the Trailer. It begins with a NUL byte, which text
// on stderr does not hold, so that TrailerWriter passes stderr through at
// once and holds back only what may be a trailer.
const trailerPrefix = "\x00nodeexec-spool-end "

// maxTrailer bounds a trailer's length.
const maxTrailer = 128

// Trailer is what the agent writes on stderr after the whole output of a
// spooled run (Spool.Serve, Attach): a NUL byte, "nodeexec-spool-end", the
// exit status and the byte counts, and a newline. A client that reads it
// (TrailerWriter) and counted as many bytes knows that it has everything:
// a stream that ends without it was cut, even when the exec reported a
// success — as the API server does when the node's container runtime stops
// under a running exec.
func (e End) Trailer() []byte {
	return fmt.Appendf(nil, "%scode=%d stdout=%d stderr=%d\n", trailerPrefix, e.Code, e.Stdout, e.Stderr)
}

// TrailerWriter writes stderr to W without the Trailer, which it keeps.
type TrailerWriter struct {
	W    io.Writer
	held []byte
	end  *End
}

// End returns the trailer read last, if the stream ended with one.
func (t *TrailerWriter) End() (End, bool) {
	if t.end == nil {
		return End{}, false
	}
	return *t.end, true
}

// Write passes p to W, except a trailer (or, until it is known not to be
// one, what may start one). It returns len(p) unless W failed.
func (t *TrailerWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		t.end = nil // a trailer counts only as the last thing written
		if len(t.held) == 0 {
			i := bytes.IndexByte(p, 0)
			if i < 0 {
				if _, err := t.W.Write(p); err != nil {
					return 0, err
				}
				return n, nil
			}
			if _, err := t.W.Write(p[:i]); err != nil {
				return 0, err
			}
			p = p[i:]
		}
		take := min(len(p), maxTrailer+1-len(t.held))
		if j := bytes.IndexByte(p[:take], '\n'); j >= 0 {
			take = j + 1
		}
		t.held = append(t.held, p[:take]...)
		p = p[take:]
		k := min(len(t.held), len(trailerPrefix))
		if !bytes.Equal(t.held[:k], []byte(trailerPrefix)[:k]) || len(t.held) > maxTrailer {
			if err := t.notTrailer(); err != nil {
				return 0, err
			}
			continue
		}
		if t.held[len(t.held)-1] == '\n' {
			var e End
			if _, err := fmt.Sscanf(string(t.held[len(trailerPrefix):]), "code=%d stdout=%d stderr=%d\n", &e.Code, &e.Stdout, &e.Stderr); err != nil {
				if err := t.notTrailer(); err != nil {
					return 0, err
				}
				continue
			}
			t.held, t.end = nil, &e
		}
	}
	return n, nil
}

// notTrailer writes the held bytes' first (a NUL that starts no trailer)
// and takes the rest, which may hold a trailer's start, again.
func (t *TrailerWriter) notTrailer() error {
	held := t.held
	t.held = nil
	if _, err := t.W.Write(held[:1]); err != nil {
		return err
	}
	_, err := t.Write(held[1:])
	return err
}
