package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"time"

	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// dirOwnerRecord is the operator's note of which RocksDB owns a database
// directory (NAMESPACE/NAME-UID.owner.json; not the storage layer's owner
// record _shale/owner inside it, an OwnerEpochRecord), written before the
// first primary is created and rewritten when the reclaim policy changes.
// The garbage collector deletes a directory only if its record says this
// cluster created it with reclaimPolicy Delete: a directory without one
// (created by hand, by an older operator, or by another cluster sharing
// the prefix) is never deleted, and neither is one whose RocksDB said
// Retain, even after the RocksDB object is gone (deleted, or its finalizer
// removed by hand).
type dirOwnerRecord struct {
	// Cluster is the UID of the kube-system Namespace of the cluster
	// whose operator wrote the record.
	Cluster       string                `json:"cluster"`
	Namespace     string                `json:"namespace"`
	Name          string                `json:"name"`
	UID           types.UID             `json:"uid"`
	ReclaimPolicy shalev1.ReclaimPolicy `json:"reclaimPolicy"`
	Updated       time.Time             `json:"updated"`
	// AdoptedBy is the RocksDB that adopted the directory after the one
	// above was deleted with Retain (spec.bootstrap.fromExistingPath,
	// bootstrap.go); Namespace, Name and UID still name the directory's
	// creator, which its key and NAME-UID say. While a RocksDB with this
	// UID exists, the directory is live to the garbage collector.
	AdoptedBy *recordRef `json:"adoptedBy,omitempty"`
}

// recordRef names a RocksDB (of the record's namespace).
type recordRef struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// ownerRecordOf is the key of the owner record a RocksDB keeps for its
// directory, and what the record says with policy: its own NAME-UID, or,
// once it adopted another (status.storagePath ends in another NAME-UID),
// that one's, naming it as the adopter.
func ownerRecordOf(db *shalev1.RocksDB, cluster string, policy shalev1.ReclaimPolicy, now time.Time) (string, dirOwnerRecord) {
	rec := dirOwnerRecord{Cluster: cluster, Namespace: db.Namespace, Name: db.Name, UID: db.UID, ReclaimPolicy: policy, Updated: now.UTC()}
	dir := db.DirName()
	if base := path.Base(db.Status.StoragePath); db.Status.StoragePath != "" && base != dir {
		if name, uid, ok := parseDirName(base); ok {
			dir, rec.Name, rec.UID = base, name, uid
			rec.AdoptedBy = &recordRef{Name: db.Name, UID: db.UID}
		}
	}
	return ownerRecordKey(db.Namespace, dir), rec
}

// maxOwnerRecord bounds what is read of a record.
const maxOwnerRecord = 64 << 10

func putOwnerRecord(ctx context.Context, store objstore.Store, key string, rec dirOwnerRecord) error {
	return putOwnerRecordIf(ctx, store, key, rec, "")
}

// putOwnerRecordIf writes the record if its current ETag is ifMatch
// (objstore.ErrPreconditionFailed otherwise); "" writes it unconditionally.
func putOwnerRecordIf(ctx context.Context, store objstore.Store, key string, rec dirOwnerRecord, ifMatch string) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = store.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfMatch: ifMatch})
	return err
}

// readOwnerRecord returns the record at key; nil, nil if there is none.
func readOwnerRecord(ctx context.Context, store objstore.Store, key string) (*dirOwnerRecord, objstore.ObjectInfo, error) {
	r, info, err := store.Get(ctx, key, 0, maxOwnerRecord)
	if err != nil {
		if isNotFound(err) {
			return nil, objstore.ObjectInfo{}, nil
		}
		return nil, info, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, info, err
	}
	var rec dirOwnerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, info, fmt.Errorf("owner record %s: %w", key, err)
	}
	return &rec, info, nil
}
