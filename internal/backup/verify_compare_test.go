package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// RFC 0011 step 14a: create counts the keys of the source's checkpoint
// (through a checkpoint reader on the source store) into the manifest,
// and verify compares the copy's count with it. Tampering that every
// SHA-256 and RocksDB check passes is found by the count.
func TestVerifyComparesSourceKeys(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	p := startPrimary(t, db)
	write(t, p.kv, 0, n, "v1")
	checkpoint(t, p.kv, "big")
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	ctx := context.Background()
	counted := func(id, ck string) backup.Manifest {
		t.Helper()
		m, err := backup.Create(ctx, backup.CreateConfig{Source: src, To: loc, ID: id, Checkpoint: ck, CountSourceKeys: true, Scratch: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if m.SourceKeys == nil {
			t.Fatalf("backup %s created with CountSourceKeys: the manifest has no sourceKeys", id)
		}
		return m
	}
	verify := func(id string) (backup.VerifyReport, error) {
		return backup.Verify(ctx, loc, id, t.TempDir())
	}

	big := counted("b1", "big")
	if *big.SourceKeys != n {
		t.Fatalf("the source's checkpoint holds %d keys, counted %d", n, *big.SourceKeys)
	}
	// The counting reader's lease is gone with it (invariant 5).
	if left := keysUnder(t, src, layout.ReadersPrefix); len(left) != 0 {
		t.Fatalf("the count left reader leases in the source: %v", left)
	}
	rep, err := verify("b1")
	if err != nil || rep.Keys != n || rep.SourceKeys == nil || *rep.SourceKeys != n {
		t.Fatalf("verify of a counted backup: %v %+v", err, rep)
	}
	t.Logf("compared: copy %d keys, source %d", rep.Keys, *rep.SourceKeys)

	// Without the count (and a manifest written before it): not compared.
	if m := create(t, src, loc, "b0", "big"); m.SourceKeys != nil {
		t.Fatalf("backup created without CountSourceKeys has sourceKeys %d", *m.SourceKeys)
	}
	if rep, err := verify("b0"); err != nil || rep.SourceKeys != nil || rep.Keys != n {
		t.Fatalf("verify of an uncounted backup: %v %+v", err, rep)
	}

	// Half the keys deleted, a later checkpoint: fewer keys, a higher
	// sequence.
	var ms []*kvv1.Mutation
	for i := range n / 2 {
		ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Delete_{Delete: &kvv1.Mutation_Delete{Key: []byte(fmt.Sprintf("k%05d", i))}}})
	}
	if _, err := p.kv.Write(ctx, &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, p.kv, "small")
	small := counted("b2", "small")
	if *small.SourceKeys != n/2 {
		t.Fatalf("the source's checkpoint after the deletes holds %d keys, counted %d", n/2, *small.SourceKeys)
	}
	if rep, err := verify("b2"); err != nil || rep.Keys != n/2 || *rep.SourceKeys != n/2 {
		t.Fatalf("verify of b2: %v %+v", err, rep)
	}

	publish := func(m backup.Manifest) {
		t.Helper()
		b := backup.Format(m)
		if _, err := bak.Put(ctx, backup.ManifestKey(m.ID), bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mismatch := func(what string, copyKeys, sourceKeys int) {
		t.Helper()
		_, err := verify("b1")
		if !errors.Is(err, backup.ErrDamaged) || !strings.Contains(err.Error(), fmt.Sprintf("holds %d keys", copyKeys)) ||
			!strings.Contains(err.Error(), fmt.Sprintf("held %d at sequence", sourceKeys)) {
			t.Fatalf("verify after %s: %v, want a key count mismatch naming %d and %d", what, err, copyKeys, sourceKeys)
		}
		t.Logf("%s: %v", what, err)
	}

	// (a) The manifest's count edited.
	edited := big
	other := uint64(n - 1)
	edited.SourceKeys = &other
	publish(edited)
	mismatch("sourceKeys edited", n, n-1)

	// (b) b1's manifest naming b2's objects (its tables and MANIFEST copy,
	// sums and sizes right): every object and RocksDB check passes and the
	// copy's sequence is above b1's checkpoint; only the count differs.
	swapped := big
	swapped.Objects, swapped.Current, swapped.Manifest, swapped.Bytes = small.Objects, small.Current, small.Manifest, small.Bytes
	publish(swapped)
	mismatch("the objects of another checkpoint", n/2, n)

	publish(big)
	if _, err := verify("b1"); err != nil {
		t.Fatalf("verify of the original manifest again: %v", err)
	}
}
