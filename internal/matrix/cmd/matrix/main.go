// Command matrix runs nodeexec's compatibility matrix (`make test-matrix`; see
// package internal/matrix and docs/compatibility.md). Run as root from the
// module's root directory, holding the cluster to itself: it replaces the
// local test cluster once per column.
//
//	matrix -columns 1.37.1/debian,1.37.1/2.2.9,1.34.4/2.2.9 -run REGEX [-out bench/matrix.json] [-doc docs/compatibility.md]
//
// It builds the testcluster and agentimage commands and the e2e test binary
// once, then for each column: `testcluster down`, `testcluster up --nodes N
// --kubernetes-version K [--containerd-version C]` (timed; cold when it built
// something), pushes nodeexec's image as `make cluster-up` does, runs the
// e2e tests matching -run and records each test's result and seconds. A
// column that fails (its cluster does not come up, say, or the testcluster
// command does not know its version flag) is recorded with the error and the
// run goes on. At the end, also after an error or a first Ctrl-C (a second
// one abandons it), it brings the default cluster back (down, up --nodes N,
// the image). The report is written to -out after every column, and the
// table generated from it into -doc between its markers at the end.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeexec/nodeexec/internal/matrix"
	"github.com/nodeexec/nodeexec/internal/testcluster"
)

const modulePath = "github.com/nodeexec/nodeexec"

// config is the command line, validated.
type config struct {
	columns []matrix.Column
	run     string
	out     string
	doc     string
	logs    string
	nodes   int
	timeout time.Duration
	command string
	lock    string
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(2)
	}
	if err := checkModuleRoot("."); err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

// parseFlags parses and validates the command line; nothing is built or
// started before it returns.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var columns string
	fs := flag.NewFlagSet("matrix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&columns, "columns", "", "comma-separated KUBERNETES/CONTAINERD columns, e.g. 1.37.1/debian,1.37.1/2.2.9 (CONTAINERD: debian, the distribution's, or a version to build)")
	fs.StringVar(&c.run, "run", "", "the e2e tests of every column, a go test -run regex")
	fs.StringVar(&c.out, "out", "bench/matrix.json", "the JSON report (the previous one there gives the cold or warm up times this run does not measure)")
	fs.StringVar(&c.doc, "doc", "docs/compatibility.md", "markdown file whose "+matrix.BeginMarker+" ... "+matrix.EndMarker+" section gets the generated table (empty: none)")
	fs.StringVar(&c.logs, "logs", filepath.Join(os.TempDir(), "nodeexec-matrix"), "directory for the built binaries and each column's logs")
	fs.IntVar(&c.nodes, "nodes", 2, "real nodes of every column's cluster and of the default cluster brought back")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "each column's test binary timeout (-test.timeout)")
	fs.StringVar(&c.lock, "lock", "", "a file to flock(2) after the binaries are built and until the default cluster is back (empty: none), so that other users of the cluster wait for the run, not for its build")
	fs.StringVar(&c.command, "command", "", "how the run was started, recorded in the report (default: this command line)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() != 0 {
		return c, fmt.Errorf("unexpected arguments %q: every input is a flag (-columns, -run, -out, -doc)", fs.Args())
	}
	var err error
	if c.columns, err = matrix.ParseColumns("-columns", columns); err != nil {
		return c, err
	}
	if strings.TrimSpace(c.run) == "" {
		return c, fmt.Errorf("-run is empty: give the e2e tests to run, a go test -run regex such as '^(TestBackendConformance|TestShellBackends)$'")
	}
	if _, err := regexp.Compile(c.run); err != nil {
		return c, fmt.Errorf("-run %q is not a regular expression: %v", c.run, err)
	}
	if c.out == "" {
		return c, fmt.Errorf("-out is empty: give the JSON report's path, e.g. bench/matrix.json")
	}
	if c.logs == "" {
		return c, fmt.Errorf("-logs is empty: give a directory for the binaries and logs")
	}
	if c.nodes < 2 || c.nodes > 99 {
		return c, fmt.Errorf("-nodes %d: the e2e tests need at least 2 real nodes (at most 99)", c.nodes)
	}
	if c.timeout <= 0 {
		return c, fmt.Errorf("-timeout %s: want a positive duration such as 30m", c.timeout)
	}
	if c.command == "" {
		c.command = "go run ./internal/matrix/cmd/matrix " + strings.Join(quoteArgs(args), " ")
	}
	return c, nil
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " |()$*?[]'\"\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return out
}

