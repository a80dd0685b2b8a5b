package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// Completion scripts. Each asks the program itself for the candidates with
// urfave/cli's --generate-bash-completion protocol: the words typed so far,
// then the flag; it prints the subcommands (or, after a "-", the flags) that
// fit, one a line. PROG is replaced by the program's name.
const (
	bashCompletion = `# bash completion for PROG; load with: source <(PROG completion bash)
_PROGID_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  local words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  local opts
  if [[ "$cur" == -* ]]; then
    opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  local IFS=$'\n'
  COMPREPLY=($(compgen -W "${opts}" -- "$cur"))
}
complete -o bashdefault -o default -F _PROGID_complete PROG
`
	zshCompletion = `#compdef PROG
# zsh completion for PROG; load with: source <(PROG completion zsh)
_PROGID_complete() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _PROGID_complete PROG
`
)

func completionCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		UsageText: "completion bash|zsh|fish",
		Description: "Load it in the current shell or from your shell's startup file:\n" +
			"  bash: source <(nodeexec completion bash)\n" +
			"  zsh:  source <(nodeexec completion zsh)\n" +
			"  fish: nodeexec completion fish | source",
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("give one shell: bash, zsh or fish (got %d arguments)", c.NArg())
			}
			script, err := completionScript(c.App, c.Args().First())
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(streams.Out, script)
			return err
		},
	}
}

// completionScript returns the completion script of app for shell.
func completionScript(app *ucli.App, shell string) (string, error) {
	prog := app.Name
	id := strings.NewReplacer("-", "_", " ", "_", ".", "_").Replace(prog)
	fill := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, "PROGID", id), "PROG", prog)
	}
	switch shell {
	case "bash":
		return fill(bashCompletion), nil
	case "zsh":
		return fill(zshCompletion), nil
	case "fish":
		s, err := app.ToFishCompletion()
		if err != nil {
			return "", fmt.Errorf("fish completion: %w", err)
		}
		return s, nil
	}
	return "", fmt.Errorf("unknown shell %q: want bash, zsh or fish", shell)
}
