package cli

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	ucli "github.com/urfave/cli/v2"
)

// profilingFlags write Go profiles of the whole command, for `go tool
// pprof`: how a run on thousands of nodes spends its CPU and memory.
func profilingFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the whole command to `FILE` (go tool pprof FILE)"},
		&ucli.StringFlag{Name: "memprofile", Usage: "write a heap profile to `FILE` when the command ends, taken when its live heap was largest (checked every 100ms): what it held then (go tool pprof -sample_index=inuse_space FILE)"},
	}
}

// profiler starts and stops the profiles the flags ask for.
type profiler struct {
	cpu *os.File
	// heap: the heap profile taken at the largest live heap so far, by
	// watchHeap until stop closes done and waits for finished.
	heap           *bytes.Buffer
	done, finished chan struct{}
}

// heapLiveMetric is the Go runtime's live heap after the last collection.
const heapLiveMetric = "/gc/heap/live:bytes"

// watchHeap takes a heap profile each time the live heap (as of the last
// garbage collection) has grown by a tenth over the one of the last
// profile, so that the profile shows what the command held at its
// largest, not at its end, when a run has let go of its nodes' records.
func (p *profiler) watchHeap() {
	defer close(p.finished)
	sample := []metrics.Sample{{Name: heapLiveMetric}}
	var last uint64
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(sample)
		if live := sample[0].Value.Uint64(); live > last+last/10 {
			var b bytes.Buffer
			if pprof.Lookup("heap").WriteTo(&b, 0) == nil {
				last, p.heap = live, &b
			}
		}
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
}

// start is the app's Before: it starts the CPU profile. A file that cannot
// be created is an error naming the flag, before anything else is done.
func (p *profiler) start(c *ucli.Context) error {
	if path := c.String("memprofile"); path != "" {
		// created now, so that a path that cannot be written fails first
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		f.Close()
		p.done, p.finished = make(chan struct{}), make(chan struct{})
		go p.watchHeap()
	}
	path := c.String("cpuprofile")
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	p.cpu = f
	return nil
}

// stop is the app's After (run after the command, whatever its outcome):
// it ends the CPU profile and writes the heap profile.
func (p *profiler) stop(c *ucli.Context) error {
	if p.cpu != nil {
		pprof.StopCPUProfile()
		if err := p.cpu.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		p.cpu = nil
	}
	path := c.String("memprofile")
	if path == "" || p.done == nil {
		return nil
	}
	close(p.done)
	<-p.finished
	p.done = nil
	heap := p.heap
	if heap == nil {
		runtime.GC()
		heap = &bytes.Buffer{}
		if err := pprof.Lookup("heap").WriteTo(heap, 0); err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
	}
	if err := os.WriteFile(path, heap.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	return nil
}