// checkModuleRoot refuses to run anywhere but nodeexec's module root.
func checkModuleRoot(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !bytes.HasPrefix(b, []byte("module "+modulePath+"\n")) {
		return fmt.Errorf("run from the root of %s (make test-matrix does)", modulePath)
	}
	return nil
}

// runner holds what every step needs.
type runner struct {
	cfg         config
	logs        string
	testcluster string
	agentimage  string
	e2e         string
}

func run(cfg config) int {
	start := time.Now()
	r := &runner{cfg: cfg, logs: cfg.logs}
	bin := filepath.Join(cfg.logs, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		return 1
	}
	r.testcluster, r.agentimage, r.e2e = filepath.Join(bin, "testcluster"), filepath.Join(bin, "agentimage"), filepath.Join(bin, "e2e.test")

	// Ctrl-C or SIGTERM: the first stops the columns (the children get
	// SIGINT) and the default cluster is brought back; a second abandons
	// that too.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stopColumns := context.WithCancel(context.Background())
	restoreCtx, stopRestore := context.WithCancel(context.Background())
	defer stopColumns()
	defer stopRestore()
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "matrix: interrupted: stopping; the default cluster is brought back if a column has begun (interrupt again to abandon that)")
		stopColumns()
		<-sigs
		fmt.Fprintln(os.Stderr, "matrix: interrupted again: abandoning; run `make cluster-down cluster-up` to bring the default cluster back")
		stopRestore()
	}()

	// The tree as built.
	rep := &matrix.Report{Date: start.UTC().Truncate(time.Second), Machine: machine(), Command: cfg.command, Tests: cfg.run}
	rep.Commit, rep.Dirty = gitCommit()

	// Everything built before the cluster is touched.
	t0 := time.Now()
	for _, b := range [][]string{
		{"go", "build", "-o", r.testcluster, "./internal/testcluster/cmd/testcluster"},
		{"go", "build", "-o", r.agentimage, "./internal/agentimage/cmd/agentimage"},
		{"go", "test", "-c", "-vet=off", "-tags", "e2e", "-o", r.e2e, "./e2e"},
	} {
		if out, err := command(ctx, "", b...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "matrix: %s: %v\n%s", strings.Join(b, " "), err, out)
			return 1
		}
	}
	rep.BuildSeconds = time.Since(t0).Seconds()
	fmt.Fprintf(os.Stderr, "matrix: built testcluster, agentimage and the e2e test binary in %s\n", time.Since(t0).Round(time.Second))
	t0 = time.Now()
	if cfg.lock != "" {
		unlock, err := lock(ctx, cfg.lock)
		if err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			return 1
		}
		defer unlock()
	}

	prev := readReport(cfg.out)
	save := func() {
		if err := writeReport(cfg.out, rep, prev); err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
		}
	}

	rep.LockWaitSeconds = time.Since(t0).Seconds()
	columnsStart := time.Now()
	var last *matrix.ColumnResult
	if ctx.Err() != nil {
		return 1 // interrupted before a column began: nothing to bring back
	}
	for _, col := range cfg.columns {
		if ctx.Err() != nil {
			break
		}
		res := r.column(ctx, col)
		rep.Columns = append(rep.Columns, res)
		last = &rep.Columns[len(rep.Columns)-1]
		save()
	}

	// The default cluster back: reused when the last column was it.
	defaultUp := last != nil && last.Error == "" && last.Kubernetes == testcluster.DefaultKubernetesVersion && last.Containerd == matrix.DebianContainerd
	if err := r.restore(restoreCtx, !defaultUp); err != nil {
		rep.Restore = err.Error()
		fmt.Fprintf(os.Stderr, "matrix: bringing the default cluster back: %v\n", err)
	}
	rep.Seconds = time.Since(columnsStart).Seconds()
	save()
	code := 0
	for _, c := range rep.Columns {
		if c.Failed() {
			code = 1
		}
	}
	if rep.Restore != "" || ctx.Err() != nil {
		code = 1
	}
	if cfg.doc != "" {
		if err := writeDoc(cfg.doc, rep, prev); err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			code = 1
		}
	}
	fmt.Fprintf(os.Stderr, "matrix: done in %s; report %s\n", time.Since(start).Round(time.Second), cfg.out)
	return code
}

