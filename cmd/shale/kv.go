package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/auth"
)

// kvClient holds the flags every kv command shares (--addr, --timeout and
// the connection's security flags).
type kvClient struct {
	addr    string
	timeout time.Duration
	sec     *clientFlags // nil: plaintext

	resolved bool
	opts     []grpc.DialOption
	security auth.ClientConfig
}

// dial connects to the server at kc.addr with the security flags (and a
// client config file's settings) resolved once.
func (kc *kvClient) dial() (*grpc.ClientConn, error) {
	if !kc.resolved {
		if kc.sec == nil {
			kc.opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		} else {
			var err error
			if kc.opts, kc.security, err = kc.sec.dialOptions(&kc.addr); err != nil {
				return nil, err
			}
		}
		kc.resolved = true
	}
	opts := append(kc.opts[:len(kc.opts):len(kc.opts)], grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	conn, err := grpc.NewClient(kc.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("--addr %s: %w", kc.addr, err)
	}
	return conn, nil
}

func newKVCmd() *cobra.Command {
	kc := &kvClient{}
	c := &cobra.Command{
		Use:   "kv",
		Short: "Talk to a running server: put, get, delete, scan, load, flush, compact, status, set-tiering",
		Long: `Kv talks to a running Shale server (shale primary or shale dev) over gRPC.

Flags may appear anywhere on the line; "--" ends them, for keys that start
with "-". Exit status: 0 success, 1 failure (one line on stderr), 2 bad usage.

A server with TLS wants --tls-ca (its CA) and an identity: a client
certificate (--tls-cert, --tls-key) or a bearer token (--token-file). A
client config file (--config, default $SHALE_CONFIG) can name them and the
address once, in YAML:

  addr: db.example:7070
  tlsCA: ca.crt            # relative to the file's directory
  tlsCert: tls.crt
  tlsKey: tls.key
  # tokenFile: token       # instead of tlsCert and tlsKey
  # serverName: orders-rw  # verify the server as this name`,
		Example: `  shale kv put hello world
  shale kv get hello
  shale kv --addr 10.0.0.7:7070 scan --prefix user/ --limit 10
  shale kv put -- -key-with-dash value
  shale kv status -o json
  shale kv --addr db.example:7070 --tls-ca ca.crt --tls-cert tls.crt --tls-key tls.key get hello
  SHALE_CONFIG=~/.config/shale/orders.yaml shale kv get hello   # addr and TLS files from a file`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroup,
	}
	c.PersistentFlags().StringVar(&kc.addr, "addr", "127.0.0.1:7070", "address of the server, `HOST:PORT`")
	c.PersistentFlags().Var(newDuration(&kc.timeout, 30*time.Second), "timeout", "give up after this long")
	kc.sec = addClientFlags(c, c.PersistentFlags(), "addr")
	noFileCompletion(c, "addr", "timeout")
	c.AddCommand(
		newKVPutCmd(kc),
		newKVGetCmd(kc),
		newKVDeleteCmd(kc),
		newKVScanCmd(kc),
		newKVFlushCmd(kc),
		newKVCompactCmd(kc),
		newKVStatusCmd(kc),
		newKVLoadCmd(kc),
		newKVSetTieringCmd(kc),
	)
	return c
}

func newKVSetTieringCmd(kc *kvClient) *cobra.Command {
	return &cobra.Command{
		Use:   "set-tiering COLD-AFTER",
		Short: "Change how old data must be to move to the cold tier, on a running primary",
		Long: `Set-tiering changes a running primary's --cold-after without a restart
(docs/tiering.md): data older than COLD-AFTER (a duration of at least 1s,
such as 24h) moves to the cold tier from now on; "off" (or 0) stops moving
data there (cold tables stay). The primary must have a cold tier
(--cold-db). It needs the admin role. The setting lasts until the primary
stops: pass --cold-after to the next one (the operator applies
spec.tiering.coldAfter by itself).`,
		Example: `  shale kv set-tiering 24h
  shale kv set-tiering off`,
		Args: exactArgs("COLD-AFTER"),
		RunE: func(c *cobra.Command, args []string) error {
			var d time.Duration
			if args[0] != "off" {
				var err error
				if d, err = time.ParseDuration(args[0]); err != nil || d < 0 || d > 0 && d < time.Second {
					return usageErrorf("COLD-AFTER %q: want a duration of at least 1s, such as 24h, or off", args[0])
				}
			}
			return kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
				r, err := kv.SetTiering(ctx, &kvv1.SetTieringRequest{ColdAfter: durationpb.New(d)})
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "cold-after: %s (was %s)\n", coldAfterString(r.GetColdAfter().AsDuration()), coldAfterString(r.GetPrevious().AsDuration()))
				return nil
			})
		},
	}
}

