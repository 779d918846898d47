package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/kvload"
)

// The client of `shale kv load` is internal/kvload; this file wires its
// flags and prints its summary.

func newKVLoadCmd(kc *kvClient) *cobra.Command {
	var format string
	opts := kvload.Options{Input: "stdin", Size: -1}
	c := &cobra.Command{
		Use:   "load [FILE|-]",
		Short: "Bulk-load key-value pairs from a file or stdin",
		Long: `Load puts the pairs of FILE (or stdin) into the database: key<TAB>value
lines, as ` + "`shale kv scan`" + ` prints them, or JSON lines {"key": ..., "value": ...}
(keyBase64/valueBase64 for bytes in base64). --format auto decides from the
first line. Empty lines are skipped; a later pair of the same key wins.

Pairs stream to the server in batches of --batch-size (the Load RPC), each
applied atomically as it arrives, and with --sync (the default) the whole
load is made durable once at the end. With --sst, pairs are instead sorted
in chunks of --sst-size, written to SST files in --tmp-dir and ingested
(IngestExternalFile, the Ingest RPC): the fastest way to load a lot of
data, each chunk visible and durable at once.

A malformed line stops the load with its line number; the pairs before it
are loaded (durably with --sync). Loading the same pairs again is harmless,
so fix the line and run the load again. If the server fails or loses
ownership of the database mid-load, the pairs it had applied may or may not
stay: the load reports "outcome unknown" with how many it applied; read
them back or run the load again. --timeout does not bound a load.
A progress bar goes to stderr when it is a terminal, otherwise a line every
--progress-interval.`,
		Example: `  shale kv load pairs.tsv
  shale kv scan --prefix user/ > users.tsv && shale kv --addr other:7070 load users.tsv
  zcat dump.jsonl.gz | shale kv load --format json -
  shale kv load --sst --sst-size 512MiB big.tsv -o json`,
		Args: optionalArg("FILE|-"),
	}
	output := addOutputFlags(c)
	fs := c.Flags()
	fs.StringVar(&format, "format", "auto", "input `format`: auto, tsv (key<TAB>value lines) or json (JSON lines)")
	fs.Var(newSize(&opts.BatchBytes, 1<<20), "batch-size", "bytes of keys and values per batch sent (under the server's --max-batch-size)")
	fs.BoolVar(&opts.Sync, "sync", true, "make the load durable before reporting success")
	fs.BoolVar(&opts.SST, "sst", false, "build SST files locally and ingest them instead of streaming puts")
	fs.Var(newSize(&opts.SSTBytes, 256<<20), "sst-size", "with --sst: bytes of pairs sorted in memory and written per SST file")
	fs.StringVar(&opts.TmpDir, "tmp-dir", os.TempDir(), "with --sst: `directory` for the SST files being built")
	fs.Var(newDuration(&opts.ProgressEvery, 10*time.Second), "progress-interval", "how often to print a progress line when stderr is not a terminal")
	c.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]cobra.Completion{"auto", "tsv", "json"}, cobra.ShellCompDirectiveNoFileComp))
	c.MarkFlagDirname("tmp-dir")
	noFileCompletion(c, "batch-size", "sst-size", "progress-interval")
	c.RunE = func(c *cobra.Command, args []string) error {
		format, err := kvload.ParseFormat(format)
		if err != nil {
			return usageErrorf("kv load: --format: %v", err)
		}
		if err := opts.Validate(); err != nil {
			return usageErrorf("%s", err)
		}
		in := io.Reader(c.InOrStdin())
		if len(args) == 1 && args[0] != "-" {
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("kv load: %w", err)
			}
			defer f.Close()
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				opts.Size = fi.Size()
			}
			in, opts.Input = f, args[0]
		}
		conn, err := kc.dial()
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, stop := signalContext()
		defer stop()
		opts.Stderr, opts.Describe = c.ErrOrStderr(), kc.describe
		sum, err := kvload.Load(ctx, kvv1.NewKVClient(conn), kvload.NewReader(in, format), opts)
		if sum != nil {
			if output() == outputJSON {
				if perr := printJSON(c.OutOrStdout(), sum); perr != nil && err == nil {
					err = perr
				}
			} else {
				sum.Print(c.OutOrStdout())
			}
		}
		return err
	}
	return c
}

// describe turns a gRPC error into the one line kv commands print.
func (kc *kvClient) describe(err error) error {
	if derr := describeConnError(kc.addr, kc.security, err); derr != nil {
		return derr
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("cannot reach a Shale server at %s, or it failed: %s", kc.addr, st.Message())
	}
	return fmt.Errorf("%s: %s", st.Code(), st.Message())
}