// column runs one column; its failures are recorded in the result.
func (r *runner) column(ctx context.Context, col matrix.Column) matrix.ColumnResult {
	res := matrix.ColumnResult{Column: col, Name: col.String()}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "matrix %s: %s\n", col, fmt.Sprintf(format, args...))
	}
	fail := func(phase string, err error) matrix.ColumnResult {
		res.Phase, res.Error = phase, err.Error()
		if ctx.Err() != nil {
			res.Error = "interrupted: " + res.Error
		}
		logf("FAILED at %s: %s", phase, res.Error)
		res.Seconds = time.Since(start).Seconds()
		return res
	}
	prefix := filepath.Join(r.logs, strings.ReplaceAll(col.String(), "/", "+"))

	logf("testcluster down")
	if _, err := r.tc(ctx, prefix+"-down.log", "down"); err != nil {
		return fail(matrix.PhaseDown, err)
	}
	args := append([]string{"up", "--nodes", strconv.Itoa(r.cfg.nodes)}, col.UpArgs()...)
	logf("testcluster %s", strings.Join(args, " "))
	t0 := time.Now()
	out, err := r.tc(ctx, prefix+"-up.log", args...)
	res.Up = &matrix.UpTime{Seconds: time.Since(t0).Seconds()}
	res.Up.Built = builtLines(prefix + "-up.log")
	res.Up.Cold = len(res.Up.Built) > 0
	if err != nil {
		return fail(matrix.PhaseUp, err)
	}
	logf("up in %.0f s (cold: %v)", res.Up.Seconds, res.Up.Cold)
	kubeconfig := ""
	for _, l := range strings.Split(out, "\n") {
		if k, ok := strings.CutPrefix(l, "export KUBECONFIG="); ok {
			kubeconfig = strings.TrimSpace(k)
		}
	}
	if kubeconfig == "" {
		return fail(matrix.PhaseUp, fmt.Errorf("testcluster up printed no export KUBECONFIG= line: %q", out))
	}
	if err := versions(ctx, kubeconfig, &res); err != nil {
		logf("warning: reading the versions: %v", err)
	}
	logf("running: API server %s, nodes %v", res.APIServer, res.Nodes)
	if err := r.logged(ctx, prefix+"-image.log", "", r.agentimage); err != nil {
		return fail(matrix.PhaseImage, err)
	}
	logf("go test -run %s", r.cfg.run)
	tr, err := r.tests(ctx, prefix, func(t matrix.TestResult) {
		logf("--- %s %s (%.1fs)", strings.ToUpper(t.Result), t.Test, t.Seconds)
	})
	res.Run = &tr
	if err != nil && (tr.Result == "" || ctx.Err() != nil) {
		return fail(matrix.PhaseTests, err)
	}
	res.Seconds = time.Since(start).Seconds()
	logf("%d passed, %d failed, %d skipped; tests %.0f s, column %.0f s", tr.Count(matrix.Pass), tr.Count(matrix.Fail), tr.Count(matrix.Skip), tr.Seconds, res.Seconds)
	return res
}

