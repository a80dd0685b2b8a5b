package nodescript

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkRedact measures Redact on what an output record keeps: 4 KiB of
// ordinary command output (the common case, where the literal guards skip
// most patterns), and 16 KiB (a successful run's whole log tail) with a
// secret in several shapes every few lines.
func BenchmarkRedact(b *testing.B) {
	var plain, secrets strings.Builder
	for i := 0; plain.Len() < 4<<10; i++ {
		fmt.Fprintf(&plain, "Nov 27 10:%02d:%02d node-%d kernel: [%d.%06d] eth0: link up, 10000 Mbps, /var/lib/kubelet/pods/%d ok\n", i%60, i%60, i, i, i*7, i)
	}
	shapes := []string{
		"DB_PASSWORD=hunter2-%d", "Authorization: Bearer abc.def.%d", "url=https://user:p@ss%d@db.example:5432/x",
		`{"token":"t-%d"}`, "AKIAIOSFODNN7EXAMPL%d", "--password s3cret%d",
	}
	for i := 0; secrets.Len() < 16<<10; i++ {
		fmt.Fprintf(&secrets, "line %d: applying sysctl net.ipv4.ip_forward=1 on node-%d\n", i, i)
		if i%4 == 0 {
			fmt.Fprintf(&secrets, shapes[i/4%len(shapes)]+"\n", i%10)
		}
	}
	for _, c := range []struct{ name, in string }{{"plain4KiB", plain.String()}, {"secrets16KiB", secrets.String()}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.in)))
			for b.Loop() {
				Redact(c.in)
			}
		})
	}
}
