package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
)

const kvUsage = `Usage: shale kv COMMAND [--addr HOST:PORT] [flags] [args]

Commands:
  put KEY VALUE      store VALUE under KEY (durable unless --sync=false)
  get KEY            print KEY's value (exit 1 if it does not exist)
  delete KEY         remove KEY (durable unless --sync=false)
  scan               print key<TAB>value lines: --prefix P | --start S --end E,
                     --limit N, --reverse, --keys-only
  flush              flush memtables to SST files
  compact            compact a key range (--start, --end) or everything
  status             print role, epoch, sequence number and DB stats (--json)

Common flags:
  --addr HOST:PORT   server address (default 127.0.0.1:7070)
  --timeout D        give up after D (default 30s)
`

// kvCommand holds the flags every kv command shares.
type kvCommand struct {
	fs      *flag.FlagSet
	addr    string
	timeout time.Duration
}

func newKVCommand(name, synopsis string, stderr io.Writer) *kvCommand {
	c := &kvCommand{fs: newFlags("kv "+name, "shale kv "+synopsis, stderr)}
	c.fs.StringVar(&c.addr, "addr", "127.0.0.1:7070", "server address")
	c.fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
	return c
}

// args parses the command's flags and checks its positional arguments.
func (c *kvCommand) args(args []string, names ...string) ([]string, error) {
	pos, err := parse(c.fs, args)
	if err != nil {
		return nil, err
	}
	return pos, wantArgs(c.fs, pos, names...)
}

