package nodescript

import (
	"regexp"
	"strings"
	"unicode"
)

// Redacted replaces what Redact removes.
const Redacted = "[REDACTED]"

// The patterns of Redact, in the order it applies them. The token shapes
// are taken from gitleaks' published default rules (config/gitleaks.toml,
// rules aws-access-token, github-pat, github-fine-grained-pat,
// github-oauth, github-app-token, github-refresh-token, gitlab-pat,
// slack-bot-token, slack-user-token, slack-app-token,
// slack-config-access-token, slack-webhook-url, stripe-access-token,
// gcp-api-key, npm-access-token, vault-service-token, vault-batch-token,
// sendgrid-api-token, openai-api-key, anthropic-api-key, age-secret-key,
// jwt, private-key, curl-auth-user); its generic-api-key rule is our
// key-name rule (sensitiveName), without its entropy threshold: a value is
// removed whatever it looks like. gitleaks itself is not linked: its
// detector as a library (v8.30.1) brings 56 more modules (viper and its
// global state, archive decoders), 7 MB of binary, and 27 MB of resident
// memory to compile its ~220 rules, which the watcher would carry for a
// few KiB of output per run.
var (
	// A PEM block, to its END line or, cut, to the end of the text.
	redactPEM = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|\z)`)
	// A PEM body whose BEGIN line was cut off: the base64 lines (the first
	// maybe partial) right before an END line, and the END line.
	redactPEMTail = regexp.MustCompile(`(?m)(?:^[A-Za-z0-9+/=]*\r?\n)*^[A-Za-z0-9+/=]*-----END [A-Z0-9 ]+-----`)
	// Tokens recognisable by their own shape, wherever they are.
	redactToken = regexp.MustCompile(`\b(?:` +
		`(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}` + // AWS access key ID
		`|gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}` + // GitHub
		`|glpat-[A-Za-z0-9_-]{20,}` + // GitLab
		`|xox(?:e\.xox)?[abeoprs]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,}` + // Slack
		`|(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}` + // Stripe
		`|AIza[A-Za-z0-9_-]{35}` + // Google API key
		`|npm_[A-Za-z0-9]{36}` + // npm
		`|hv[sb]\.[A-Za-z0-9_-]{24,}` + // Vault
		`|SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}` + // SendGrid
		`|sk-(?:proj|svcacct|admin|ant-api\d\d|ant-admin\d\d)-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}` + // OpenAI, Anthropic
		`|AGE-SECRET-KEY-1[A-Z0-9]{58}` + // age
		`|ey[A-Za-z0-9_-]{10,}\.ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*` + // JWT
		`)|hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{20,}`)
	// The credential after "Bearer" or "Basic".
	redactBearer = regexp.MustCompile(`(?i)\b(?:bearer|basic)[ \t]+([A-Za-z0-9._~+/=-]+)`)
	// The password of a URL's user information: up to the last "@" before
	// the host, so a password may hold "@".
	redactURL = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s/]*@`)
	// curl's -u/--user USER:PASSWORD.
	redactCurlUser = regexp.MustCompile(`\bcurl\b[^\n]*?[ \t](?:-u|--user)(?:[ \t]+|=)["']?[^\s:"']*:([^\s"']+)`)
	// MySQL's and MariaDB's -pPASSWORD (no space: -p VALUE is a prompt and
	// a database name).
	redactMySQL = regexp.MustCompile(`\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mariadb|mariadb-dump)\b[^\n]*?[ \t]-p([^\s-][^\s]*)`)
	// A .netrc "password VALUE": after "machine HOST", "login USER",
	// "account NAME" or "default", or alone on its line.
	redactNetrc     = regexp.MustCompile(`(?i)(?:\b(?:machine|login|account)[ \t]+\S+[ \t]+|\bdefault[ \t]+)(?:password|passwd)[ \t]+(\S+)`)
	redactNetrcLine = regexp.MustCompile(`(?im)^[ \t]*(?:password|passwd)[ \t]+(\S+)[ \t]*\r?$`)
	// A flag and its value, "--NAME VALUE" (or "-NAME VALUE"): the value is
	// removed when NAME is sensitive (sensitiveName).
	redactFlag = regexp.MustCompile(`(?:^|[\s"'])--?([A-Za-z][A-Za-z0-9_.-]*)[ \t]+("(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s"'-][^\s"']*)`)
	// The name and separator of a "NAME=VALUE" or "NAME: VALUE" pair (also
	// JSON's "NAME": VALUE): the value is removed when NAME is sensitive.
	redactPair = regexp.MustCompile(`([A-Za-z0-9_.-]+)["']?[ \t]*[:=][ \t]*`)
	// A run of 32 or more hex digits as a value (after "=" or ":").
	redactHexValue = regexp.MustCompile(`([A-Za-z0-9_.-]*)(["']?[ \t]*[:=][ \t]*["']?)([0-9a-fA-F]{32,})\b`)
	// A line that is only a run of 32 or more hex digits or 40 or more
	// base64 characters.
	redactLine = regexp.MustCompile(`(?m)^[ \t]*(?:[0-9a-fA-F]{32,}|[A-Za-z0-9+/_-]{40,}={0,2})[ \t]*\r?$`)
)

