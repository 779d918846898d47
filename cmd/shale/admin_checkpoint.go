package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// `shale admin checkpoint` (docs/checkpoints.md).

func newCheckpointCmd() *cobra.Command {
	kc := &kvClient{}
	c := &cobra.Command{
		Use:   "checkpoint",
		Short: "Create, list and delete checkpoints of a running primary",
		Long: `Checkpoint keeps a database's state at one moment under a name
(docs/checkpoints.md): a frozen MANIFEST and every table it names, which no
delete removes while the checkpoint lives. Create and delete go to the
primary (--addr, the admin role); list asks any server, or reads the store
directly with --db (no server needed).

Serve a checkpoint read-only with: shale secondary --db URL --checkpoint NAME`,
		Example: `  shale admin checkpoint --addr db.example:7070 create before-migration --expires 72h
  shale admin checkpoint --addr db.example:7070 list
  shale admin checkpoint list --db s3://my-bucket/orders
  shale admin checkpoint --addr db.example:7070 delete before-migration`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroup,
	}
	c.PersistentFlags().StringVar(&kc.addr, "addr", "127.0.0.1:7070", "address of the primary, `HOST:PORT`")
	c.PersistentFlags().Var(newDuration(&kc.timeout, 5*time.Minute), "timeout", "give up after this long")
	kc.sec = addClientFlags(c, c.PersistentFlags(), "addr")
	noFileCompletion(c, "addr", "timeout")
	c.AddCommand(newCheckpointCreateCmd(kc), newCheckpointListCmd(kc), newCheckpointDeleteCmd(kc))
	return c
}

// parseExpires reads --expires: a duration from now (72h) or a time
// (RFC 3339).
func parseExpires(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usageErrorf("--expires %s: want a positive duration (such as 72h) or a future time (such as 2030-01-02T15:04:05Z)", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usageErrorf("--expires %q: want a duration (such as 72h) or an RFC 3339 time (such as 2030-01-02T15:04:05Z)", s)
	}
	if !t.After(now) {
		return time.Time{}, usageErrorf("--expires %s is in the past: give a later time, or a duration such as 72h", s)
	}
	return t, nil
}

// checkpointCall runs fn through kc.call, keeping the server's answer
// when it is about the checkpoint (kc.call reads UNAVAILABLE as an
// unreachable server).
func checkpointCall(kc *kvClient, fn func(ctx context.Context, kv kvv1.KVClient) error) error {
	return kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
		err := fn(ctx, kv)
		if st, ok := status.FromError(err); ok && err != nil && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "checkpoint") {
			return fmt.Errorf("%s: %s", st.Code(), st.Message())
		}
		return err
	})
}

func newCheckpointCreateCmd(kc *kvClient) *cobra.Command {
	var expires, requestID string
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a checkpoint on the primary",
		Long: `Create keeps the database's state now under NAME: 1-63 lower-case letters,
digits or '-', starting and ending with a letter or digit. It flushes the
memtable (writes pause only for the switch) and copies the MANIFEST; no
table is copied. --expires deletes it after a duration (72h) or at a time
(RFC 3339). A retry with the same --request-id answers the same checkpoint;
"outcome unknown" means it may have been created: retry with the same
--request-id, or list, to find out.`,
		Example: `  shale admin checkpoint --addr db.example:7070 create nightly --expires 168h`,
		Args:    exactArgs("NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			exp, err := parseExpires(expires, time.Now())
			if err != nil {
				return err
			}
			req := &kvv1.CheckpointRequest{Name: args[0], RequestId: requestID}
			if !exp.IsZero() {
				req.Expires = timestamppb.New(exp)
			}
			if req.RequestId == "" {
				req.RequestId = fmt.Sprintf("cli-%d", time.Now().UnixNano())
			}
			return checkpointCall(kc, func(ctx context.Context, kv kvv1.KVClient) error {
				r, err := kv.Checkpoint(ctx, req)
				if err != nil {
					return err
				}
				ck := r.Checkpoint
				fmt.Fprintf(c.OutOrStdout(), "checkpoint %s created: id %s, sequence %d, %d tables, %s\n", ck.Name, ck.Id, ck.Sequence, ck.Tables, byteCount(ck.Bytes))
				return nil
			})
		},
	}
	c.Flags().StringVar(&expires, "expires", "", "expire after this `DURATION` (72h) or at this RFC 3339 time (default: never)")
	c.Flags().StringVar(&requestID, "request-id", "", "makes retries idempotent (default: a new one)")
	noFileCompletion(c, "expires", "request-id")
	return c
}

