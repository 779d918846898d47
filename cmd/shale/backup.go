package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/backup/jobreport"
	"github.com/shale-rocks/shale/internal/objstore"
)

// `shale backup` (docs/backup.md, docs/rfcs/0011-backups-and-point-in-time-restore.md).

// backupFlags name the backup location: a store and a database id.
type backupFlags struct {
	to, endpoint, credentials string
	database                  string
	timeout                   time.Duration
	archive                   bool // shale primary's --archive-* flags
	// report: a file the outcome is written to as JSON (the operator's
	// Jobs: /dev/termination-log).
	report string
}

// flag is the name of one of the location's flags as the command has it.
func (bf *backupFlags) flag(name string) string {
	if !bf.archive {
		return "--" + name
	}
	if name == "database" {
		return "--archive-database"
	}
	return "--archive-" + name
}

func newBackupCmd() *cobra.Command {
	bf := &backupFlags{}
	c := &cobra.Command{
		Use:   "backup",
		Short: "Back a database up to a second object store, and restore it",
		Long: `Backup copies a checkpoint of a database to another object store (another
bucket, endpoint or credential): every table, the frozen MANIFEST and the
checkpoint's record, each with its size and SHA-256 in the backup's
manifest, which is written last (docs/backup.md). Objects already in the
backup store are not copied again, so every backup after the first is
incremental. Restore writes a backup into a new, empty directory that
'shale primary' then opens.

Everything of one database is under --to's location, in a directory named
by --database (default: the last element of --db's path).`,
		Example: `  shale backup create --db s3://data/orders --addr orders:7070 --to s3://backups/shale
  shale backup list --to s3://backups/shale --database orders
  shale backup verify --to s3://backups/shale --database orders b20260101-020000
  shale backup restore --to s3://backups/shale --database orders b20260101-020000 --into s3://data/orders-restored
  shale backup delete --to s3://backups/shale --database orders b20260101-020000`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroup,
	}
	pf := c.PersistentFlags()
	pf.StringVar(&bf.to, "to", "", "the backup store's `URL`: s3://BUCKET/PREFIX or file:///ABS/PATH (required)")
	pf.StringVar(&bf.endpoint, "to-endpoint", "", "S3 endpoint `URL` of the backup store when it is another server than $AWS_ENDPOINT_URL")
	pf.StringVar(&bf.credentials, "to-credentials-dir", "", "`directory` with the backup store's accessKeyID and secretAccessKey files (default: the same credentials as the database)")
	pf.StringVar(&bf.database, "database", "", "the database's `id` in the backup store (default for create: the last element of --db's path)")
	pf.Var(newDuration(&bf.timeout, time.Hour), "timeout", "give up after this long")
	pf.StringVar(&bf.report, "report", "", "also write the outcome as JSON to this `file` (the operator's Jobs: /dev/termination-log)")
	noFileCompletion(c, "to", "to-endpoint", "database", "timeout")
	c.AddCommand(newBackupCreateCmd(bf), newBackupListCmd(bf), newBackupDeleteCmd(bf), newBackupVerifyCmd(bf), newBackupRestoreCmd(bf), newBackupPruneCmd(bf))
	return c
}

// location opens the backup location; db is the source's URL, when the
// command has one (the default database id is its last element).
func (bf *backupFlags) location(db string) (backup.Location, error) {
	if bf.to == "" {
		return backup.Location{}, usageErrorf("%s is required: the backup store's URL (s3://BUCKET/PREFIX or file:///ABS/PATH)", bf.flag("to"))
	}
	id := bf.database
	if id == "" && db != "" {
		if u, err := objstore.ParseURL(db); err == nil {
			id = path.Base(strings.TrimSuffix(u.Path, "/"))
			if u.Scheme == "s3" && (id == "/" || id == ".") {
				id = u.Host
			}
		}
	}
	if id == "" {
		return backup.Location{}, usageErrorf("%s is required: the database's id in the backup store (create's default: the last element of --db's path)", bf.flag("database"))
	}
	if err := objstore.ValidateKey(id); err != nil || strings.Contains(id, "/") {
		return backup.Location{}, usageErrorf("%s %q: want one path element, such as orders", bf.flag("database"), id)
	}
	u, err := objstore.ParseURL(bf.to)
	if err != nil {
		return backup.Location{}, usageErrorf("%s: %v", bf.flag("to"), err)
	}
	loc := strings.TrimSuffix(u.String(), "/") + "/" + id
	var s objstore.Store
	switch {
	case bf.endpoint == "" && bf.credentials == "":
		s, err = objstore.Open(loc)
	case u.Scheme != "s3":
		return backup.Location{}, usageErrorf("%s and %s apply to an s3:// backup store, not %s", bf.flag("to-endpoint"), bf.flag("to-credentials-dir"), bf.to)
	default:
		cfg := objstore.S3ConfigFromEnv()
		if bf.endpoint != "" {
			cfg.Endpoint = strings.TrimSuffix(bf.endpoint, "/")
		}
		if bf.credentials != "" {
			if st, serr := os.Stat(bf.credentials); serr != nil || !st.IsDir() {
				return backup.Location{}, usageErrorf("%s %s: not a directory (want one holding the files accessKeyID and secretAccessKey)", bf.flag("to-credentials-dir"), bf.credentials)
			}
			cfg.CredentialsDir = bf.credentials
			cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken = "", "", ""
		}
		s, err = objstore.OpenS3(loc, cfg)
	}
	if err != nil {
		return backup.Location{}, fmt.Errorf("%s: %w", bf.flag("to"), err)
	}
	// Other credentials: a server-side copy would read one side with the
	// other's, so copies stream.
	return backup.Location{Store: s, Database: id, Stream: bf.credentials != ""}, nil
}