// Redact is the rule applied to output before an output record keeps it,
// and to a node state's free text before it is cut. It removes:
//   - a PEM block (-----BEGIN ...----- to -----END ...-----, or to the end)
//     whole, and a PEM body cut from its BEGIN line (the base64 lines
//     before an END line);
//   - tokens known by their shape, wherever they are (from gitleaks'
//     default rules): AWS access key IDs (AKIA...), GitHub (ghp_, gho_,
//     ghu_, ghs_, ghr_, github_pat_), GitLab (glpat-), Slack (xox?-, xapp-,
//     hooks.slack.com URLs), Stripe, Google API keys (AIza), npm, Vault
//     (hvs., hvb.), SendGrid, OpenAI and Anthropic keys, age secret keys,
//     and JWTs (eyJ....eyJ....sig);
//   - the credential after "Bearer" or "Basic" (a word with a digit, mixed
//     case or one of ._~+/=-: "basic authentication" is kept);
//   - the password of a URL's user information (scheme://user:PASSWORD@host,
//     the password up to the last "@");
//   - curl's -u/--user USER:PASSWORD password, MySQL's and MariaDB's
//     -pPASSWORD, and a .netrc "password VALUE";
//   - the value of a flag (--NAME VALUE, --NAME=VALUE) or a pair
//     (NAME=VALUE, NAME: VALUE, "NAME": "VALUE", HTTP headers) whose NAME is
//     sensitive: NAME contains password, passwd, passphrase, passcode,
//     secret, token, credential, apikey, privatekey or accesskey, or one of
//     its words (split at "_", "-", ".", and lower-to-upper case changes) is
//     pass, pwd, pw, auth, authorization, cookie, creds, dsn, or key(s) with
//     another word (ENCRYPTION_KEY, X-Api-Key, client-key-data), unless its
//     last word says the value is not the secret (file, path, dir, name,
//     type, size, length, bits, alg, algorithm, format, count, ttl, expiry,
//     expires, fingerprint, usage); the shell's PWD and OLDPWD are not. A
//     quoted value is removed up to its closing quote (escaped quotes
//     included) and the quotes kept; an unquoted one to the end of the line;
//   - a run of 32 or more hex digits as a value (after "=" or ":"), unless
//     its key names a digest (sha1, sha256, sha512, md5, digest, hash,
//     checksum, commit, id...): image digests (sha256:...), commits and IDs
//     are kept, since they identify content rather than grant access;
//   - a line that is only a run of 32 or more hex digits, or of 40 or more
//     base64 characters with at least two of upper case, lower case and
//     digits (a key or token printed alone, or a PEM body line), unless it
//     starts with "/" (a path).
//
// Ordinary output — host names, paths, kernel versions, timestamps,
// sha256 image digests, a checksum followed by its file name — is kept.
//
// The rule catches common shapes only: the watcher never reads Secrets and
// cannot know their values (spec.secretEnv), so a script that prints a
// secret in another shape must not set spec.recordOutput. Redact is
// idempotent and a pure function: a replacement can put a word boundary
// where there was none (AKIA...EXAMPLEeyJ... becomes [REDACTED]eyJ..., and
// the JWT now starts a word), so the rules are applied again until the text
// stops changing (at most redactPasses times; text without secrets takes
// one pass).
func Redact(s string) string {
	for i := 0; i < redactPasses; i++ {
		r := redactOnce(s)
		if r == s {
			return r
		}
		s = r
	}
	return s
}

