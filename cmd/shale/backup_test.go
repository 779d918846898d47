package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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
	code, out, errOut := shale("backup", "create", "--db", db, "--to", to, "--addr", p.addr, "--id", "b1", "--report", createReport)
	if code != 0 || !strings.Contains(out, "backup b1 published") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(createReport); err != nil || !regexp.MustCompile(`^\{"command":"create","id":"b1","bytes":[1-9][0-9]*,"objects":[1-9][0-9]*,.*"sequence":[1-9][0-9]*,"time":"[^"]+","completed":"[^"]+"\}$`).Match(b) {
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
	if code != 0 || !regexp.MustCompile(`verified: .* 100 keys`).MatchString(out) {
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