// call dials the server and runs fn with a deadline.
func (c *kvCommand) call(fn func(ctx context.Context, kv kvv1.KVClient) error) error {
	conn, err := grpc.NewClient(c.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		return fmt.Errorf("--addr %s: %w", c.addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	err = fn(ctx, kvv1.NewKVClient(conn))
	if st, ok := status.FromError(err); ok && err != nil {
		switch st.Code() {
		case codes.Unavailable:
			return fmt.Errorf("cannot reach a Shale server at %s: %s (is `shale primary` or `shale dev` running? set --addr)", c.addr, st.Message())
		case codes.DeadlineExceeded:
			return fmt.Errorf("no answer from %s within %s (--timeout)", c.addr, c.timeout)
		}
		return fmt.Errorf("%s: %s", st.Code(), st.Message())
	}
	return err
}

func runKV(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, kvUsage)
		return errUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "put":
		c := newKVCommand("put", "put KEY VALUE [--sync=false]", stderr)
		sync := c.fs.Bool("sync", true, "wait until the write is durable")
		pos, err := c.args(args, "KEY", "VALUE")
		if err != nil {
			return err
		}
		return c.call(func(ctx context.Context, kv kvv1.KVClient) error {
			_, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(pos[0]), Value: []byte(pos[1]), Sync: *sync})
			return err
		})
	case "get":
		c := newKVCommand("get", "get KEY", stderr)
		pos, err := c.args(args, "KEY")
		if err != nil {
			return err
		}
		return c.call(func(ctx context.Context, kv kvv1.KVClient) error {
			r, err := kv.Get(ctx, &kvv1.GetRequest{Key: []byte(pos[0])})
			if status.Code(err) == codes.NotFound {
				return fmt.Errorf("key %q not found", pos[0])
			}
			if err != nil {
				return err
			}
			stdout.Write(r.Value)
			fmt.Fprintln(stdout)
			return nil
		})
	case "delete":
		c := newKVCommand("delete", "delete KEY [--sync=false]", stderr)
		sync := c.fs.Bool("sync", true, "wait until the delete is durable")
		pos, err := c.args(args, "KEY")
		if err != nil {
			return err
		}
		return c.call(func(ctx context.Context, kv kvv1.KVClient) error {
			_, err := kv.Delete(ctx, &kvv1.DeleteRequest{Key: []byte(pos[0]), Sync: *sync})
			return err
		})
	case "scan":
		c := newKVCommand("scan", "scan [--prefix P | --start S --end E] [--limit N] [--reverse] [--keys-only]", stderr)
		prefix := c.fs.String("prefix", "", "only keys starting with this")
		start := c.fs.String("start", "", "first key (inclusive)")
		end := c.fs.String("end", "", "last key (exclusive)")
		limit := c.fs.Uint64("limit", 0, "at most this many pairs (0: all)")
		reverse := c.fs.Bool("reverse", false, "descending key order")
		keysOnly := c.fs.Bool("keys-only", false, "print keys only")
		if _, err := c.args(args); err != nil {
			return err
		}
		return c.call(func(ctx context.Context, kv kvv1.KVClient) error {
			stream, err := kv.Scan(ctx, &kvv1.ScanRequest{
				Prefix: []byte(*prefix), Start: []byte(*start), End: []byte(*end),
				Limit: *limit, Reverse: *reverse, KeysOnly: *keysOnly,
			})
			if err != nil {
				return err
			}
			for {
				chunk, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				for _, p := range chunk.Pairs {
					if *keysOnly {
						fmt.Fprintf(stdout, "%s\n", p.Key)
					} else {
						fmt.Fprintf(stdout, "%s\t%s\n", p.Key, p.Value)
					}
				}
			}
		})
	case "flush":
		c := newKVCommand("flush", "flush", stderr)
		if _, err := c.args(args); err != nil {
			return err
		}
		return c.call(func(ctx context.Context, kv kvv1.KVClient) error {
			_, err := kv.Flush(ctx, &kvv1.FlushRequest{})
			return err
		})
	case "compact":
		c := newKVCommand("compact", "compact [--start S] [--end E]", stderr)
		start := c.fs.String("start", "", "first key (empty: from the beginning)")
		end := c.fs.String("end", "", "last key (empty: to the end)")
		if _, err := c.args(args); err != nil {
			return err
		}
		return c.call(func(ctx context.Context, kv kvv1.KVClient) error {
			_, err := kv.Compact(ctx, &kvv1.CompactRequest{Start: []byte(*start), End: []byte(*end)})
			return err
		})
	case "status":
		c := newKVCommand("status", "status [--json]", stderr)
		asJSON := c.fs.Bool("json", false, "print JSON")
		if _, err := c.args(args); err != nil {
			return err
		}
		return c.call(func(ctx context.Context, kv kvv1.KVClient) error {
			st, err := kv.Status(ctx, &kvv1.StatusRequest{})
			if err != nil {
				return err
			}
			if *asJSON {
				b, _ := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(st)
				var v any
				json.Unmarshal(b, &v)
				out, _ := json.MarshalIndent(v, "", "  ")
				fmt.Fprintln(stdout, string(out))
				return nil
			}
			printStatus(stdout, st)
			return nil
		})
	case "help", "-h", "--help":
		fmt.Fprint(stdout, kvUsage)
		return nil
	}
	fmt.Fprintf(stderr, "shale kv: unknown command %q\n\n%s", cmd, kvUsage)
	return errUsage
}

func printStatus(w io.Writer, st *kvv1.StatusResponse) {
	s := st.GetStats()
	fmt.Fprintf(w, "role:                %s\n", map[kvv1.Role]string{kvv1.Role_ROLE_PRIMARY: "primary", kvv1.Role_ROLE_SECONDARY: "secondary"}[st.Role])
	fmt.Fprintf(w, "epoch:               %d\n", st.Epoch)
	fmt.Fprintf(w, "latest sequence:     %d\n", st.LatestSequence)
	fmt.Fprintf(w, "database:            %s\n", st.Db)
	fmt.Fprintf(w, "version:             shale %s, RocksDB %s\n", st.Version, st.RocksdbVersion)
	fmt.Fprintf(w, "estimated keys:      %d\n", s.GetEstimatedKeys())
	fmt.Fprintf(w, "live SST bytes:      %d\n", s.GetLiveSstBytes())
	fmt.Fprintf(w, "memtable bytes:      %d\n", s.GetMemtableBytes())
	fmt.Fprintf(w, "SST files per level: %v\n", s.GetFilesPerLevel())
	fmt.Fprintf(w, "pending compaction:  %d bytes\n", s.GetPendingCompactionBytes())
	fmt.Fprintf(w, "background errors:   %d\n", s.GetBackgroundErrors())
}
