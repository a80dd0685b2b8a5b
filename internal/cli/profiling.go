package cli

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	ucli "github.com/urfave/cli/v2"
)

// profilingFlags write Go profiles of the whole command, for `go tool
// pprof`: how a run on thousands of nodes spends its CPU and memory.
func profilingFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the whole command to `FILE` (go tool pprof FILE)"},
		&ucli.StringFlag{Name: "memprofile", Usage: "write a heap profile to `FILE` when the command ends, after a garbage collection: what it still holds then (go tool pprof -sample_index=inuse_space FILE)"},
	}
}

// profiler starts and stops the profiles the flags ask for.
type profiler struct {
	cpu *os.File
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
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	return f.Close()
}