func coldAfterString(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return d.String()
}

func newKVPutCmd(kc *kvClient) *cobra.Command {
	var sync bool
	c := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Store VALUE under KEY (durable unless --sync=false)",
		Args:  exactArgs("KEY", "VALUE"),
		RunE: func(_ *cobra.Command, args []string) error {
			return kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
				_, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(args[0]), Value: []byte(args[1]), Sync: sync})
				return err
			})
		},
	}
	c.Flags().BoolVar(&sync, "sync", true, "wait until the write is durable")
	return c
}

func newKVGetCmd(kc *kvClient) *cobra.Command {
	c := &cobra.Command{
		Use:   "get KEY",
		Short: "Print KEY's value (exit 1 if it does not exist)",
		Long: `Get prints KEY's value followed by a newline, or with -o json
{"key": ..., "value": ...}. A key or value that is not valid UTF-8 is
given as keyBase64 or valueBase64 instead. A missing key is an error
(exit status 1).`,
		Args: exactArgs("KEY"),
	}
	output := addOutputFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
			r, err := kv.Get(ctx, &kvv1.GetRequest{Key: []byte(args[0])})
			if status.Code(err) == codes.NotFound {
				return fmt.Errorf("key %q not found", args[0])
			}
			if err != nil {
				return err
			}
			w := c.OutOrStdout()
			if output() == outputJSON {
				return printJSON(w, newPairJSON([]byte(args[0]), r.Value, true))
			}
			w.Write(r.Value)
			_, err = fmt.Fprintln(w)
			return err
		})
	}
	return c
}

func newKVDeleteCmd(kc *kvClient) *cobra.Command {
	var sync bool
	c := &cobra.Command{
		Use:   "delete KEY",
		Short: "Remove KEY (durable unless --sync=false)",
		Args:  exactArgs("KEY"),
		RunE: func(_ *cobra.Command, args []string) error {
			return kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
				_, err := kv.Delete(ctx, &kvv1.DeleteRequest{Key: []byte(args[0]), Sync: sync})
				return err
			})
		},
	}
	c.Flags().BoolVar(&sync, "sync", true, "wait until the delete is durable")
	return c
}

func newKVScanCmd(kc *kvClient) *cobra.Command {
	var prefix, start, end string
	var limit uint64
	var reverse, keysOnly bool
	c := &cobra.Command{
		Use:   "scan [--prefix P | --start S --end E]",
		Short: "Print key<TAB>value lines in key order",
		Long: `Scan prints the pairs of a key range, one key<TAB>value line each, in key
order (or descending with --reverse), from one consistent view of the
database. With -o json it prints a JSON array of {"key": ..., "value": ...}
objects (keyBase64/valueBase64 for bytes that are not valid UTF-8); if the
scan fails midway, the array is left unterminated.`,
		Example: `  shale kv scan --prefix user/
  shale kv scan --start a --end m --limit 100
  shale kv scan --reverse --limit 1 --keys-only     # the last key
  shale kv scan -o json | jq -r '.[].key'`,
		Args: exactArgs(),
	}
	output := addOutputFlags(c)
	c.Flags().StringVar(&prefix, "prefix", "", "only keys starting with this")
	c.Flags().StringVar(&start, "start", "", "first key (inclusive)")
	c.Flags().StringVar(&end, "end", "", "last key (exclusive)")
	c.Flags().Var(uintValue{&limit}, "limit", "at most this many pairs (0: all)")
	c.Flags().BoolVar(&reverse, "reverse", false, "descending key order")
	c.Flags().BoolVar(&keysOnly, "keys-only", false, "print keys only")
	noFileCompletion(c, "prefix", "start", "end", "limit")
	c.RunE = func(c *cobra.Command, _ []string) error {
		w := bufio.NewWriter(c.OutOrStdout())
		var out scanPrinter = &textScan{w: w, keysOnly: keysOnly}
		if output() == outputJSON {
			out = &jsonScan{w: w, keysOnly: keysOnly}
		}
		err := kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
			stream, err := kv.Scan(ctx, &kvv1.ScanRequest{
				Prefix: []byte(prefix), Start: []byte(start), End: []byte(end),
				Limit: limit, Reverse: reverse, KeysOnly: keysOnly,
			})
			if err != nil {
				return err
			}
			for {
				chunk, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return out.end()
				}
				if err != nil {
					return err
				}
				for _, p := range chunk.Pairs {
					if err := out.pair(p); err != nil {
						return err
					}
				}
			}
		})
		if ferr := w.Flush(); err == nil {
			err = ferr
		}
		return err
	}
	return c
}