// redactPasses bounds Redact's passes. Each pass that changes the text
// turns some of it into Redacted; in practice the second pass is the last.
const redactPasses = 8

// redactOnce applies every rule of Redact once.
func redactOnce(s string) string {
	// Literal guards skip the patterns that cannot match (most output).
	lower := strings.ToLower(s)
	if strings.Contains(s, "-----") {
		s = redactPEM.ReplaceAllString(s, Redacted)
		s = redactPEMTail.ReplaceAllString(s, Redacted)
	}
	s = redactToken.ReplaceAllString(s, Redacted)
	if strings.Contains(lower, "bearer") || strings.Contains(lower, "basic") {
		s = replaceGroup(s, redactBearer, 1, func(m []int) bool { return credentialLike(s[m[2]:m[3]]) })
	}
	if strings.Contains(s, "://") {
		s = redactURL.ReplaceAllString(s, "${1}"+Redacted+"@")
	}
	if strings.Contains(s, "curl") {
		s = replaceGroup(s, redactCurlUser, 1, nil)
	}
	if strings.Contains(s, "mysql") || strings.Contains(s, "mariadb") {
		s = replaceGroup(s, redactMySQL, 1, nil)
	}
	if strings.Contains(lower, "passw") {
		s = replaceGroup(s, redactNetrc, 1, nil)
		s = replaceGroup(s, redactNetrcLine, 1, nil)
	}
	s = replaceGroup(s, redactFlag, 2, func(m []int) bool { return sensitiveName(s[m[2]:m[3]]) })
	s = redactPairs(s)
	s = replaceGroup(s, redactHexValue, 3, func(m []int) bool { return !digestName(s[m[2]:m[3]]) })
	return replaceGroup(s, redactLine, 0, func(m []int) bool { return keyLine(strings.TrimSpace(s[m[0]:m[1]])) })
}

