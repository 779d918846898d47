// Command shale is Shale's data-plane binary and CLI: it runs a primary
// (`shale primary`), the all-in-one local setup (`shale dev`), and talks to
// a running server (`shale kv ...`).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/version"
)

const usage = `Shale runs RocksDB on disaggregated storage.

Usage:
  shale primary --db URL [flags]     serve a database read-write over gRPC
  shale dev --data DIR [flags]       run everything locally on a directory
  shale kv COMMAND [flags] [args]    talk to a running server (shale kv --help)
  shale admin fence-status --db URL  show who owns a database
  shale version                      print versions

Run "shale COMMAND --help" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks an error already reported with usage (exit status 2).
var errUsage = errors.New("usage")

// run executes the command line and returns the exit status: 0 success,
// 1 failure, 2 bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "primary":
		err = runPrimary(args[1:], stderr)
	case "dev":
		err = runDev(args[1:], stdout, stderr)
	case "kv":
		err = runKV(args[1:], stdout, stderr)
	case "admin":
		err = runAdmin(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "shale %s (RocksDB %s)\n", version.Version, rocksshim.RocksDBVersion())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "shale: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	fmt.Fprintf(stderr, "shale: %s\n", oneLine(err.Error()))
	return 1
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// newFlags returns a flag set that reports errors with its usage and
// leaves exiting to run.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags that may come before, between or after positional
// arguments (`kv put k v --sync=false`), and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil // everything after -- is positional
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// wantArgs checks the number of positional arguments.
func wantArgs(fs *flag.FlagSet, pos []string, names ...string) error {
	if len(pos) != len(names) {
		want := "no arguments"
		if len(names) > 0 {
			want = strings.Join(names, " ")
		}
		fmt.Fprintf(fs.Output(), "%s: want %s, got %d argument(s)\n", fs.Name(), want, len(pos))
		fs.Usage()
		return errUsage
	}
	return nil
}

// sizeFlag is a byte size accepting plain numbers or KiB/MiB/GiB suffixes.
type sizeFlag struct{ n *int }

func (s sizeFlag) String() string {
	if s.n == nil {
		return "0"
	}
	return formatSize(*s.n)
}

func (s sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s.n = n
	return nil
}

func parseSize(v string) (int, error) {
	mult := 1
	num := v
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(v, u.suffix) {
			num, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a number with KiB, MiB or GiB)", v)
	}
	return n * mult, nil
}

func formatSize(n int) string {
	switch {
	case n > 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.Itoa(n)
}
