package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
)

// Create a checkpoint through the CLI against a real primary process
// while it keeps taking writes; `shale secondary --checkpoint` serves
// exactly the state at the checkpoint's sequence number; list (through
// --addr and from the store with --db) and delete work; bad input names
// the problem.
func TestCheckpointServer(t *testing.T) {
	dir := t.TempDir()
	db := "file://" + filepath.Join(dir, "db")
	p := startPrimary(t, db, filepath.Join(dir, "cache"))
	kv := kvv1.NewKVClient(dial(t, p.addr))
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		if _, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte("before"), Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := shale("admin", "checkpoint", "--addr", p.addr, "create", "c1", "--expires", "24h")
	if code != 0 || !strings.Contains(out, "checkpoint c1 created") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	for i := 0; i < 100; i++ {
		if _, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte("after"), Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte("new"), Value: []byte("after"), Sync: true}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"admin", "checkpoint", "--addr", p.addr, "list"}, {"admin", "checkpoint", "list", "--db", db}} {
		code, out, errOut := shale(args...)
		if code != 0 || !strings.Contains(out, "c1") || !strings.Contains(out, "TABLES") {
			t.Fatalf("%v: %d %q %q", args, code, out, errOut)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"admin", "checkpoint", "--addr", p.addr, "create", "c1"}, 1, "delete it first or choose another name"},
		{[]string{"admin", "checkpoint", "--addr", p.addr, "create", "Bad_Name"}, 1, "is not valid"},
		{[]string{"admin", "checkpoint", "--addr", p.addr, "create", "c2", "--expires", "soon"}, 2, "want a duration"},
		{[]string{"admin", "checkpoint", "--addr", p.addr, "create", "c2", "--expires", "2001-01-01T00:00:00Z"}, 2, "in the past"},
		{[]string{"admin", "checkpoint", "--addr", p.addr, "delete", "nope"}, 1, "NotFound"},
	} {
		code, out, errOut := shale(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Fatalf("%v: %d %q %q, want %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}

	addr := freeAddr(t)
	startServing(t, addr, "secondary", "--db", db, "--cache-dir", filepath.Join(dir, "ck"), "--listen", addr, "--metrics-listen", "", "--checkpoint", "c1")
	ck := kvv1.NewKVClient(dial(t, addr))
	for i := 0; i < 100; i++ {
		r, err := ck.Get(ctx, &kvv1.GetRequest{Key: []byte(fmt.Sprintf("k%03d", i))})
		if err != nil || string(r.Value) != "before" {
			t.Fatalf("checkpoint server k%03d: %v %v, want before", i, r, err)
		}
	}
	if _, err := ck.Get(ctx, &kvv1.GetRequest{Key: []byte("new")}); err == nil {
		t.Fatal("the checkpoint server has a write made after the checkpoint")
	}
	if _, err := ck.Put(ctx, &kvv1.PutRequest{Key: []byte("x"), Value: []byte("y")}); err == nil {
		t.Fatal("the checkpoint server took a write")
	}
	// Deleted while it serves: reads go on (its lease keeps the tables).
	if code, out, errOut := shale("admin", "checkpoint", "--addr", p.addr, "delete", "c1"); code != 0 {
		t.Fatalf("delete: %d %q %q", code, out, errOut)
	}
	if r, err := ck.Get(ctx, &kvv1.GetRequest{Key: []byte("k050")}); err != nil || string(r.Value) != "before" {
		t.Fatalf("after delete: %v %v", r, err)
	}
	if code, out, _ := shale("admin", "checkpoint", "list", "--db", db); code != 0 || !strings.Contains(out, "no checkpoints") {
		t.Fatalf("list after delete: %d %q", code, out)
	}
	// A missing checkpoint refuses to serve, naming it.
	code, out, errOut = shaleProcess(t, "secondary", "--db", db, "--cache-dir", filepath.Join(dir, "ck2"), "--listen", freeAddr(t), "--metrics-listen", "", "--checkpoint", "c1")
	if code == 0 || !strings.Contains(out+errOut, `"c1" is not in the catalog`) {
		t.Fatalf("secondary at a deleted checkpoint: %d %q %q", code, out, errOut)
	}
}
