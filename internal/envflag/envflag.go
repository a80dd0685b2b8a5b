// Package envflag is the -e/--env KEY=VALUE flag shared by nodeexec's
// commands and its agent: repeatable, each value kept whole (never split on
// commas, as kubectl run --env), with the checks that name the flag.
package envflag

import (
	"encoding/json"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// envList is the value of -e/--env: one KEY=VALUE per use, kept byte for
// byte. Unlike urfave/cli's string slices it never splits on commas nor
// trims spaces: -e OPTS=a=1,b=2 is one variable (as kubectl run --env).
type envList []string

// envListPrefix marks envList's serialised form: urfave/cli copies a flag's
// value between its names (-e, --env) with String and Set.
const envListPrefix = "\x00envlist:"

func (e *envList) Set(s string) error {
	if rest, ok := strings.CutPrefix(s, envListPrefix); ok {
		return json.Unmarshal([]byte(rest), (*[]string)(e))
	}
	*e = append(*e, s)
	return nil
}

func (e *envList) String() string {
	if e == nil || len(*e) == 0 {
		return ""
	}
	b, _ := json.Marshal([]string(*e))
	return envListPrefix + string(b)
}

// Flag is -e/--env KEY=VALUE, repeatable, never split (see envList).
func Flag(usage string) ucli.Flag {
	return &ucli.GenericFlag{Name: "env", Aliases: []string{"e"}, Value: &envList{}, Usage: usage}
}

// Values returns the -e values in the order given.
func Values(c *ucli.Context) []string {
	if v, ok := c.Generic("env").(*envList); ok && v != nil {
		return *v
	}
	return nil
}

// Parse reads -e values: KEY=VALUE, split at the first '=' only; the
// value may hold anything but NUL (commas, '=', spaces, newlines). A later
// KEY replaces an earlier one.
func Parse(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return nil, fmt.Errorf("--env %q: want KEY=VALUE, e.g. -e DEBUG=1 (repeat -e for several variables)", kv)
		case strings.ContainsRune(kv, 0):
			return nil, fmt.Errorf("--env %q: contains a NUL byte, which no environment variable can hold", kv)
		}
		env[k] = v
	}
	return env, nil
}
