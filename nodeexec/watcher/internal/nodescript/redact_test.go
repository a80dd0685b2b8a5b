package nodescript

import (
	"strings"
	"testing"
)

// Realistic secrets (the documented examples of each vendor where there is
// one, else random strings of the vendor's shape).
var (
	jwt        = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	hex64      = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	pemBody    = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\nMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\nNMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ"
	githubPAT  = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
	fineGrain  = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefgh"
	slackBot   = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	googleKey  = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
	stripeKey  = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	npmToken   = "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
	vaultToken = "hvs.CAESIJlU9JMYEhOPYv4KMrLFA5Xs0WtWwOgvGn1Ud5ChC2aR"
	sendgrid   = "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"
	openAI     = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
	anthropic  = "sk-ant-api03-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6hIj9k"
	ageKey     = "AGE-SECRET-KEY-1" + strings.Repeat("QZ7X", 14) + "QZ"
	gitlabPAT  = "glpat-xYz12AbC34dEf56GhI78"
)

// TestRedactShapes: every shape of secret the rule knows, each with a
// realistic value; the output keeps the context and loses the value.
func TestRedactShapes(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"key=value", "password=hunter2 next\nline", "password=[REDACTED]\nline"},
		{"yaml single-quoted", "DB_PASSWORD: 's3cr3t'", "DB_PASSWORD: '[REDACTED]'"},
		{"json", `{"api_key": "abc123", "user": "bob"}`, `{"api_key": "[REDACTED]", "user": "bob"}`},
		{"export", "export GITHUB_TOKEN=" + githubPAT + " y", "export GITHUB_TOKEN=[REDACTED]"},
		{"to the end of the line", "TOKEN=s3cr3t $$ x", "TOKEN=[REDACTED]"},
		{"DB_PASS", "DB_PASS=Tr0ub4dor&3", "DB_PASS=[REDACTED]"},
		{"PASSPHRASE", "PASSPHRASE=correct horse battery staple", "PASSPHRASE=[REDACTED]"},
		{"ENCRYPTION_KEY", "ENCRYPTION_KEY=Zm9vYmFyYmF6cXV4cXV1eA", "ENCRYPTION_KEY=[REDACTED]"},
		{"MYSQL_PWD", "MYSQL_PWD=hunter2", "MYSQL_PWD=[REDACTED]"},
		{"camelCase", "dbPass: hunter2", "dbPass: [REDACTED]"},
		{"java property", "-Djavax.net.ssl.keyStorePassword=changeit", "-Djavax.net.ssl.keyStorePassword=[REDACTED]"},
		{"connection string", "Server=db;User Id=sa;Password=Passw0rd!;Encrypt=true", "Server=db;User Id=sa;Password=[REDACTED]"},
		{"netrc one line", "machine api.example.com login bob password Hunter2!", "machine api.example.com login bob password [REDACTED]"},
		{"netrc lines", "machine h\n  login u\n  password Hunter2!\n", "machine h\n  login u\n  password [REDACTED]\n"},
		{"--password VALUE", "mysqladmin --user=root --password S3cr3tPw status", "mysqladmin --user=root --password [REDACTED] status"},
		{"--password=VALUE", "psql --password=S3cr3tPw -h db", "psql --password=[REDACTED]"},
		{"--token VALUE", "kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --v 5", "kubeadm join 10.0.0.1:6443 --token [REDACTED] --v 5"},
		{"mysql -pVALUE", "mysql -u root -pS3cr3tPw -h db1 shop", "mysql -u root -p[REDACTED] -h db1 shop"},
		{"curl -u", "curl -u bob:hunter2 https://api.example.com/v1", "curl -u bob:[REDACTED] https://api.example.com/v1"},
		{"JWT alone", "issued " + jwt + " for bob", "issued [REDACTED] for bob"},
		{"Cookie", "Cookie: session=8f2d1c; theme=dark", "Cookie: [REDACTED]"},
		{"Set-Cookie", "< Set-Cookie: sid=31d4d96e407aad42; Path=/; Secure; HttpOnly", "< Set-Cookie: [REDACTED]"},
		{"hex alone", "generated:\n9f86d081884c7d659a2feaa0c55ad015\n", "generated:\n[REDACTED]\n"},
		{"hex value", "key: 9f86d081884c7d659a2feaa0c55ad015", "key: [REDACTED]"},
		{"hex value, quoted", `{"value": "` + hex64 + `"}`, `{"value": "[REDACTED]"}`},
		{"PEM body without its header", pemBody + "\n-----END PRIVATE KEY-----\nnext", "[REDACTED]\nnext"},
		{"PEM block", "a\n-----BEGIN RSA PRIVATE KEY-----\n" + pemBody + "\n-----END RSA PRIVATE KEY-----\nb", "a\n[REDACTED]\nb"},
		{"private key header, cut", "a\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n", "a\n[REDACTED]"},
		{"PEM body lines alone", "cut\n" + strings.SplitN(pemBody, "\n", 2)[0] + "\nend", "cut\n[REDACTED]\nend"},
		{"URL password", "fetching https://bob:pa55@example.com/x", "fetching https://bob:[REDACTED]@example.com/x"},
		{"URL password with @", "git clone https://bob:p@ss@git.example.com/repo.git", "git clone https://bob:[REDACTED]@git.example.com/repo.git"},
		{"URL without user", "redis://:s3cr3t@cache:6379/0", "redis://:[REDACTED]@cache:6379/0"},
		{"DSN", "DATABASE_URL=postgres://app:s3cr3t@db:5432/app", "DATABASE_URL=postgres://app:[REDACTED]@db:5432/app"},
		{"escaped quote in JSON", `{"password":"a\"b","user":"bob"}`, `{"password":"[REDACTED]","user":"bob"}`},
		{"AWS access key", "found AKIAIOSFODNN7EXAMPLE in env", "found [REDACTED] in env"},
		{"token glued to a token", "AKIAIOSFODNN7EXAMPLEeyI6IkpXVCJ9.eyG4gRG9lIn0.53kyghp_x", "[REDACTED][REDACTED]"},
		{"AWS credentials file", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
			"aws_access_key_id = [REDACTED]\naws_secret_access_key = [REDACTED]"},
		{"GitHub token", "cloning with " + githubPAT + " now", "cloning with [REDACTED] now"},
		{"GitHub fine-grained token", "use " + fineGrain, "use [REDACTED]"},
		{"GitLab token", "glab auth " + gitlabPAT, "glab auth [REDACTED]"},
		{"Slack token", "bot " + slackBot + " ok", "bot [REDACTED] ok"},
		{"Slack webhook", "posting to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX", "posting to https://[REDACTED]"},
		{"Stripe key", "charging with " + stripeKey, "charging with [REDACTED]"},
		{"Google API key", "maps " + googleKey + " ok", "maps [REDACTED] ok"},
		{"npm token", "//registry.npmjs.org/:_authToken=" + npmToken, "//registry.npmjs.org/:_authToken=[REDACTED]"},
		{"Vault token", "vault login " + vaultToken, "vault login [REDACTED]"},
		{"SendGrid key", "mail via " + sendgrid, "mail via [REDACTED]"},
		{"OpenAI key", "model key " + openAI, "model key [REDACTED]"},
		{"Anthropic key", "model key " + anthropic, "model key [REDACTED]"},
		{"age key", ageKey, "[REDACTED]"},
		{"Authorization Bearer", "Authorization: Bearer " + jwt, "Authorization: [REDACTED]"},
		{"Authorization token", "Authorization: token " + githubPAT, "Authorization: [REDACTED]"},
		{"Authorization Basic", "> Authorization: Basic Ym9iOmh1bnRlcjI=", "> Authorization: [REDACTED]"},
		{"Proxy-Authorization", "Proxy-Authorization: Basic Ym9iOmh1bnRlcjI=", "Proxy-Authorization: [REDACTED]"},
		{"bearer in a command", "curl -H 'bearer abc.def'", "curl -H 'bearer [REDACTED]'"},
		{"X-Api-Key", "X-Api-Key: 8c3f0e1d9b7a", "X-Api-Key: [REDACTED]"},
		{"docker config auth", `{"auths": {"registry.example": {"auth": "Ym9iOmh1bnRlcjI="}}}`, `{"auths": {"registry.example": {"auth": "[REDACTED]"}}}`},
		{"kubeconfig key data", "    client-key-data: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t", "    client-key-data: [REDACTED]"},
		{"kubeconfig token", "    token: " + jwt, "    token: [REDACTED]"},
		{"yaml block", "stringData:\n  password: |\n    line1\n    line2\n  user: bob", "stringData:\n  password: [REDACTED]\n  user: bob"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Redact(c.in)
			if got != c.want {
				t.Errorf("Redact(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
			if again := Redact(got); again != got {
				t.Errorf("not idempotent: Redact(%q) = %q", got, again)
			}
		})
	}
}