// lock takes an exclusive flock on path, waiting for it until ctx ends.
func lock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("-lock: %w", err)
	}
	for waited := false; ; waited = true {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			if waited {
				fmt.Fprintf(os.Stderr, "matrix: took %s\n", path)
			}
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		} else if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("-lock %s: %w", path, err)
		}
		if !waited {
			fmt.Fprintf(os.Stderr, "matrix: waiting for %s\n", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("-lock %s: %w", path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// tc runs the testcluster command with its stderr in log, and returns its
// stdout. The error ends with the command's own error line.
func (r *runner) tc(ctx context.Context, log string, args ...string) (string, error) {
	var stdout bytes.Buffer
	err := r.loggedTo(ctx, log, "", &stdout, r.testcluster, args...)
	return stdout.String(), err
}

func (r *runner) logged(ctx context.Context, log, dir string, name string, args ...string) error {
	return r.loggedTo(ctx, log, dir, nil, name, args...)
}

// loggedTo runs name args in dir with stderr (and stdout, unless stdout is
// given) written to log. An error says which command failed and quotes the
// last lines of the log.
func (r *runner) loggedTo(ctx context.Context, log, dir string, stdout io.Writer, name string, args ...string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	tail := &tailWriter{n: 5}
	cmd := command(ctx, dir, append([]string{name}, args...)...)
	cmd.Stderr = io.MultiWriter(f, tail)
	cmd.Stdout = f
	if stdout != nil {
		cmd.Stdout = io.MultiWriter(f, stdout)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s (log %s)", filepath.Base(name), strings.Join(args, " "), err, strings.Join(tail.lines(), " / "), log)
	}
	return nil
}

// tests runs the e2e test binary under test2json in e2e/ and parses its events.
func (r *runner) tests(ctx context.Context, prefix string, done func(matrix.TestResult)) (matrix.TestRun, error) {
	events, err := os.Create(prefix + "-tests.jsonl")
	if err != nil {
		return matrix.TestRun{}, err
	}
	defer events.Close()
	stderr, err := os.Create(prefix + "-tests.stderr.log")
	if err != nil {
		return matrix.TestRun{}, err
	}
	defer stderr.Close()
	tail := &tailWriter{n: matrix.OutputLines}
	// The test binary's output goes through test2json, which is in a process
	// group of its own: an interrupt (the terminal's, or ctx's) stops the
	// binary, and test2json converts what it printed up to its end.
	bin := command(ctx, "e2e", r.e2e, "-test.v=test2json", "-test.count=1", "-test.run", r.cfg.run, "-test.timeout", r.cfg.timeout.String())
	bin.Stderr = io.MultiWriter(stderr, tail)
	conv := exec.Command("go", "tool", "test2json", "-t", "-p", modulePath+"/e2e")
	conv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	conv.Stderr = stderr
	binOut, convIn, err := os.Pipe()
	if err != nil {
		return matrix.TestRun{}, err
	}
	bin.Stdout, conv.Stdin = convIn, binOut
	pr, pw := io.Pipe()
	conv.Stdout = io.MultiWriter(events, pw)
	if err := conv.Start(); err != nil {
		binOut.Close()
		convIn.Close()
		return matrix.TestRun{}, fmt.Errorf("go tool test2json: %w", err)
	}
	berr := bin.Start()
	binOut.Close()
	convIn.Close()
	type parsed struct {
		run matrix.TestRun
		err error
	}
	ch := make(chan parsed, 1)
	go func() {
		tr, err := matrix.ParseTestJSON(pr, done)
		_, _ = io.Copy(io.Discard, pr)
		ch <- parsed{tr, err}
	}()
	werr := berr
	if berr == nil {
		werr = bin.Wait()
	}
	// test2json ends at its input's end: when the binary and whatever it
	// started that holds its stdout have exited; give those 10 s.
	convDone := make(chan error, 1)
	go func() { convDone <- conv.Wait() }()
	var cerr error
	select {
	case cerr = <-convDone:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-conv.Process.Pid, syscall.SIGKILL)
		cerr = <-convDone
	}
	pw.Close()
	p := <-ch
	tr := p.run
	if tr.Result == matrix.Fail && tr.Count(matrix.Fail) == 0 {
		// TestMain or the binary failed outside the tests: its stderr says why
		tr.Output = append(tr.Output, tail.lines()...)
	}
	if berr != nil {
		return tr, fmt.Errorf("the test binary: %w", berr)
	}
	if cerr != nil && werr == nil {
		return tr, fmt.Errorf("go tool test2json: %w", cerr)
	}
	if p.err != nil {
		return tr, p.err
	}
	if werr != nil && tr.Result == "" {
		return tr, fmt.Errorf("the test binary: %v: %s (logs %s-tests.*)", werr, strings.Join(tail.lines(), " / "), prefix)
	}
	return tr, nil
}

// restore brings the default cluster back, as `make cluster-down cluster-up`
// does (without the down when down is false: the running cluster is the
// default one and is reused).
func (r *runner) restore(ctx context.Context, down bool) error {
	prefix := filepath.Join(r.logs, "default")
	fmt.Fprintln(os.Stderr, "matrix: bringing the default cluster back")
	if down {
		if _, err := r.tc(ctx, prefix+"-down.log", "down"); err != nil {
			return err
		}
	}
	if _, err := r.tc(ctx, prefix+"-up.log", "up", "--nodes", strconv.Itoa(r.cfg.nodes)); err != nil {
		return err
	}
	return r.logged(ctx, prefix+"-image.log", "", r.agentimage)
}

// command is exec.CommandContext that interrupts (SIGINT) rather than kills
// the child when ctx ends, so testcluster stops what it started; it is
// killed if it has not exited 5 minutes later.
func command(ctx context.Context, dir string, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Minute
	return cmd
}

// builtLines are the "building ..." progress lines of a testcluster log: what
// it compiled (nothing when every binary was cached).
func builtLines(log string) []string {
	f, err := os.Open(log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if _, what, ok := strings.Cut(sc.Text(), "] building "); ok {
			out = append(out, what)
		}
	}
	return out
}

// versions reads the API server's version and the real nodes' kubelet and
// runtime versions.
func versions(ctx context.Context, kubeconfig string, res *matrix.ColumnResult) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	res.APIServer = v.GitVersion
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type!=kwok"})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		res.Nodes = append(res.Nodes, matrix.NodeVersions{Name: n.Name, Kubelet: n.Status.NodeInfo.KubeletVersion, Runtime: n.Status.NodeInfo.ContainerRuntimeVersion})
	}
	return nil
}