func newBackupCreateCmd(bf *backupFlags) *cobra.Command {
	var db, ck, id, scratch string
	var concurrency uint64
	var countKeys bool
	kc := &kvClient{timeout: 5 * time.Minute}
	c := &cobra.Command{
		Use:   "create --db URL (--checkpoint NAME | --addr HOST:PORT)",
		Short: "Copy a checkpoint of a database into the backup store",
		Long: `Create copies checkpoint --checkpoint of the database at --db, or, with
--addr, first asks that primary for a new checkpoint (named backup-ID, the
admin role) and deletes it once the backup is published. While it copies,
the backup pins the checkpoint's tables in the database
(_shale/pins/backup-ID), so a checkpoint deleted or expired meanwhile
loses nothing. The manifest is written last: an interrupted backup is never
listed; rerun it with the same --id to resume, or delete it.

With --count-source-keys it also counts the live keys of the checkpoint in
the database (read-only, through --scratch: every table read once through
this process) and records the count in the manifest; verify then compares
the backup's count with it.`,
		Example: `  shale backup create --db s3://data/orders --addr orders:7070 --to s3://backups/shale
  shale backup create --db s3://data/orders --checkpoint nightly --to s3://backups/shale --id nightly-1`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if db == "" {
				return usageErrorf("--db is required: the database to back up (s3://BUCKET/PREFIX or file:///ABS/PATH)")
			}
			addrSet := c.Flags().Changed("addr")
			if (ck == "") == !addrSet {
				return usageErrorf("give --checkpoint NAME (an existing checkpoint) or --addr HOST:PORT (the primary creates one), not both")
			}
			if id == "" {
				id = backup.NewID(time.Now())
			}
			if err := backup.ValidID(id); err != nil {
				return usageErrorf("--id: %v", err)
			}
			src, err := objstore.Open(db)
			if err != nil {
				return fmt.Errorf("--db: %w", err)
			}
			loc, err := bf.location(db)
			if err != nil {
				return err
			}
			cfg := backup.CreateConfig{Source: src, To: loc, ID: id, Checkpoint: ck, Concurrency: int(concurrency), CountSourceKeys: countKeys, Scratch: scratch}
			if addrSet {
				// Before asking for a checkpoint: a published id needs none.
				sctx, scancel := context.WithTimeout(context.Background(), kc.timeout)
				_, serr := loc.Store.Stat(sctx, backup.ManifestKey(id))
				scancel()
				if serr == nil {
					return fmt.Errorf("backup %s is published already in %s: a new backup needs a new --id", id, loc.Store.URL())
				}
				cfg.Checkpoint = backup.PinID(id)
				cfg.CreatedCheckpoint = true
				req := &kvv1.CheckpointRequest{Name: cfg.Checkpoint, RequestId: id, Expires: timestamppb.New(time.Now().Add(24 * time.Hour))}
				if err := checkpointCall(kc, func(ctx context.Context, kv kvv1.KVClient) error {
					_, err := kv.Checkpoint(ctx, req)
					return err
				}); err != nil {
					return fmt.Errorf("create checkpoint %s on %s: %w", cfg.Checkpoint, kc.addr, err)
				}
				cfg.Release = func(context.Context) error {
					return checkpointCall(kc, func(ctx context.Context, kv kvv1.KVClient) error {
						_, err := kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: cfg.Checkpoint})
						return err
					})
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), bf.timeout)
			defer cancel()
			m, err := backup.Create(ctx, cfg)
			if err != nil {
				return err
			}
			if err := jobreport.Write(bf.report, jobreport.Report{Command: "create", ID: m.ID, Bytes: m.Bytes, Objects: int64(len(m.Objects)),
				CopiedBytes: m.CopiedBytes, CopiedObjects: int64(m.CopiedObjects), Sequence: m.Checkpoint.Sequence, Time: m.Checkpoint.CreatedAt, Completed: m.CompletedAt,
				SourceKeys: reportKeys(m.SourceKeys)}); err != nil {
				return err
			}
			counted := ""
			if m.SourceKeys != nil {
				counted = fmt.Sprintf(", %d keys in the source's checkpoint", *m.SourceKeys)
			}
			fmt.Fprintf(c.OutOrStdout(), "backup %s published: checkpoint %s, sequence %d%s, %d objects, %s; copied %d objects, %s (%s through this process)\n",
				m.ID, m.Checkpoint.Name, m.Checkpoint.Sequence, counted, len(m.Objects), byteCount(uint64(m.Bytes)), m.CopiedObjects, byteCount(uint64(m.CopiedBytes)), byteCount(uint64(m.Streamed)))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&db, "db", "", "the database's `URL` (required)")
	f.StringVar(&ck, "checkpoint", "", "copy this existing checkpoint (`NAME`)")
	f.StringVar(&id, "id", "", "the backup's id (default: b<UTC date>-<time>); rerun an interrupted backup with its id")
	f.StringVar(&kc.addr, "addr", "127.0.0.1:7070", "the primary that creates the checkpoint, `HOST:PORT`")
	f.Var(uintValue{&concurrency}, "concurrency", "objects copied at once (default 8)")
	f.BoolVar(&countKeys, "count-source-keys", false, "count the checkpoint's keys in the database into the manifest, for verify to compare (reads every table once)")
	f.StringVar(&scratch, "scratch", os.TempDir(), "local `directory` for --count-source-keys's reader cache (bounded, removed after)")
	kc.sec = addClientFlags(c, f, "addr")
	noFileCompletion(c, "db", "checkpoint", "id", "addr", "concurrency")
	return c
}