type scanPrinter interface {
	pair(*kvv1.KeyValue) error
	end() error // after the last pair of a complete scan
}

type textScan struct {
	w        io.Writer
	keysOnly bool
}

func (t *textScan) pair(p *kvv1.KeyValue) error {
	var err error
	if t.keysOnly {
		_, err = fmt.Fprintf(t.w, "%s\n", p.Key)
	} else {
		_, err = fmt.Fprintf(t.w, "%s\t%s\n", p.Key, p.Value)
	}
	return err
}

func (t *textScan) end() error { return nil }

// jsonScan streams a JSON array, one pair per line.
type jsonScan struct {
	w        io.Writer
	keysOnly bool
	n        int
}

func (j *jsonScan) pair(p *kvv1.KeyValue) error {
	b, err := compactJSON(newPairJSON(p.Key, p.Value, !j.keysOnly))
	if err != nil {
		return err
	}
	sep := ",\n  "
	if j.n == 0 {
		sep = "[\n  "
	}
	j.n++
	_, err = fmt.Fprintf(j.w, "%s%s", sep, b)
	return err
}

func (j *jsonScan) end() error {
	var err error
	if j.n == 0 {
		_, err = fmt.Fprintln(j.w, "[]")
	} else {
		_, err = fmt.Fprintln(j.w, "\n]")
	}
	return err
}