// replaceGroup replaces group g of every match of re in s with Redacted
// (keeping the quotes of a quoted value), for the matches keep accepts (all
// when keep is nil; keep gets the submatch indexes into s).
func replaceGroup(s string, re *regexp.Regexp, g int, keep func(m []int) bool) string {
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		start, end := m[2*g], m[2*g+1]
		if start < 0 || (keep != nil && !keep(m)) {
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(quoted(s[start:end]))
		last = end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// quoted is Redacted in v's quotes when v is quoted.
func quoted(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[:1] + Redacted + v[:1]
	}
	return Redacted
}

// redactPairs removes the values of the sensitive pairs in s: a quoted
// value to its closing quote on the line (backslash escapes skipped), an
// unquoted one (or one whose quote is not closed) to the end of the line.
func redactPairs(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range redactPair.FindAllStringSubmatchIndex(s, -1) {
		if m[0] < last || !sensitiveName(s[m[2]:m[3]]) {
			continue // inside a value removed already, or not a secret's name
		}
		start := m[1]
		end := strings.IndexByte(s[start:], '\n')
		if end < 0 {
			end = len(s)
		} else {
			end += start
		}
		if end > start && s[end-1] == '\r' {
			end--
		}
		if start == end {
			continue // no value
		}
		repl := Redacted
		if q := s[start]; q == '"' || q == '\'' {
			if i := closingQuote(s[start+1:end], q); i >= 0 {
				end = start + 1 + i + 1
				repl = string(q) + Redacted + string(q)
			}
		} else if yamlBlock.MatchString(s[start:end]) {
			end = blockEnd(s, m[2], end)
		}
		b.WriteString(s[last:start])
		b.WriteString(repl)
		last = end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// yamlBlock is the indicator of a YAML block scalar (|, >, with a chomping
// or indentation indicator): its value is on the lines that follow.
var yamlBlock = regexp.MustCompile(`^[|>][-+0-9]{0,2}[ \t]*$`)

// blockEnd is the end of the YAML block scalar whose key starts at key and
// whose indicator line ends at end: the following lines that are blank or
// indented more than the key's line.
func blockEnd(s string, key, end int) int {
	lineStart := strings.LastIndexByte(s[:key], '\n') + 1
	indent := len(s[lineStart:]) - len(strings.TrimLeft(s[lineStart:], " \t"))
	for end < len(s) {
		next := s[end+1:] // s[end] is the newline
		line, _, _ := strings.Cut(next, "\n")
		if strings.TrimSpace(line) != "" && len(line)-len(strings.TrimLeft(line, " \t")) <= indent {
			break
		}
		end += 1 + len(line)
	}
	return end
}

// closingQuote is the index in v of the first q not escaped by a
// backslash (a double quote only; single quotes have no escapes), or -1.
func closingQuote(v string, q byte) int {
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '\\' && q == '"':
			i++
		case v[i] == q:
			return i
		}
	}
	return -1
}

// Words of a key name that make it a secret's name wherever they are
// (strongSubstrings) or as a whole word (sensitiveWords); a last word that
// says the value is about the secret, not the secret (notSecretLast).
var (
	strongSubstrings = []string{"password", "passwd", "passphrase", "passcode", "secret", "token", "credential", "apikey", "privatekey", "accesskey"}
	sensitiveWords   = map[string]bool{"pass": true, "pwd": true, "pw": true, "auth": true, "authorization": true, "cookie": true, "creds": true, "dsn": true}
	notSecretLast    = map[string]bool{"file": true, "path": true, "dir": true, "name": true, "type": true, "size": true, "length": true, "bits": true,
		"alg": true, "algorithm": true, "format": true, "count": true, "ttl": true, "expiry": true, "expires": true, "fingerprint": true, "usage": true}
	digestWords = map[string]bool{"sha": true, "sha1": true, "sha224": true, "sha256": true, "sha384": true, "sha512": true, "md5": true,
		"digest": true, "hash": true, "checksum": true, "sum": true, "commit": true, "revision": true, "rev": true, "id": true, "uuid": true}
)

// sensitiveName reports whether a key or flag named name holds a secret
// (see Redact).
func sensitiveName(name string) bool {
	words := nameWords(name)
	if len(words) == 0 || notSecretLast[words[len(words)-1]] {
		return false
	}
	if n := strings.ToUpper(strings.Trim(name, "-")); n == "PWD" || n == "OLDPWD" {
		return false
	}
	joined := strings.Join(words, "")
	for _, s := range strongSubstrings {
		if strings.Contains(joined, s) {
			return true
		}
	}
	for _, w := range words {
		if sensitiveWords[w] || (w == "key" || w == "keys") && len(words) > 1 {
			return true
		}
	}
	return false
}

// digestName reports whether a key named name holds a digest or an ID
// (its last word is one of digestWords).
func digestName(name string) bool {
	words := nameWords(name)
	return len(words) > 0 && digestWords[words[len(words)-1]]
}

// nameWords splits a key name into lower-case words at "_", "-", ".", other
// non-alphanumerics, and changes from lower to upper case.
func nameWords(name string) []string {
	var words []string
	var cur []rune
	prevLower := false
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range name {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
			prevLower = false
			continue
		case unicode.IsUpper(r) && prevLower:
			flush()
		}
		cur = append(cur, r)
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
	}
	flush()
	return words
}

// credentialLike reports whether v, after "Bearer" or "Basic", is a
// credential rather than a word: it has a digit, both cases, or one of
// ._~+/=-.
func credentialLike(v string) bool {
	return strings.ContainsAny(v, "0123456789._~+/=-") || strings.ToLower(v) != v && strings.ToUpper(v) != v
}

// keyLine reports whether line, a run of hex or base64 characters alone on
// its line, is a key: hex of 32 or more digits with both digits and
// letters, or base64 of 40 or more with at least two of upper case, lower
// case and digits; never a path (a leading "/").
func keyLine(line string) bool {
	if strings.HasPrefix(line, "/") {
		return false
	}
	var upper, lower, digit bool
	for _, r := range line {
		switch {
		case r >= 'A' && r <= 'Z':
			upper = true
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= '0' && r <= '9':
			digit = true
		}
	}
	classes := 0
	for _, b := range []bool{upper, lower, digit} {
		if b {
			classes++
		}
	}
	return classes >= 2
}