func newBackupListCmd(bf *backupFlags) *cobra.Command {
	var pending bool
	c := &cobra.Command{
		Use:     "list",
		Short:   "List the published backups (and, with --pending, interrupted ones)",
		Example: `  shale backup list --to s3://backups/shale --database orders -o json`,
		Args:    exactArgs(),
	}
	c.Flags().BoolVar(&pending, "pending", false, "also list backups that started and were not published (running or interrupted)")
	output := addOutputFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		loc, err := bf.location("")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), bf.timeout)
		defer cancel()
		ms, err := backup.List(ctx, loc)
		if err != nil {
			return err
		}
		var ps []backup.Pending
		if pending {
			if ps, err = backup.ListPending(ctx, loc); err != nil {
				return err
			}
		}
		if output() == outputJSON {
			type row struct {
				ID         string    `json:"id"`
				State      string    `json:"state"`
				Checkpoint string    `json:"checkpoint"`
				Sequence   uint64    `json:"sequence,omitempty"`
				Started    time.Time `json:"started"`
				Completed  time.Time `json:"completed,omitzero"`
				Objects    int       `json:"objects"`
				Bytes      int64     `json:"bytes"`
			}
			rows := []row{}
			for _, m := range ms {
				rows = append(rows, row{m.ID, "published", m.Checkpoint.Name, m.Checkpoint.Sequence, m.StartedAt, m.CompletedAt, len(m.Objects), m.Bytes})
			}
			for _, p := range ps {
				rows = append(rows, row{ID: p.ID, State: "interrupted", Checkpoint: p.Checkpoint, Started: p.StartedAt, Objects: len(p.Keys)})
			}
			return printJSON(c.OutOrStdout(), rows)
		}
		printBackups(c.OutOrStdout(), ms, ps)
		return nil
	}
	return c
}

