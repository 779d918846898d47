package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// `shale backup create|list|verify|restore|delete` against a real primary
// process on file:// stores: create through --addr (the primary makes the
// checkpoint, the backup deletes it after), a restore a second primary
// opens with every key, and bad input naming the flag.
func TestBackupCLI(t *testing.T) {
	dir := t.TempDir()
	db := "file://" + filepath.Join(dir, "orders")
	to := "file://" + filepath.Join(dir, "backups")
	p := startPrimary(t, db, filepath.Join(dir, "cache"))
	kv := kvv1.NewKVClient(dial(t, p.addr))
	ctx := context.Background()
	for i := range 100 {
		if _, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte("v1"), Sync: true}); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"backup", "create", "--to", to, "--addr", p.addr}, 2, "--db is required"},
		{[]string{"backup", "create", "--db", db, "--addr", p.addr}, 2, "--to is required"},
		{[]string{"backup", "create", "--db", db, "--to", to}, 2, "--checkpoint NAME"},
		{[]string{"backup", "create", "--db", db, "--to", to, "--addr", p.addr, "--checkpoint", "c1"}, 2, "not both"},
		{[]string{"backup", "create", "--db", db, "--to", to, "--checkpoint", "nope"}, 1, "not in the catalog"},
		{[]string{"backup", "create", "--db", db, "--to", to, "--addr", p.addr, "--id", "Bad_Id"}, 2, "--id"},
		{[]string{"backup", "list", "--to", to}, 2, "--database is required"},
		{[]string{"backup", "restore", "--to", to, "--database", "orders", "b1"}, 2, "--into is required"},
		{[]string{"backup", "restore", "--to", to, "--database", "orders", "b9", "--into", "file://" + filepath.Join(dir, "r9")}, 1, "no published backup b9"},
	} {
		code, out, errOut := shale(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Fatalf("%v: %d %q %q, want %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}

	createReport := filepath.Join(dir, "create-report")
	code, out, errOut := shale("backup", "create", "--db", db, "--to", to, "--addr", p.addr, "--id", "b1", "--report", createReport, "--count-source-keys", "--scratch", t.TempDir())
	if code != 0 || !strings.Contains(out, "backup b1 published") || !strings.Contains(out, "100 keys in the source's checkpoint") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(createReport); err != nil || !regexp.MustCompile(`^\{"command":"create","id":"b1","bytes":[1-9][0-9]*,"objects":[1-9][0-9]*,.*"sequence":[1-9][0-9]*,"time":"[^"]+","completed":"[^"]+","sourceKeys":100\}$`).Match(b) {
		t.Fatalf("create report: %q %v", b, err)
	}
	if r, err := kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{}); err != nil || len(r.Checkpoints) != 0 {
		t.Fatalf("the checkpoint the backup created is left: %v %v", r, err)
	}
	if code, out, errOut := shale("backup", "create", "--db", db, "--to", to, "--addr", p.addr, "--id", "b1"); code != 1 || !strings.Contains(errOut, "published already") {
		t.Fatalf("create with a published id: %d %q %q", code, out, errOut)
	}
	if r, err := kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{}); err != nil || len(r.Checkpoints) != 0 {
		t.Fatalf("a create refused for its id left a checkpoint: %v %v", r, err)
	}
	code, out, errOut = shale("backup", "list", "--to", to, "--database", "orders", "-o", "json")
	var rows []struct{ ID, State string }
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].ID != "b1" || rows[0].State != "published" {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
	code, out, errOut = shale("backup", "verify", "--to", to, "--database", "orders", "b1", "--scratch", t.TempDir())
	if code != 0 || !regexp.MustCompile(`verified: .* 100 keys \(the source's count equal\)`).MatchString(out) {
		t.Fatalf("verify: %d %q %q", code, out, errOut)
	}
	restored := "file://" + filepath.Join(dir, "restored")
	report := filepath.Join(dir, "termination-log")
	code, out, errOut = shale("backup", "restore", "--to", to, "--database", "orders", "b1", "--into", restored, "--report", report)
	if code != 0 || !strings.Contains(out, "restored into") {
		t.Fatalf("restore: %d %q %q", code, out, errOut)
	}
	// Run again (an init container restarted after the restore): refused,
	// but --resume finds the same backup's finished restore and succeeds;
	// another backup is refused even so.
	if code, out, errOut := shale("backup", "restore", "--to", to, "--database", "orders", "b1", "--into", restored); code != 1 || !strings.Contains(errOut, "restored already") {
		t.Fatalf("restore again: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := shale("backup", "restore", "--to", to, "--database", "orders", "b1", "--into", restored, "--resume", "--report", report); code != 0 || !strings.Contains(out, "restored in "+restored+" already") {
		t.Fatalf("restore --resume: %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(report); err != nil || !strings.Contains(string(b), `"command":"restore","id":"b1"`) {
		t.Fatalf("restore report: %q %v", b, err)
	}
	r := startPrimary(t, restored, filepath.Join(dir, "cache-restored"))
	rkv := kvv1.NewKVClient(dial(t, r.addr))
	for i := range 100 {
		got, err := rkv.Get(ctx, &kvv1.GetRequest{Key: []byte(fmt.Sprintf("k%03d", i))})
		if err != nil || string(got.Value) != "v1" {
			t.Fatalf("restored k%03d: %v %v", i, got, err)
		}
	}
	// Retention: two more backups, keep the last 2.
	for _, id := range []string{"b2", "b3"} {
		if code, out, errOut := shale("backup", "create", "--db", db, "--to", to, "--addr", p.addr, "--id", id); code != 0 {
			t.Fatalf("create %s: %d %q %q", id, code, out, errOut)
		}
	}
	// Created without --count-source-keys: verified, and it says the
	// source was not compared.
	code, out, errOut = shale("backup", "verify", "--to", to, "--database", "orders", "b3", "--scratch", t.TempDir())
	if code != 0 || !strings.Contains(out, "100 keys (not compared with the source") {
		t.Fatalf("verify of a backup without the source's count: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := shale("backup", "prune", "--to", to, "--database", "orders"); code != 2 || !strings.Contains(errOut, "--keep-last") {
		t.Fatalf("prune without a policy: %d %q %q", code, out, errOut)
	}
	code, out, errOut = shale("backup", "prune", "--to", to, "--database", "orders", "--keep-last", "2", "--dry-run")
	if code != 0 || !strings.Contains(out, "would delete backup b1") || strings.Contains(out, "b2") {
		t.Fatalf("prune --dry-run: %d %q %q", code, out, errOut)
	}
	code, out, errOut = shale("backup", "prune", "--to", to, "--database", "orders", "--keep-last", "2")
	if code != 0 || !strings.Contains(out, "backup b1 deleted") || !strings.Contains(out, "2 of 3 backups kept") {
		t.Fatalf("prune: %d %q %q", code, out, errOut)
	}
	for _, id := range []string{"b2", "b3"} {
		code, out, errOut = shale("backup", "delete", "--to", to, "--database", "orders", id)
		if code != 0 || !strings.Contains(out, "backup "+id+" deleted") {
			t.Fatalf("delete %s: %d %q %q", id, code, out, errOut)
		}
	}
	if code, out, _ := shale("backup", "list", "--to", to, "--database", "orders"); code != 0 || !strings.Contains(out, "no backups") {
		t.Fatalf("list after delete: %d %q", code, out)
	}
	// Every object went with the last backup.
	bs, err := objstore.Open(to + "/orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.List(ctx, "objects/", func(o objstore.ObjectInfo) error { return fmt.Errorf("%s left after every backup was deleted", o.Key) }); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := shale("backup", "delete", "--to", to, "--database", "orders", "b3"); code != 1 || !strings.Contains(errOut, "no backup b3") {
		t.Fatalf("delete of a deleted backup: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := shale("backup", "delete", "--to", to, "--database", "orders", "b3", "--missing-ok"); code != 0 || !strings.Contains(out, "nothing to delete") {
		t.Fatalf("delete --missing-ok of a deleted backup: %d %q %q", code, out, errOut)
	}
}

// `shale primary --archive-to` and `shale backup restore --target-sequence`:
// a primary process archives its logs; a restore to the sequence of one
// write holds it and every write before, and none after. Bad input names
// the flags.
func TestPointInTimeCLI(t *testing.T) {
	dir := t.TempDir()
	db := "file://" + filepath.Join(dir, "orders")
	to := "file://" + filepath.Join(dir, "backups")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"primary", "--db", db, "--archive-database", "x"}, "need --archive-to"},
		{[]string{"backup", "restore", "--to", to, "--database", "orders", "--target-sequence", "5", "--target-time", "2026-01-01T00:00:00Z", "--into", db}, "exclude each other"},
		{[]string{"backup", "restore", "--to", to, "--database", "orders", "b1", "--target-sequence", "5", "--into", db}, "not an ID"},
		{[]string{"backup", "restore", "--to", to, "--database", "orders", "--target-time", "yesterday", "--into", db}, "RFC 3339"},
		{[]string{"backup", "restore", "--to", to, "--database", "orders", "--into", db}, "needs a backup ID"},
	} {
		if code, out, errOut := shale(tc.args...); code != 2 || !strings.Contains(out+errOut, tc.want) {
			t.Fatalf("%v: %d %q %q, want 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}

	p := startPrimary(t, db, filepath.Join(dir, "cache"), "--archive-to", to)
	kv := kvv1.NewKVClient(dial(t, p.addr))
	ctx := context.Background()
	put := func(key string) uint64 {
		r, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(key), Value: []byte("v-" + key), Sync: true})
		if err != nil {
			t.Fatal(err)
		}
		return r.Sequence
	}
	for i := range 20 {
		put(fmt.Sprintf("a%03d", i))
	}
	// The base backup must start after the archive did.
	waitFile(t, filepath.Join(dir, "backups", "orders", "archive", "started.json"))
	if code, out, errOut := shale("backup", "create", "--db", db, "--to", to, "--addr", p.addr, "--id", "b1"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	var target uint64
	for i := range 20 {
		target = put(fmt.Sprintf("b%03d", i))
	}
	last := target
	for i := range 20 {
		last = put(fmt.Sprintf("c%03d", i))
	}
	// Wait until the archive holds the last write: a restore to it
	// succeeds once it does (before, it is refused as outside the window).
	into := "file://" + filepath.Join(dir, "restored")
	var code int
	var out, errOut string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		code, out, errOut = shale("backup", "restore", "--to", to, "--database", "orders", "--target-sequence", fmt.Sprint(last+1000), "--into", "file://"+filepath.Join(dir, "probe"))
		if code == 1 && strings.Contains(errOut, fmt.Sprintf("to sequence %d", last)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive never reached sequence %d: %d %q %q", last, code, out, errOut)
		}
	}
	t.Logf("refused: %s", errOut)
	report := filepath.Join(dir, "report.json")
	code, out, errOut = shale("backup", "restore", "--to", to, "--database", "orders", "--target-sequence", fmt.Sprint(target), "--into", into, "--report", report)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("up to sequence %d", target)) {
		t.Fatalf("restore: %d %q %q", code, out, errOut)
	}
	t.Log(out)
	if b, err := os.ReadFile(report); err != nil || !strings.Contains(string(b), fmt.Sprintf(`"sequence":%d`, target)) || !strings.Contains(string(b), `"id":"b1"`) {
		t.Fatalf("restore --report: %q %v, want the base b1 and sequence %d", b, err, target)
	}
	// The operator's init container restarted after the restore: --resume
	// succeeds on this target's finished restore; without it, or to
	// another target, the directory is refused.
	if code, out, errOut := shale("backup", "restore", "--to", to, "--database", "orders", "--target-sequence", fmt.Sprint(target), "--into", into, "--resume"); code != 0 || !strings.Contains(out, "restored in "+into+" already") {
		t.Fatalf("restore --target-sequence --resume: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := shale("backup", "restore", "--to", to, "--database", "orders", "--target-sequence", fmt.Sprint(target), "--into", into); code == 0 || !strings.Contains(errOut, "restored already") {
		t.Fatalf("restore again without --resume: %d %q, want refused", code, errOut)
	}
	if code, _, errOut := shale("backup", "restore", "--to", to, "--database", "orders", "--target-sequence", fmt.Sprint(target-1), "--into", into, "--resume"); code == 0 || !strings.Contains(errOut, "holds a restore of backup") {
		t.Fatalf("restore to another target with --resume: %d %q, want refused", code, errOut)
	}
	// Prune keeps b1 (the newest) and prunes the archive below it.
	code, out, errOut = shale("backup", "prune", "--to", to, "--database", "orders", "--keep-last", "1")
	if code != 0 || !regexp.MustCompile(`archive: pruned [0-9]+ WAL versions .* where the window starts \(backup b1\)`).MatchString(out) {
		t.Fatalf("prune: %d %q %q", code, out, errOut)
	}
	r := startPrimary(t, into, filepath.Join(dir, "cache-restored"))
	rkv := kvv1.NewKVClient(dial(t, r.addr))
	for _, prefix := range []string{"a", "b", "c"} {
		for i := range 20 {
			key := fmt.Sprintf("%s%03d", prefix, i)
			_, err := rkv.Get(ctx, &kvv1.GetRequest{Key: []byte(key)})
			if err != nil && status.Code(err) != codes.NotFound {
				t.Fatal(err)
			}
			if found, want := err == nil, prefix != "c"; found != want {
				t.Fatalf("restored to sequence %d: %s found=%v, want %v", target, key, found, want)
			}
		}
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

// A primary with --archive-to killed with SIGKILL under writes, its
// archiver with it; the next primary (the next epoch, a new process)
// archives from where the archive ends: a restore to the last write holds
// every write either acknowledged.
func TestArchiveAcrossKill(t *testing.T) {
	dir := t.TempDir()
	db := "file://" + filepath.Join(dir, "orders")
	to := "file://" + filepath.Join(dir, "backups")
	p := startPrimary(t, db, filepath.Join(dir, "cache1"), "--archive-to", to)
	kv := kvv1.NewKVClient(dial(t, p.addr))
	ctx := context.Background()
	waitFile(t, filepath.Join(dir, "backups", "orders", "archive", "started.json"))
	if code, out, errOut := shale("backup", "create", "--db", db, "--to", to, "--addr", p.addr, "--id", "b1"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	acked := map[string]bool{}
	writes := func(kv kvv1.KVClient, prefix string, n int, stop func(int)) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					key := fmt.Sprintf("%s-%d-%04d", prefix, w, i)
					if _, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(key), Value: []byte("v"), Sync: true}); err != nil {
						return // the primary was killed
					}
					mu.Lock()
					acked[key] = true
					mu.Unlock()
				}
			}()
		}
		if stop != nil {
			for {
				mu.Lock()
				got := len(acked)
				mu.Unlock()
				if got >= 300 {
					stop(got)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		wg.Wait()
	}
	writes(kv, "a", 1000, func(int) { p.kill9(t) })
	first := len(acked)
	q := startPrimary(t, db, filepath.Join(dir, "cache2"), "--archive-to", to)
	qkv := kvv1.NewKVClient(dial(t, q.addr))
	writes(qkv, "b", 20, nil)
	r, err := qkv.Put(ctx, &kvv1.PutRequest{Key: []byte("last"), Value: []byte("v"), Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	acked["last"] = true
	into := "file://" + filepath.Join(dir, "restored")
	var code int
	var out, errOut string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		code, out, errOut = shale("backup", "restore", "--to", to, "--database", "orders", "--target-sequence", fmt.Sprint(r.Sequence), "--into", into)
		if code == 0 || !strings.Contains(errOut, "outside the window") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive never reached sequence %d: %d %q %q", r.Sequence, code, out, errOut)
		}
	}
	if code != 0 {
		t.Fatalf("restore: %d %q %q", code, out, errOut)
	}
	t.Logf("%d writes acknowledged before the kill, %d in all; %s", first, len(acked), out)
	rp := startPrimary(t, into, filepath.Join(dir, "cache-restored"))
	rkv := kvv1.NewKVClient(dial(t, rp.addr))
	for key := range acked {
		if _, err := rkv.Get(ctx, &kvv1.GetRequest{Key: []byte(key)}); err != nil {
			t.Fatalf("acknowledged %s: %v", key, err)
		}
	}
}