func gitCommit() (string, bool) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown", false
	}
	st, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), len(bytes.TrimSpace(st)) > 0
}

func machine() matrix.Machine {
	m := matrix.Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		var b strings.Builder
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b.WriteByte(byte(c))
		}
		m.Kernel = b.String()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.Atoi(f[1])
				m.MemoryMiB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	return m
}

// readReport reads the previous report, or nil.
func readReport(path string) *matrix.Report {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var r matrix.Report
	if err := json.Unmarshal(b, &r); err != nil {
		fmt.Fprintf(os.Stderr, "matrix: ignoring the previous report %s: %v\n", path, err)
		return nil
	}
	return &r
}

func writeReport(path string, rep *matrix.Report, prev *matrix.Report) error {
	r := *rep
	r.Columns = append([]matrix.ColumnResult(nil), rep.Columns...)
	r.CarryOver(prev)
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func writeDoc(path string, rep *matrix.Report, prev *matrix.Report) error {
	r := *rep
	r.Columns = append([]matrix.ColumnResult(nil), rep.Columns...)
	r.CarryOver(prev)
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-doc: %w", err)
	}
	out, err := matrix.ReplaceGenerated(doc, r.Markdown())
	if err != nil {
		return fmt.Errorf("-doc %s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// tailWriter keeps the last n lines written to it.
type tailWriter struct {
	n       int
	buf     []string
	partial string
}

func (t *tailWriter) Write(p []byte) (int, error) {
	s := t.partial + string(p)
	parts := strings.Split(s, "\n")
	t.partial = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		if strings.TrimSpace(l) == "" {
			continue
		}
		t.buf = append(t.buf, l)
		if len(t.buf) > t.n {
			t.buf = t.buf[1:]
		}
	}
	return len(p), nil
}

func (t *tailWriter) lines() []string {
	if strings.TrimSpace(t.partial) != "" {
		return append(append([]string(nil), t.buf...), t.partial)
	}
	return t.buf
}