func printBackups(w io.Writer, ms []backup.Manifest, ps []backup.Pending) {
	if len(ms)+len(ps) == 0 {
		fmt.Fprintln(w, "no backups")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tCHECKPOINT\tSEQUENCE\tCOMPLETED\tOBJECTS\tBYTES")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\tpublished\t%s\t%d\t%s\t%d\t%s\n", m.ID, m.Checkpoint.Name, m.Checkpoint.Sequence, m.CompletedAt.UTC().Format(time.RFC3339), len(m.Objects), byteCount(uint64(m.Bytes)))
	}
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\tinterrupted\t%s\t-\t-\t%d\t-\n", p.ID, p.Checkpoint, len(p.Keys))
	}
	tw.Flush()
}

func newBackupDeleteCmd(bf *backupFlags) *cobra.Command {
	var missingOK bool
	c := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a backup (published or interrupted) and the objects only it holds",
		Long: `Delete unpublishes backup ID and removes the objects no other backup (or
running backup) names. For an interrupted backup it also removes its pin in
the database, which keeps tables there until then. A delete that was
interrupted is finished by running it again.`,
		Example: `  shale backup delete --to s3://backups/shale --database orders b20260101-020000`,
		Args:    exactArgs("ID"),
		RunE: func(c *cobra.Command, args []string) error {
			loc, err := bf.location("")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), bf.timeout)
			defer cancel()
			rep, err := backup.Delete(ctx, loc, args[0], nil)
			if missingOK && errors.Is(err, backup.ErrNotFound) {
				fmt.Fprintf(c.OutOrStdout(), "no backup %s: nothing to delete\n", args[0])
				return jobreport.Write(bf.report, jobreport.Report{Command: "delete", ID: args[0]})
			}
			if err != nil {
				return err
			}
			if err := jobreport.Write(bf.report, jobreport.Report{Command: "delete", ID: args[0], Bytes: rep.Bytes, Objects: int64(rep.Objects)}); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "backup %s deleted: %d objects (%s) removed, %d kept for other backups\n", args[0], rep.Objects, byteCount(uint64(rep.Bytes)), rep.KeptObjectsFor)
			if rep.PinLeft != "" {
				fmt.Fprintf(c.ErrOrStderr(), "warning: could not delete the backup's pin %s; delete it by hand, or the database keeps the tables it names\n", rep.PinLeft)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&missingOK, "missing-ok", false, "succeed when there is no backup ID, published or interrupted (the operator's discard of a failed backup that wrote nothing)")
	return c
}

func newBackupVerifyCmd(bf *backupFlags) *cobra.Command {
	var scratch string
	c := &cobra.Command{
		Use:   "verify ID",
		Short: "Check every object of a backup and open it read-only with RocksDB",
		Long: `Verify downloads backup ID into --scratch (it needs the backup's size in
local disk; removed after), checks every object's size and SHA-256 against
the manifest, runs RocksDB's checksum verification on every table, opens
the copy read-only and counts its keys with checksums verified. A backup
created with --count-source-keys must hold as many keys as its checkpoint
held in the database; one created without is not compared (it says so).`,
		Example: `  shale backup verify --to s3://backups/shale --database orders b20260101-020000`,
		Args:    exactArgs("ID"),
		RunE: func(c *cobra.Command, args []string) error {
			loc, err := bf.location("")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), bf.timeout)
			defer cancel()
			rep, err := backup.Verify(ctx, loc, args[0], scratch)
			if err != nil {
				return err
			}
			if err := jobreport.Write(bf.report, jobreport.Report{Command: "verify", ID: args[0], Bytes: rep.Bytes, Objects: int64(rep.Objects), Keys: int64(rep.Keys), Sequence: rep.Sequence,
				SourceKeys: reportKeys(rep.SourceKeys)}); err != nil {
				return err
			}
			compared := "the source's count equal"
			if rep.SourceKeys == nil {
				compared = "not compared with the source (created without --count-source-keys)"
			}
			fmt.Fprintf(c.OutOrStdout(), "backup %s verified: %d objects (%s), %d tables, %d keys (%s), sequence %d\n", args[0], rep.Objects, byteCount(uint64(rep.Bytes)), rep.Tables, rep.Keys, compared, rep.Sequence)
			return nil
		},
	}
	c.Flags().StringVar(&scratch, "scratch", os.TempDir(), "local `directory` for the downloaded copy")
	return c
}