// pairJSON is a key-value pair in -o json output: strings when they are
// valid UTF-8, base64 otherwise (JSON strings cannot hold arbitrary bytes).
type pairJSON struct {
	Key         *string `json:"key,omitempty"`
	KeyBase64   []byte  `json:"keyBase64,omitempty"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 []byte  `json:"valueBase64,omitempty"`
}

func newPairJSON(key, value []byte, withValue bool) pairJSON {
	var p pairJSON
	p.Key, p.KeyBase64 = jsonBytes(key)
	if withValue {
		p.Value, p.ValueBase64 = jsonBytes(value)
	}
	return p
}

func jsonBytes(b []byte) (*string, []byte) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	return nil, b
}

func newKVFlushCmd(kc *kvClient) *cobra.Command {
	return &cobra.Command{
		Use:   "flush",
		Short: "Flush memtables to SST files",
		Args:  exactArgs(),
		RunE: func(_ *cobra.Command, _ []string) error {
			return kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
				_, err := kv.Flush(ctx, &kvv1.FlushRequest{})
				return err
			})
		},
	}
}

func newKVCompactCmd(kc *kvClient) *cobra.Command {
	var start, end string
	c := &cobra.Command{
		Use:   "compact [--start S] [--end E]",
		Short: "Compact a key range, or everything",
		Args:  exactArgs(),
		RunE: func(_ *cobra.Command, _ []string) error {
			return kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
				_, err := kv.Compact(ctx, &kvv1.CompactRequest{Start: []byte(start), End: []byte(end)})
				return err
			})
		},
	}
	c.Flags().StringVar(&start, "start", "", "first key (empty: from the beginning)")
	c.Flags().StringVar(&end, "end", "", "last key (empty: to the end)")
	noFileCompletion(c, "start", "end")
	return c
}

func newKVStatusCmd(kc *kvClient) *cobra.Command {
	c := &cobra.Command{
		Use:   "status",
		Short: "Print role, epoch, sequence number and DB stats",
		Long: `Status prints the server's role, fencing epoch, latest sequence number and
RocksDB statistics. With -o json it prints the KV API's StatusResponse in
protobuf's JSON mapping (64-bit integers are strings, e.g. "epoch": "3").
--json is a deprecated spelling of -o json.`,
		Args: exactArgs(),
	}
	output := addOutputFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
			st, err := kv.Status(ctx, &kvv1.StatusRequest{})
			if err != nil {
				return err
			}
			if output() == outputJSON {
				b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(st)
				if err != nil {
					return err
				}
				var v any // re-encoded: protojson's spacing is deliberately unstable
				if err := json.Unmarshal(b, &v); err != nil {
					return err
				}
				return printJSON(c.OutOrStdout(), v)
			}
			printStatus(c.OutOrStdout(), st)
			return nil
		})
	}
	return c
}

// call dials the server and runs fn with a deadline.
func (kc *kvClient) call(fn func(ctx context.Context, kv kvv1.KVClient) error) error {
	conn, err := kc.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kc.timeout)
	defer cancel()
	err = fn(ctx, kvv1.NewKVClient(conn))
	if derr := describeConnError(kc.addr, kc.security, err); derr != nil {
		return derr
	}
	if st, ok := status.FromError(err); ok && err != nil {
		switch st.Code() {
		case codes.Unavailable:
			return fmt.Errorf("cannot reach a Shale server at %s: %s (is `shale primary` or `shale dev` running? set --addr)", kc.addr, st.Message())
		case codes.DeadlineExceeded:
			return fmt.Errorf("no answer from %s within %s (--timeout)", kc.addr, kc.timeout)
		}
		return fmt.Errorf("%s: %s", st.Code(), st.Message())
	}
	return err
}

func printStatus(w io.Writer, st *kvv1.StatusResponse) {
	s := st.GetStats()
	fmt.Fprintf(w, "role:                %s\n", map[kvv1.Role]string{kvv1.Role_ROLE_PRIMARY: "primary", kvv1.Role_ROLE_SECONDARY: "secondary"}[st.Role])
	fmt.Fprintf(w, "epoch:               %d\n", st.Epoch)
	fmt.Fprintf(w, "latest sequence:     %d\n", st.LatestSequence)
	if st.Role == kvv1.Role_ROLE_SECONDARY {
		fmt.Fprintf(w, "primary sequence:    %d (last announced; 0: no notifications)\n", st.PrimarySequence)
		fmt.Fprintf(w, "lag:                 %.3fs\n", st.LagSeconds)
	}
	fmt.Fprintf(w, "database:            %s\n", st.Db)
	fmt.Fprintf(w, "version:             shale %s, RocksDB %s\n", st.Version, st.RocksdbVersion)
	fmt.Fprintf(w, "estimated keys:      %d\n", s.GetEstimatedKeys())
	fmt.Fprintf(w, "live SST bytes:      %d\n", s.GetLiveSstBytes())
	fmt.Fprintf(w, "memtable bytes:      %d\n", s.GetMemtableBytes())
	fmt.Fprintf(w, "SST files per level: %v\n", s.GetFilesPerLevel())
	fmt.Fprintf(w, "pending compaction:  %d bytes\n", s.GetPendingCompactionBytes())
	fmt.Fprintf(w, "background errors:   %d\n", s.GetBackgroundErrors())
	if st.Role == kvv1.Role_ROLE_PRIMARY && (st.ColdTier || st.ColdAfter != nil) {
		fmt.Fprintf(w, "cold-after:          %s\n", coldAfterString(st.GetColdAfter().AsDuration()))
	}
	for _, t := range st.GetTiers() {
		if t.GetFiles() > 0 {
			fmt.Fprintf(w, "%-21s%d tables, %d bytes\n", t.GetTier()+" tier:", t.GetFiles(), t.GetBytes())
		}
	}
}