func newCheckpointListCmd(kc *kvClient) *cobra.Command {
	var db string
	c := &cobra.Command{
		Use:   "list",
		Short: "List the checkpoints (from a server, or from the store with --db)",
		Example: `  shale admin checkpoint --addr db.example:7070 list
  shale admin checkpoint list --db file:///srv/shale/orders -o json`,
		Args: exactArgs(),
	}
	c.Flags().StringVar(&db, "db", "", "read the catalog from the store at `URL` instead of asking a server (s3://BUCKET/PREFIX or file:///ABS/PATH)")
	noFileCompletion(c, "db")
	output := addOutputFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		var list []*kvv1.CheckpointInfo
		if db != "" {
			store, err := objstore.Open(db)
			if err != nil {
				return fmt.Errorf("--db: %w", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), kc.timeout)
			defer cancel()
			cs, err := shalefs.ReadCheckpoints(ctx, store)
			if err != nil {
				return fmt.Errorf("read the checkpoints of %s: %w", store.URL(), err)
			}
			for _, ck := range cs {
				info := &kvv1.CheckpointInfo{Name: ck.Name, Id: ck.ID, RequestId: ck.RequestID, Epoch: ck.Epoch, Sequence: ck.Sequence, Created: timestamppb.New(ck.CreatedAt), Tables: uint64(ck.Tables), Bytes: uint64(ck.Bytes)}
				if !ck.Expires.IsZero() {
					info.Expires = timestamppb.New(ck.Expires)
				}
				list = append(list, info)
			}
		} else if err := checkpointCall(kc, func(ctx context.Context, kv kvv1.KVClient) error {
			r, err := kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{})
			list = r.GetCheckpoints()
			return err
		}); err != nil {
			return err
		}
		if output() == outputJSON {
			type row struct {
				Name      string     `json:"name"`
				ID        string     `json:"id"`
				RequestID string     `json:"requestID,omitempty"`
				Epoch     uint64     `json:"epoch"`
				Sequence  uint64     `json:"sequence"`
				Created   time.Time  `json:"created"`
				Expires   *time.Time `json:"expires,omitempty"`
				Tables    uint64     `json:"tables"`
				Bytes     uint64     `json:"bytes"`
			}
			rows := []row{}
			for _, ck := range list {
				r := row{Name: ck.Name, ID: ck.Id, RequestID: ck.RequestId, Epoch: ck.Epoch, Sequence: ck.Sequence, Created: ck.Created.AsTime(), Tables: ck.Tables, Bytes: ck.Bytes}
				if ck.Expires != nil {
					e := ck.Expires.AsTime()
					r.Expires = &e
				}
				rows = append(rows, r)
			}
			return printJSON(c.OutOrStdout(), rows)
		}
		printCheckpoints(c.OutOrStdout(), list)
		return nil
	}
	return c
}

func printCheckpoints(w io.Writer, list []*kvv1.CheckpointInfo) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no checkpoints")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSEQUENCE\tCREATED\tEXPIRES\tTABLES\tBYTES")
	for _, ck := range list {
		exp := "never"
		if ck.Expires != nil {
			exp = ck.Expires.AsTime().UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", ck.Name, ck.Sequence, ck.Created.AsTime().UTC().Format(time.RFC3339), exp, ck.Tables, byteCount(ck.Bytes))
	}
	tw.Flush()
}

func newCheckpointDeleteCmd(kc *kvClient) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a checkpoint on the primary",
		Long: `Delete removes checkpoint NAME from the catalog; the primary's next trash
pass past --delete-grace removes the tables only it held (a server still
serving it keeps them until it stops).`,
		Example: `  shale admin checkpoint --addr db.example:7070 delete nightly`,
		Args:    exactArgs("NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			return checkpointCall(kc, func(ctx context.Context, kv kvv1.KVClient) error {
				if _, err := kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: args[0]}); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "checkpoint %s deleted\n", args[0])
				return nil
			})
		},
	}
}

// byteCount renders a size for people.
func byteCount(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
