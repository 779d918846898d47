package shalefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// A clone of a parent in another store (docs/rfcs/0010-checkpoints-and-
// clones.md, step 20) copies what the checkpoint names instead of sharing
// it: (2) _shale/copy claims the directory (never _shale/origin: the
// clone owns its tables); (3) unless everything is copied already, pins
// in every origin, the MANIFEST copy, then the verification of step 16.5;
// (4) every table to <name>.<0>; (5) the pins deleted (a pin exists only
// while something is left to copy); (6) CURRENT. Every step is
// repeatable: a rerun copies only what is missing.

// copyParallel is the default bound on copies in flight.
const copyParallel = 8

// bootstrapCopy is Bootstrap for cfg.Copy, from step 2 on.
func bootstrapCopy(ctx context.Context, cfg BootstrapConfig, open func(string) (objstore.Store, error), clone, parent *core, pstore objstore.Store, want layout.CopyRecord, rep BootstrapReport) (BootstrapReport, error) {
	// 2. The copy record, first: it claims the directory for this clone.
	if err := putOnceSame(ctx, clone, layout.CopyKey, want.Format(), func(got []byte) error {
		have, perr := layout.ParseCopyRecord(got)
		if perr == nil && have.SameClone(want.OriginRecord) {
			return nil
		}
		return refuse("%w: %s of %s is clone %q of %s (checkpoint %s), not clone %q of %s (checkpoint %s)", layout.ErrForeignOrigin,
			layout.CopyKey, cfg.Store.URL(), have.CloneID, have.Parent, have.Checkpoint, want.CloneID, want.Parent, want.Checkpoint)
	}); err != nil {
		return rep, err
	}
	objs := want.CopyObjects()
	srcs, err := openCopySources(want, pstore, open)
	if err != nil {
		return rep, err
	}
	missing, err := copyMissing(ctx, cfg.Store, srcs, objs)
	if err != nil {
		return rep, err
	}
	if len(missing) > 0 {
		// 3. Pins, then the MANIFEST, then the check: a verification that
		// passes after the pins were written means the parent's trash loop
		// keeps every table from then on (RFC 0010, "GC racing a pin"), and
		// that the MANIFEST copy was taken while the checkpoint was live.
		stores := make([]objstore.Store, len(want.Origins))
		for i := range want.Origins {
			stores[i] = srcs.hot[i]
		}
		for i, o := range want.Origins {
			if err := putOnceSame(ctx, bootstrapCore(stores[i]), o.Pin, pinFor(cfg, want.OriginRecord, i), func(got []byte) error {
				return refuse("%s in %s holds another pin for clone %q (%s) than this bootstrap writes: two bootstraps with one clone id?", o.Pin, o.URL, cfg.CloneID, got)
			}); err != nil {
				return rep, err
			}
			rep.Pins = append(rep.Pins, strings.TrimSuffix(o.URL, "/")+"/"+o.Pin)
		}
		if missing[0].To == objs[0].To {
			if err := copyOne(ctx, cfg, clone, srcs, missing[0], &rep); err != nil {
				return rep, err
			}
			missing = missing[1:]
		}
		if err := verifyParent(ctx, parent, pstore, stores, cfg, want.OriginRecord); err != nil {
			deletePins(ctx, cfg, stores, want.OriginRecord)
			return rep, err
		}
		// 4. Every table, a few at a time.
		if err := copyAll(ctx, cfg, clone, srcs, missing, &rep); err != nil {
			return rep, err // the pins stay: a rerun goes on
		}
		// 5. Everything is in the clone: the parent may delete its tables.
		if err := deletePinsOnce(ctx, stores, want.OriginRecord); err != nil {
			return rep, err
		}
	}
	// 6. CURRENT, last.
	if err := writeCloneCurrent(ctx, clone, cfg, want.Current); err != nil {
		return rep, err
	}
	cfg.Logger.Info("clone bootstrapped by copying (the parent is in another store)", "parent", cfg.Parent, "checkpoint", cfg.Checkpoint, "clone", cfg.CloneID,
		"objects", len(objs), "copiedObjects", rep.CopiedObjects, "copiedBytes", rep.CopiedBytes, "streamedBytes", rep.Streamed)
	return rep, nil
}

// copySources are the origins' stores, opened once: hot[i] and, for
// origins with cold tables, cold[i].
type copySources struct {
	hot, cold []objstore.Store
}

