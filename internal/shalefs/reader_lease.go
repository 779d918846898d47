package shalefs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Reader leases (docs/rfcs/0007-reader-leases.md; paper §7.1's first open
// challenge: files deleted under a secondary). A reader publishes
// _shale/readers/<id>, the file versions its view uses, and renews it at
// least every TTL/3; the owner's trash loop deletes no version a live lease
// names. Liveness is judged without comparing clocks: the owner notes, on
// its own clock's wait reading (clock.go), when it last saw each lease
// object change (every renewal changes it), and a lease that has not
// changed for its TTL no longer protects anything. A reader that could not
// renew within its TTL refuses reads (ReadAllowed) until it renews and
// catches up again: what it reads might have been deleted, and it says so
// instead of failing silently.

// leaseFiles is the reader's view: every file version RocksDB may read.
func (f *Reader) leaseFiles() []layout.VersionRef {
	f.mu.Lock()
	defer f.mu.Unlock()
	var refs []layout.VersionRef
	add := func(name string, st *file) {
		if st.kind == layout.KindLog || st.kind == layout.KindTable || st.kind == layout.KindObject {
			refs = append(refs, layout.VersionRef{Name: name, Epoch: st.epoch})
		}
	}
	for name, st := range f.files {
		add(name, st)
	}
	for name, r := range f.retired {
		add(name, r.file)
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Name != refs[j].Name {
			return refs[i].Name < refs[j].Name
		}
		return refs[i].Epoch < refs[j].Epoch
	})
	return refs
}

// publishLease writes the reader's lease when its files changed or a third
// of its TTL passed since the last renewal.
func (f *Reader) publishLease(ctx context.Context) error {
	if f.cfg.NoReaderLease {
		return nil
	}
	files := f.leaseFiles()
	sum, _ := json.Marshal(files)
	if !protocol.RenewReaderLease(string(sum) != f.leaseSum, time.Duration(f.leaseNow()), time.Duration(f.leaseRenewed.Load()), f.cfg.ReaderTTL) {
		return nil
	}
	start := f.leaseNow()
	b := layout.ReaderLease{ID: f.cfg.ReaderID, TTL: f.cfg.ReaderTTL, Renewal: newNonce(), Files: files}.Format()
	if _, err := f.put(ctx, layout.ReaderLeaseKey(f.cfg.ReaderID), "", ActLease, b, objstore.PutOptions{}); err != nil {
		return fmt.Errorf("renew reader lease: %w", err)
	}
	f.leaseSum = string(sum)
	f.leaseRenewed.Store(start)
	return nil
}

// readerLeaseFresh: the reader renewed its lease within its TTL, so the
// owner has deleted nothing its view uses.
func (f *Reader) readerLeaseFresh() bool {
	return protocol.ReaderLeaseFresh(time.Duration(f.leaseNow()), time.Duration(f.leaseRenewed.Load()), f.cfg.ReaderTTL)
}

// readerMayServe: the lease is fresh, and if it had lapsed RocksDB has
// caught up since. A refresh renews the lease before RocksDB catches up;
// until then RocksDB's version may still use tables the owner deleted
// while the lease was out.
func (f *Reader) readerMayServe() bool {
	return f.readerLeaseFresh() && !f.lapsed.Load()
}

// ReaderLeaseFresh reports whether a reader may serve reads: it renewed
// its lease within its TTL and, if the lease lapsed, caught up since (it
// refuses reads otherwise).
func (f *Reader) ReaderLeaseFresh() bool { return f.readerMayServe() }

// CaughtUp tells a reader that RocksDB caught up with its latest refresh:
// if its lease had lapsed, RocksDB no longer uses what may have been
// deleted meanwhile, and reads are served again.
func (f *Reader) CaughtUp() {
	if f.readerLeaseFresh() {
		f.lapsed.Store(false)
	}
}

// ReaderTTL is how long a reader's lease protects its files.
func (f *Reader) ReaderTTL() time.Duration { return f.cfg.ReaderTTL }

// dropLease removes the reader's lease when it stops for good.
func (f *Reader) dropLease(ctx context.Context) {
	if f.cfg.ReaderID != "" && !f.cfg.NoReaderLease {
		f.store.Delete(ctx, layout.ReaderLeaseKey(f.cfg.ReaderID))
	}
}

// defaultReaderID names a reader by its host and process.
func defaultReaderID() string {
	host, _ := os.Hostname()
	host = strings.NewReplacer("/", "-", " ", "-").Replace(host)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newNonce()[:6])
}