func newBackupRestoreCmd(bf *backupFlags) *cobra.Command {
	var into, targetTime string
	var targetSeq uint64
	var resume bool
	c := &cobra.Command{
		Use:   "restore (ID | --target-time T | --target-sequence N) --into URL",
		Short: "Write a backup, or the database at a point in time, into a new, empty database directory",
		Long: `Restore copies backup ID into --into, which must be empty (or hold an
interrupted restore of the same backup: rerun to finish it): every table,
the MANIFEST and CURRENT, last. Then start a primary there:
shale primary --db URL. Do not start one before the restore ends.

With --target-time or --target-sequence (and no ID) it restores the database
as it was at that point, from the archive a primary writes with
--archive-to: the newest base backup at or before the target and the
archived WAL up to it. The result holds every write acknowledged before the
target and none after (a time is compared with the store's clock; a
sequence is exact, as returned by a Write), never a write refused as
fenced. A target outside the recoverable window is refused, naming the
window (docs/backup.md, "Point-in-time restore").`,
		Example: `  shale backup restore --to s3://backups/shale --database orders b20260101-020000 --into s3://data/orders-restored
  shale backup restore --to s3://backups/shale --database orders --target-time 2026-01-01T10:42:00Z --into s3://data/orders-before-bug`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if into == "" {
				return usageErrorf("--into is required: the new database's URL (an empty location)")
			}
			var t backup.Target
			if targetTime != "" {
				tt, err := time.Parse(time.RFC3339Nano, targetTime)
				if err != nil {
					return usageErrorf("--target-time %q: want an RFC 3339 time such as 2026-01-01T10:42:00Z", targetTime)
				}
				t.Time = tt
			}
			t.Sequence = targetSeq
			pit := targetTime != "" || targetSeq > 0
			switch {
			case targetTime != "" && targetSeq > 0:
				return usageErrorf("--target-time and --target-sequence exclude each other")
			case pit && len(args) > 0:
				return usageErrorf("a point-in-time restore picks its base backup: give --target-time or --target-sequence, not an ID")
			case !pit && len(args) == 0:
				return usageErrorf("restore needs a backup ID, or --target-time or --target-sequence")
			}
			loc, err := bf.location("")
			if err != nil {
				return err
			}
			target, err := objstore.Open(into)
			if err != nil {
				return fmt.Errorf("--into: %w", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), bf.timeout)
			defer cancel()
			if pit {
				rep, err := backup.RestoreToPoint(ctx, loc, t, target)
				if resume && errors.Is(err, backup.ErrRestored) {
					// A restarted init container (the operator's
					// bootstrap.recovery with a target): this target's
					// restore finished there.
					fmt.Fprintf(c.OutOrStdout(), "%s of %s is restored in %s already\n", t, loc.Database, target.URL())
					return jobreport.Write(bf.report, jobreport.Report{Command: "restore", ID: rep.Base})
				}
				if err != nil {
					return err
				}
				if err := jobreport.Write(bf.report, jobreport.Report{Command: "restore", ID: rep.Base, Bytes: rep.Bytes + rep.WALBytes, Objects: int64(rep.Tables + rep.WALs), Sequence: rep.Last, Time: rep.LastTime}); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "restored %s to %s into %s: backup %s (sequence %d), %d tables, %s, then %d archived WALs (%s) up to sequence %d; start it with: shale primary --db %s\n",
					loc.Database, t, target.URL(), rep.Base, rep.Sequence, rep.Tables, byteCount(uint64(rep.Bytes)), rep.WALs, byteCount(uint64(rep.WALBytes)), rep.Last, target.URL())
				return nil
			}
			rep, err := backup.Restore(ctx, loc, args[0], target)
			if resume && errors.Is(err, backup.ErrRestored) {
				fmt.Fprintf(c.OutOrStdout(), "backup %s is restored in %s already\n", args[0], target.URL())
				return jobreport.Write(bf.report, jobreport.Report{Command: "restore", ID: args[0]})
			}
			if err != nil {
				if errors.Is(err, backup.ErrNotFound) {
					return fmt.Errorf("%w (an interrupted backup cannot be restored: rerun its create)", err)
				}
				return err
			}
			if err := jobreport.Write(bf.report, jobreport.Report{Command: "restore", ID: args[0], Bytes: rep.Bytes, Objects: int64(rep.Tables), Sequence: rep.Sequence}); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "backup %s restored into %s: %d tables, %s, sequence %d; start it with: shale primary --db %s\n", args[0], target.URL(), rep.Tables, byteCount(uint64(rep.Bytes)), rep.Sequence, target.URL())
			return nil
		},
	}
	c.Flags().StringVar(&into, "into", "", "the new database's `URL` (required; empty)")
	c.Flags().StringVar(&targetTime, "target-time", "", "restore the database as it was at this `time` (RFC 3339), from the archive")
	c.Flags().Var(uintValue{&targetSeq}, "target-sequence", "restore the database as it was at this sequence `number`, from the archive")
	c.Flags().BoolVar(&resume, "resume", false, "succeed without writing when --into holds this backup's (or this target's) finished restore (a restarted init container); anything else there is still refused")
	noFileCompletion(c, "into", "target-time", "target-sequence")
	return c
}