func openCopySources(want layout.CopyRecord, pstore objstore.Store, open func(string) (objstore.Store, error)) (copySources, error) {
	s := copySources{hot: make([]objstore.Store, len(want.Origins)), cold: make([]objstore.Store, len(want.Origins))}
	s.hot[0] = pstore
	var err error
	for i, o := range want.Origins {
		if i > 0 {
			if s.hot[i], err = open(o.URL); err != nil {
				return s, fmt.Errorf("open origin %s: %w", o.URL, err)
			}
		}
		if o.ColdURL != "" {
			if s.cold[i], err = open(o.ColdURL); err != nil {
				return s, fmt.Errorf("open the cold tier %s of origin %s: %w", o.ColdURL, o.URL, err)
			}
		}
	}
	return s, nil
}

func (s copySources) of(o layout.CopyObject) objstore.Store {
	if o.Cold {
		return s.cold[o.Origin]
	}
	return s.hot[o.Origin]
}

// copyMissing lists the clone's directory once and returns the objects
// not in it yet. One already there is a whole object (a PUT or a copy is
// atomic): the same size, and where both stores are S3 and both ETags
// plain MD5s, the same ETag, is this bootstrap's copy; anything else
// refuses, naming both.
func copyMissing(ctx context.Context, dst objstore.Store, srcs copySources, objs []layout.CopyObject) ([]layout.CopyObject, error) {
	have := map[string]objstore.ObjectInfo{}
	if err := dst.List(ctx, "", func(o objstore.ObjectInfo) error {
		have[o.Key] = o
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", dst.URL(), err)
	}
	var missing []layout.CopyObject
	for _, o := range objs {
		got, ok := have[o.To]
		if !ok {
			missing = append(missing, o)
			continue
		}
		src := srcs.of(o)
		if got.Size != o.Size {
			return nil, refuse("%s of %s is %d bytes; %s of %s, which the clone copies there, is %d: not this bootstrap's copy (delete it, or the clone's directory)",
				o.To, dst.URL(), got.Size, o.Key, src.URL(), o.Size)
		}
		_, dS3 := dst.(*objstore.S3Store)
		_, sS3 := src.(*objstore.S3Store)
		if !dS3 || !sS3 || !plainMD5(got.ETag) {
			continue
		}
		from, err := src.Stat(ctx, o.Key)
		if err != nil {
			return nil, fmt.Errorf("stat %s of %s: %w", o.Key, src.URL(), err)
		}
		if plainMD5(from.ETag) && from.ETag != got.ETag {
			return nil, refuse("%s of %s (MD5 %s) is not %s of %s (MD5 %s), which the clone copies there: delete it, or the clone's directory",
				o.To, dst.URL(), got.ETag, o.Key, src.URL(), from.ETag)
		}
	}
	return missing, nil
}

// plainMD5 reports whether an S3 ETag is an MD5 of the content (not a
// multipart upload's).
func plainMD5(etag string) bool {
	etag = strings.Trim(etag, `"`)
	return len(etag) == 32 && !strings.Contains(etag, "-")
}

// copyOne copies one object: server-side within one S3 endpoint, else
// streamed (objstore.CopyAcross: the part size bounds what is in memory).
func copyOne(ctx context.Context, cfg BootstrapConfig, clone *core, srcs copySources, o layout.CopyObject, rep *BootstrapReport) error {
	src := srcs.of(o)
	var streamed int64
	err := clone.background().do(ctx, func(ctx context.Context) (err error) {
		var info objstore.ObjectInfo
		info, streamed, err = objstore.CopyAcross(ctx, src, o.Key, cfg.Store, o.To, objstore.PutOptions{})
		if err == nil && info.Size != o.Size {
			err = fmt.Errorf("copied %d bytes of %s, want %d", info.Size, o.Key, o.Size)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("copy %s of %s to %s: %w", o.Key, src.URL(), o.To, err)
	}
	rep.CopiedObjects++
	rep.CopiedBytes += o.Size
	rep.Streamed += streamed
	if cfg.AfterCopy != nil {
		return cfg.AfterCopy(o.To)
	}
	return nil
}

// copyAll copies objs with at most CopyParallel in flight; the first
// error stops the rest (those in flight finish).
func copyAll(ctx context.Context, cfg BootstrapConfig, clone *core, srcs copySources, objs []layout.CopyObject, rep *BootstrapReport) error {
	n := cfg.CopyParallel
	if n <= 0 {
		n = copyParallel
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, n)
	for _, o := range objs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		mu.Lock()
		stop := first != nil || ctx.Err() != nil
		mu.Unlock()
		if stop {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var one BootstrapReport
			err := copyOne(ctx, cfg, clone, srcs, o, &one)
			mu.Lock()
			defer mu.Unlock()
			rep.CopiedObjects += one.CopiedObjects
			rep.CopiedBytes += one.CopiedBytes
			rep.Streamed += one.Streamed
			if err != nil && first == nil {
				first = err
				cancel()
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// pinFor is the pin of origin i: the versions of it the clone reads (or,
// copying, copies).
func pinFor(cfg BootstrapConfig, want layout.OriginRecord, i int) []byte {
	pin := layout.PinRecord{Clone: cfg.Store.URL(), CloneID: cfg.CloneID, Checkpoint: cfg.Checkpoint, Files: []layout.VersionRef{}}
	for _, f := range want.Files {
		if f.Origin == i {
			pin.Files = append(pin.Files, layout.VersionRef{Name: f.Name, Epoch: f.Epoch})
		}
	}
	return pin.Format()
}

// deletePins deletes the pins of a refused bootstrap, logging what stays.
func deletePins(ctx context.Context, cfg BootstrapConfig, stores []objstore.Store, want layout.OriginRecord) {
	for i, o := range want.Origins {
		if derr := stores[i].Delete(ctx, o.Pin); derr != nil {
			cfg.Logger.Warn("bootstrap refused; a pin is left", "pin", o.Pin, "origin", o.URL, "err", derr)
		}
	}
}

// deletePinsOnce deletes a copied clone's pins once everything is copied;
// a pin already gone (a rerun) is not an error, a failure is: CURRENT is
// written only once no pin is left, so a rerun deletes it again.
func deletePinsOnce(ctx context.Context, stores []objstore.Store, want layout.OriginRecord) error {
	for i, o := range want.Origins {
		if err := stores[i].Delete(ctx, o.Pin); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("delete the pin %s in %s after the copy: %w", o.Pin, o.URL, err)
		}
	}
	return nil
}

// ParentOpener opens a clone's parent (and the stores it reads from) by
// URL: S3 ones at endpoint and with the credentials in credentialsDir
// (the files accessKeyID and secretAccessKey, as a mounted Secret) when
// those are given, else as the environment says (as OpenTierStore does for
// a cold tier on its own server).
func ParentOpener(endpoint, credentialsDir string) func(string) (objstore.Store, error) {
	return func(raw string) (objstore.Store, error) {
		u, err := objstore.ParseURL(raw)
		if err != nil {
			return nil, err
		}
		if u.Scheme != "s3" {
			return objstore.Open(u.String())
		}
		c := objstore.S3ConfigFromEnv()
		if endpoint != "" {
			c.Endpoint = strings.TrimSuffix(endpoint, "/")
		}
		if credentialsDir != "" {
			// Only these: the environment's keys are the clone's.
			c = objstore.S3Config{Endpoint: c.Endpoint, Region: c.Region, CredentialsDir: credentialsDir, Checksum: c.Checksum}
		}
		return objstore.OpenS3(u.String(), c)
	}
}

// CloneCopies says whether a clone at cloneURL of the parent at
// parentURL (reached at parentEndpoint, with parentCredentialsDir's keys,
// either "" for the environment's) copies (step 20), and why
// (protocol.CloneCopies).
func CloneCopies(cloneURL, parentURL, parentEndpoint, parentCredentialsDir string, asked bool) (bool, string, error) {
	env := objstore.S3ConfigFromEnv().Endpoint
	loc := func(raw, endpoint string, own bool) (protocol.StoreLocation, error) {
		u, err := objstore.ParseURL(raw)
		if err != nil {
			return protocol.StoreLocation{}, err
		}
		if endpoint == "" {
			endpoint = env
		}
		l := protocol.StoreLocation{Scheme: u.Scheme, OwnCredentials: own}
		if u.Scheme == "s3" {
			l.Bucket, l.Endpoint = u.Host, endpoint
		}
		return l, nil
	}
	c, err := loc(cloneURL, "", true)
	if err != nil {
		return false, "", fmt.Errorf("--db: %w", err)
	}
	p, err := loc(parentURL, parentEndpoint, parentCredentialsDir == "")
	if err != nil {
		return false, "", fmt.Errorf("--clone-from: %w", err)
	}
	copy, why := protocol.CloneCopies(c, p, asked)
	return copy, why, nil
}