// TestRedactKeepsOrdinaryOutput: what a node script commonly prints passes
// unchanged.
func TestRedactKeepsOrdinaryOutput(t *testing.T) {
	for _, in := range []string{
		"plain output\nexit 0\n",
		"kill -0 $$ and $(NODE_NAME)",
		"node-1.cluster.example.internal",
		"/var/lib/kubelet/pods/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/volumes/kubernetes.io~projected",
		"/usr/local/lib/python3/dist-packages/kubernetes_asyncio_client2",
		"Linux node-1 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) x86_64 GNU/Linux",
		"2026-11-27T08:31:54.123456789Z level=info msg=\"applied\" node=node-1",
		"image: registry.example/app@sha256:" + hex64,
		"  Image ID: docker.io/library/busybox@sha256:" + hex64,
		"digest: sha256:" + hex64,
		hex64 + "  /etc/hosts",
		"sha " + strings.Repeat("ab", 32) + " file",
		"commit 3b18e512dba79e4c8300dd08aeb37f8e728b8dad",
		"containerID: containerd://" + hex64,
		"machine-id: 9f86d081884c7d659a2feaa0c55ad015",
		"PWD=/root\nOLDPWD=/\nHOME=/root",
		"basic authentication required",
		"password is incorrect for user bob",
		"author: Jane Doe",
		"KEY_PATH=/etc/ssl/private/node.key",
		"token_file: /var/run/secrets/kubernetes.io/serviceaccount/token",
		"ssh -p 2222 node-1; docker run -p8080:80 nginx",
		strings.Repeat("-", 60) + "\n" + strings.Repeat("=", 60),
		"boot_id: 1c4b1c0e-5d8e-4f3a-9b2c-7d6e5f4a3b2c",
		"uptime 12:30:45 up 3 days, load average: 0.10, 0.20, 0.30",
	} {
		if got := Redact(in); got != in {
			t.Errorf("Redact(%q)\n got %q\nwant it unchanged", in, got)
		}
	}
}

// TestTruncateRedactsFirst: wherever truncate cuts a message, a secret's
// value never survives without its key (…WORD=hunter2).
func TestTruncateRedactsFirst(t *testing.T) {
	msg := "start of the message " + strings.Repeat("x", 40) + " PASSWORD=hunter2\nand the end of it, " + strings.Repeat("y", 40)
	for n := 1; n <= len(msg)+1; n++ {
		if got := Truncate(msg, n); strings.Contains(got, "hunter") || len(got) > max(n, len("…")) {
			t.Fatalf("Truncate(%d) = %q", n, got)
		}
	}
}
