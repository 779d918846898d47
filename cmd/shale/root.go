package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/version"
)

// newRootCmd builds the whole command tree, writing to stdout and stderr.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "shale",
		Short: "Shale runs RocksDB on disaggregated storage",
		Long: `Shale runs RocksDB on disaggregated storage: a primary owns each database
and serves a gRPC key-value API; the database lives in object storage
(s3:// or file://), fenced so that a replacement primary can take over
safely from any machine.`,
		Example: `  shale dev --data ./.shale-dev           # everything local, on a directory
  shale kv put hello world
  shale kv get hello
  shale kv status -o json
  source <(shale completion bash)         # shell completion`,
		Version: fmt.Sprintf("%s (RocksDB %s)", version.Version, rocksshim.RocksDBVersion()),
		// Errors are printed by run, once, with the right exit status.
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE:          runGroup,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("shale {{.Version}}\n")
	root.SetUsageTemplate(usageTemplate)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{err: err}
	})
	root.SetHelpCommand(newHelpCmd(root))
	root.AddCommand(
		newPrimaryCmd(),
		newSecondaryCmd(),
		newCompactorCmd(),
		newDevCmd(),
		newKVCmd(),
		newHealthCmd(),
		newAdminCmd(),
		newFenceCmd(),
		newBackupCmd(),
		newBenchCmd(),
		newVersionCmd(),
	)
	// pflag prints deprecation warnings to a flag set's output, which cobra
	// then copies to the command's output, stdout here: it would corrupt
	// `kv status --json | jq`. Send them to stderr directly.
	walk(root, func(c *cobra.Command) { c.Flags().SetOutput(stderr) })
	return root
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// runGroup runs a command that only groups subcommands (shale, shale kv,
// shale admin): reached without a known subcommand, it is bad usage. Cobra
// would print help and succeed for `shale kv frobnicate`.
func runGroup(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return &usageError{err: fmt.Errorf("%smissing command", commandPrefix(c)), full: true}
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default, set only on the root
	}
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageErrorf("%s", msg)
}

// commandPrefix is "kv put: " for `shale kv put`, "" for the root.
func commandPrefix(c *cobra.Command) string {
	if !c.HasParent() {
		return ""
	}
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ") + ": "
}

// exactArgs wants one positional argument per name (none if no names).
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		want := "no arguments"
		if len(names) > 0 {
			want = strings.Join(names, " ")
		}
		return usageErrorf("%swant %s, got %d argument(s)", commandPrefix(c), want, len(args))
	}
}

// optionalArg accepts at most one positional argument, named name.
func optionalArg(name string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) <= 1 {
			return nil
		}
		return usageErrorf("%swant at most one argument, [%s], got %d", commandPrefix(c), name, len(args))
	}
}

// newHelpCmd replaces cobra's help command, which prints the root's usage
// and succeeds for an unknown topic.
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  `Help prints the help of any command, e.g. "shale help kv scan".`,
		Args:  cobra.ArbitraryArgs,
		ValidArgsFunction: func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			c, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			c, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageErrorf("unknown help topic %q", strings.Join(args, " "))
			}
			c.InitDefaultHelpFlag()
			c.InitDefaultVersionFlag()
			return c.Help()
		},
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the Shale and RocksDB versions",
		Args:  exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintf(c.OutOrStdout(), "shale %s\n", c.Root().Version)
			return nil
		},
	}
}

// noFileCompletion stops shells from offering file names for flags whose
// values are not files.
func noFileCompletion(c *cobra.Command, names ...string) {
	for _, n := range names {
		c.RegisterFlagCompletionFunc(n, cobra.NoFileCompletions)
	}
}

// usageTemplate is cobra's default with one change: a command that groups
// subcommands shows only "shale kv [command]", not also its own use line
// (such commands are runnable only to report bad usage).
const usageTemplate = `Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}{{$cmds := .Commands}}{{if eq (len .Groups) 0}}

Available Commands:{{range $cmds}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{else}}{{range $group := .Groups}}

{{.Title}}{{range $cmds}}{{if (and (eq .GroupID $group.ID) (or .IsAvailableCommand (eq .Name "help")))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if not .AllChildCommandsHaveGroup}}

Additional Commands:{{range $cmds}}{{if (and (eq .GroupID "") (or .IsAvailableCommand (eq .Name "help")))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasHelpSubCommands}}

Additional help topics:{{range .Commands}}{{if .IsAdditionalHelpTopicCommand}}
  {{rpad .CommandPath .CommandPathPadding}} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`
