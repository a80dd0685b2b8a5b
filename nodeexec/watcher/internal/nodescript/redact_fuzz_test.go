package nodescript

import (
	"fmt"
	"strings"
	"testing"
)

// redactShapes are the shapes FuzzRedact plants a secret in, one line each.
var redactShapes = []string{
	"password=%s",
	"DB_PASS: %s",
	`{"api_key": "%s", "user": "bob"}`,
	"mysqladmin --password %s status",
	"kubeadm join --token=%s",
	"Authorization: Bearer %s",
	"git clone https://bob:%s@git.example.com/repo.git",
	"machine h login u password %s",
	"mysql -u root -p%s shop",
	"curl -u bob:%s https://api.example.com",
	"Set-Cookie: sid=%s; Path=/",
	"X-Api-Key: %s",
	"    client-key-data: %s",
	"export GITHUB_TOKEN='%s'",
	"-----BEGIN PRIVATE KEY-----\n%s\n-----END PRIVATE KEY-----",
}

// FuzzRedact: Redact never panics, is idempotent, and never lets through a
// secret planted in one of the known shapes (redactShapes), whatever
// output surrounds it.
func FuzzRedact(f *testing.F) {
	f.Add("plain output", "hunter2", "exit 0", uint8(0))
	f.Add("-----BEGIN X-----", "Tr0ub4dor", "-----END X-----", uint8(3))
	f.Add("stringData:\n  password: |", "s3cr3t", "  more: 1", uint8(1))
	f.Add(`{"password":"a\"b`, "xyzzy", `"}`, uint8(2))
	f.Add("https://u:p@", "secret", "@host/x", uint8(6))
	f.Add("AKIAIOSFODNN7EXAMPLE "+jwt, "k3y", "ghp_x", uint8(14))
	f.Fuzz(func(t *testing.T, prefix, secret, suffix string, shape uint8) {
		if out := Redact(prefix + secret + suffix); Redact(out) != out {
			t.Fatalf("not idempotent:\nin   %q\nonce %q\ntwice %q", prefix+secret+suffix, out, Redact(out))
		}
		// The planted secret: letters and digits, with a digit and both cases.
		var b strings.Builder
		for _, r := range secret {
			if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				b.WriteRune(r)
			}
		}
		planted := "S3c" + b.String() + "t9Q"
		if strings.Contains(prefix, planted) || strings.Contains(suffix, planted) {
			return // the surrounding output has it too, outside any shape
		}
		in := prefix + "\n" + fmt.Sprintf(redactShapes[int(shape)%len(redactShapes)], planted) + "\n" + suffix
		out := Redact(in)
		if strings.Contains(out, planted) {
			t.Fatalf("secret %q kept:\nin  %q\nout %q", planted, in, out)
		}
		if Redact(out) != out {
			t.Fatalf("not idempotent:\nin   %q\nonce %q\ntwice %q", in, out, Redact(out))
		}
	})
}
