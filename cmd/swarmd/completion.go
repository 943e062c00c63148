package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/swarmd/swarmd/internal/cli"
)

// completionShells are the shells `swarmd completion` writes scripts for.
var completionShells = []string{"bash", "zsh", "fish"}

// newCompletionCommand replaces cobra's default completion command: the
// same scripts, for the shells swarmd's platform has, with install steps a
// person can follow and usage errors that exit 2.
func newCompletionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: `Print a script that completes swarmd's commands, flags and values in bash, zsh or fish.
Load it once per shell, or install it:

  bash  needs the bash-completion package:
          swarmd completion bash > /etc/bash_completion.d/swarmd
        or, for your user only, in ~/.bashrc:
          source <(swarmd completion bash)
  zsh   with compinit enabled (autoload -U compinit; compinit in ~/.zshrc):
          swarmd completion zsh > "${fpath[1]}/_swarmd"
  fish    swarmd completion fish > ~/.config/fish/completions/swarmd.fish

Start a new shell afterwards.`,
		ValidArgs:             completionShells,
		DisableFlagsInUseLine: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cli.Usagef("completion: name one shell: bash, zsh or fish")
			}
			return cli.Usage(cobra.OnlyValidArgs(cmd, args))
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			root, out := cmd.Root(), cmd.OutOrStdout()
			var err error
			switch args[0] {
			case "bash":
				err = root.GenBashCompletionV2(out, true)
			case "zsh":
				err = root.GenZshCompletion(out)
			case "fish":
				err = root.GenFishCompletion(out, true)
			}
			if err != nil {
				return fmt.Errorf("write %s completion: %w", args[0], err)
			}
			return nil
		},
	}
}
