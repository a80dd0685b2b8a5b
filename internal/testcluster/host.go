package testcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mountInfo is one line of /proc/PID/mountinfo.
type mountInfo struct {
	MountPoint string
	FSType     string
}

// parseMountInfo parses /proc/PID/mountinfo (see proc(5)); mount points are unescaped.
func parseMountInfo(s string) []mountInfo {
	var out []mountInfo
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 7 {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			continue
		}
		out = append(out, mountInfo{MountPoint: unescapeMount(f[4]), FSType: f[sep+1]})
	}
	return out
}

// unescapeMount decodes the octal escapes (\040 for space, ...) of mountinfo fields.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readMountInfo(pid string) ([]mountInfo, error) {
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountInfo(string(b)), nil
}

// mountsUnder returns the mount points at or below one of roots, deepest first.
func mountsUnder(mounts []mountInfo, roots ...string) []string {
	var out []string
	for _, m := range mounts {
		for _, r := range roots {
			if m.MountPoint == r || strings.HasPrefix(m.MountPoint, strings.TrimSuffix(r, "/")+"/") {
				out = append(out, m.MountPoint)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// cgroupMounts lists the mount points of every cgroup (v1) and cgroup2 hierarchy.
func cgroupMounts() ([]string, error) {
	mounts, err := readMountInfo("self")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			out = append(out, m.MountPoint)
		}
	}
	return out, nil
}

// createCgroupRoot creates /<name> in every hierarchy (the kubelet's cgroupRoot must
// exist in each of them).
func createCgroupRoot(root string) error {
	mps, err := cgroupMounts()
	if err != nil {
		return fmt.Errorf("cgroup root %s: %w", root, err)
	}
	for _, mp := range mps {
		if err := os.MkdirAll(filepath.Join(mp, root), 0o755); err != nil {
			return fmt.Errorf("cgroup root %s: %w", root, err)
		}
	}
	return nil
}

// removeCgroupRoot removes /<root> and everything below it (deepest first) in every
// hierarchy, retrying for a while: a cgroup stays busy briefly after its last
// process exits. It returns the directories that could not be removed.
func removeCgroupRoot(root string, wait time.Duration) []string {
	mps, err := cgroupMounts()
	if err != nil {
		return []string{err.Error()}
	}
	var left []string
	deadline := time.Now().Add(wait)
	for _, mp := range mps {
		top := filepath.Join(mp, root)
		for {
			err := removeTreeOfDirs(top)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					left = append(left, top)
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return left
}

// removeTreeOfDirs rmdirs a tree of (cgroup) directories, children first. Files in
// cgroupfs cannot and need not be removed.
func removeTreeOfDirs(top string) error {
	var dirs []string
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var first error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) && first == nil {
			first = fmt.Errorf("rmdir %s: %w", dirs[i], err)
		}
	}
	return first
}

// ourCgroupRoots lists /<node name> directories present in any hierarchy.
func ourCgroupRoots() []string {
	mps, _ := cgroupMounts()
	seen := map[string]bool{}
	var out []string
	for _, mp := range mps {
		ents, _ := os.ReadDir(mp)
		for _, e := range ents {
			if _, ok := nodeIndex(e.Name()); ok && e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, "/"+e.Name())
			}
		}
	}
	return out
}

// saveSysctls records the current values of the kubelet-modified host sysctls in
// path, unless path exists (the first save holds the originals).
func saveSysctls(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	var b strings.Builder
	for _, k := range sysctlKeys() {
		v, err := os.ReadFile(sysctlPath(k))
		if err != nil {
			return fmt.Errorf("save sysctl %s: %w", k, err)
		}
		fmt.Fprintf(&b, "%s=%s\n", k, strings.TrimSpace(string(v)))
	}
	return writeFileAtomic(path, []byte(b.String()), 0o644)
}

// parseSysctls parses "key=value" lines.
func parseSysctls(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.Contains(k, ".") {
			return nil, fmt.Errorf("bad sysctl line %q", line)
		}
		out[k] = v
	}
	return out, nil
}

// restoreSysctls writes back the values saved in path; it returns the restored keys.
func restoreSysctls(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	kv, err := parseSysctls(string(b))
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, k := range sysctlKeys() { // only keys we know, in a fixed order
		v, ok := kv[k]
		if !ok {
			continue
		}
		cur, _ := os.ReadFile(sysctlPath(k))
		if strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
			continue
		}
		done = append(done, k+"="+v)
	}
	return done, errors.Join(errs...)
}

// hostPathCandidates are host directories the daemons may create outside our own
// directories. Start records which of them are absent; Stop removes those again if
// they are empty. /run/netns is also a bind mount of itself made by `ip netns add`.
func hostPathCandidates() []string {
	return []string{
		"/run/netns",
		"/run/containerd", "/run/containerd/s", "/run/containerd/runc",
		"/var/lib/cni", "/var/lib/cni/results",
		"/var/log/containers", "/var/log/pods",
		"/etc/cni", "/etc/cni/net.d", "/opt/cni", "/opt/cni/bin",
		"/opt/containerd", "/var/lib/containerd",
		"/var/lib/kubelet", "/etc/kubernetes",
		"/usr/libexec/kubernetes",
	}
}

// absentHostPaths returns the candidates that do not exist now.
func absentHostPaths() []string {
	var out []string
	for _, p := range hostPathCandidates() {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			out = append(out, p)
		}
	}
	return out
}

func isMountPoint(path string) bool {
	mounts, err := readMountInfo("self")
	if err != nil {
		return false
	}
	for _, m := range mounts {
		if m.MountPoint == path {
			return true
		}
	}
	return false
}

// removeEmptyTree removes dir and its subdirectories, children first, as long as they
// contain no files; it reports whether dir is gone.
func removeEmptyTree(dir string) bool {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !e.IsDir() || !removeEmptyTree(filepath.Join(dir, e.Name())) {
			return false
		}
	}
	return os.Remove(dir) == nil
}