func newBackupPruneCmd(bf *backupFlags) *cobra.Command {
	var keepLast uint64
	var keepWithin time.Duration
	var dryRun bool
	var sweepGrace time.Duration
	c := &cobra.Command{
		Use:   "prune (--keep-last N | --keep-within DURATION)",
		Short: "Delete the published backups a retention policy lets go",
		Long: `Prune keeps the newest --keep-last backups and every one completed within
--keep-within (either or both: a backup either keeps is kept; the newest
is always kept), and deletes the others, oldest first, as 'shale backup
delete' does: only objects no kept or running backup names are removed.
Then it sweeps objects no backup names that are older than --sweep-grace
(left by a delete that was interrupted and never rerun), and prunes the
continuous archive: archived WALs whose writes are all at or below the
sequence of the oldest kept base of the point-in-time window go (a restore
from a kept base never reads them). With --dry-run the archive is judged
as it is now, before the deletes a real run would make.`,
		Example: `  shale backup prune --to s3://backups/shale --database orders --keep-last 7 --keep-within 720h`,
		Args:    exactArgs(),
		RunE: func(c *cobra.Command, _ []string) (err error) {
			if keepLast == 0 && keepWithin == 0 {
				return usageErrorf("give --keep-last N and/or --keep-within DURATION: the backups to keep")
			}
			loc, err := bf.location("")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), bf.timeout)
			defer cancel()
			ms, err := backup.List(ctx, loc)
			if err != nil {
				return err
			}
			ids := backup.Expired(ms, time.Now(), backup.Policy{KeepLast: int(keepLast), KeepWithin: keepWithin})
			if !dryRun {
				defer func() {
					if err == nil {
						err = jobreport.Write(bf.report, jobreport.Report{Command: "prune", Deleted: ids})
					}
				}()
			}
			for _, id := range ids {
				if dryRun {
					fmt.Fprintf(c.OutOrStdout(), "would delete backup %s\n", id)
					continue
				}
				rep, err := backup.Delete(ctx, loc, id, nil)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "backup %s deleted: %d objects (%s) removed\n", id, rep.Objects, byteCount(uint64(rep.Bytes)))
			}
			fmt.Fprintf(c.OutOrStdout(), "%d of %d backups kept\n", len(ms)-len(ids), len(ms))
			if !dryRun {
				n, b, err := backup.Sweep(ctx, loc, sweepGrace, time.Now())
				if err != nil {
					return err
				}
				if n > 0 {
					fmt.Fprintf(c.OutOrStdout(), "swept %d objects (%s) no backup names\n", n, byteCount(uint64(b)))
				}
			}
			// The archive below the window's new start (RFC 0011 step 23a);
			// a dry run judges the archive as it is, before its deletes.
			ar, err := backup.PruneArchived(ctx, loc, dryRun)
			if err != nil {
				return err
			}
			verb := "pruned"
			if dryRun {
				verb = "would prune"
			}
			switch {
			case ar.NoArchive:
			case ar.NoWindow:
				fmt.Fprintln(c.OutOrStdout(), "archive: no base backup starts a point-in-time window: nothing pruned")
			default:
				fmt.Fprintf(c.OutOrStdout(), "archive: %s %d WAL versions (%d objects, %s) ending at or below sequence %d, where the window starts (backup %s); %d kept\n",
					verb, len(ar.Versions), ar.Objects, byteCount(uint64(ar.Bytes)), ar.Sequence, ar.Window, ar.Kept)
			}
			return nil
		},
	}
	c.Flags().Var(uintValue{&keepLast}, "keep-last", "keep the newest `N` backups")
	c.Flags().Var(offDurationValue{durationValue{&keepWithin}}, "keep-within", "keep every backup completed within this `DURATION` (720h: 30 days)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be deleted, delete nothing")
	c.Flags().Var(newDuration(&sweepGrace, 24*time.Hour), "sweep-grace", "sweep objects no backup names once they are this old (longer than any backup takes to start)")
	noFileCompletion(c, "keep-last", "keep-within")
	return c
}

// reportKeys is a key count for a job report (nil stays nil: not counted).
func reportKeys(n *uint64) *int64 {
	if n == nil {
		return nil
	}
	v := int64(*n)
	return &v
}
