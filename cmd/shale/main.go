// Command shale is Shale's data-plane binary and CLI: it runs a primary
// (`shale primary`), the all-in-one local setup (`shale dev`), and talks to
// a running server (`shale kv ...`) or to a database in its object store
// (`shale admin ...`).
//
// The command tree is built with cobra (root.go); each subcommand lives in
// the file named after it, which wires its flags to the package that does
// the work wherever that is more than a call or two: internal/bench (bench),
// internal/kvload (kv load), internal/inspect (admin fence-status, admin
// tiers), primary, secondary and compactor.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/shale-rocks/shale/internal/cli"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK    = 0 // success
	exitError = 1 // the command ran and failed; one line on stderr
	exitUsage = 2 // bad usage: unknown command or flag, wrong arguments
)

// usageError is bad usage: exit status 2 and a usage hint.
type usageError struct {
	err error
	// full prints the command's whole usage instead of a one-line hint
	// (a command group run without a command).
	full bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error {
	return &usageError{err: fmt.Errorf(format, a...)}
}

// run executes the command line and returns the exit status. It builds a
// fresh command tree each time, so tests can call it repeatedly.
func run(args []string, stdout, stderr io.Writer) int {
	return runWithStdin(args, os.Stdin, stdout, stderr)
}

// runWithStdin is run with another standard input (for tests).
func runWithStdin(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if args == nil {
		args = []string{} // cobra reads os.Args when given nil
	}
	root := newRootCmd(stdout, stderr)
	root.SetIn(stdin)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	if cmd == nil {
		cmd = root
	}
	var ue *usageError
	if !errors.As(err, &ue) {
		fmt.Fprintf(stderr, "shale: %s\n", cli.OneLine(err.Error()))
		return exitError
	}
	if ue.full {
		fmt.Fprintf(stderr, "shale: %s\n\n%s", cli.OneLine(err.Error()), cmd.UsageString())
		return exitUsage
	}
	use := cmd.UseLine()
	if cmd.HasAvailableSubCommands() {
		use = cmd.CommandPath() + " [command]"
	}
	fmt.Fprintf(stderr, "shale: %s\nUsage: %s\nRun '%s --help' for more information.\n",
		cli.OneLine(err.Error()), use, cmd.CommandPath())
	return exitUsage
}
