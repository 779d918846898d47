package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"
)

// CopyAcross copies srcKey of src to dstKey of dst, two stores that may
// be different locations (a clone's bootstrap copies its parent's frozen
// MANIFEST). Between two S3 stores on the same endpoint it is one
// server-side CopyObject (no byte passes this process); otherwise (a file
// store, another endpoint, an object above 5 GiB, or a copy the
// destination's credentials may not read the source for) it streams. streamed is
// how many bytes passed through this process. opts' conditions are not
// supported: a server-side copy cannot be create-only on every S3, so the
// caller decides when to copy (it checks the destination first).
func CopyAcross(ctx context.Context, src Store, srcKey string, dst Store, dstKey string, opts PutOptions) (info ObjectInfo, streamed int64, err error) {
	if opts.IfNoneMatch || opts.IfMatch != "" {
		return ObjectInfo{}, 0, fmt.Errorf("copy %s to %s: CopyAcross takes no conditions", srcKey, dstKey)
	}
	if s, ok := src.(*S3Store); ok {
		if d, ok := dst.(*S3Store); ok && s.endpoint == d.endpoint {
			info, err = d.copyFrom(ctx, s, srcKey, dstKey, opts)
			var se *s3Error
			// CopyObject reads the source with the destination's
			// credentials: when those may not (two stores on one endpoint
			// with their own keys, a clone of a parent in another
			// ObjectStore), stream, reading it with its own.
			denied := errors.As(err, &se) && se.status == http.StatusForbidden
			if err != errTooLargeToCopy && !denied {
				return info, 0, err
			}
		}
	}
	r, from, err := src.Get(ctx, srcKey, 0, -1)
	if err != nil {
		return ObjectInfo{}, 0, fmt.Errorf("copy %s of %s: %w", srcKey, src.URL(), err)
	}
	defer r.Close()
	info, err = dst.Put(ctx, dstKey, r, from.Size, opts)
	if err != nil {
		return ObjectInfo{}, 0, err
	}
	return info, from.Size, nil
}

// CopiesServerSide reports whether CopyAcross from src to dst is a
// server-side copy (two S3 stores on one endpoint; objects up to 5 GiB),
// so that no byte passes this process.
func CopiesServerSide(src, dst Store) bool {
	s, ok := src.(*S3Store)
	if !ok {
		return false
	}
	d, ok := dst.(*S3Store)
	return ok && s.endpoint == d.endpoint
}

var errTooLargeToCopy = fmt.Errorf("too large for one CopyObject")

// copyFrom copies srcKey of src (another S3Store on the same endpoint) to
// dstKey of s, server-side.
func (s *S3Store) copyFrom(ctx context.Context, src *S3Store, srcKey, dstKey string, opts PutOptions) (ObjectInfo, error) {
	srcName, err := src.object(srcKey)
	if err != nil {
		return ObjectInfo{}, err
	}
	dstName, err := s.object(dstKey)
	if err != nil {
		return ObjectInfo{}, err
	}
	for attempt := 0; ; attempt++ {
		from, err := src.Stat(ctx, srcKey)
		if err != nil {
			return ObjectInfo{}, fmt.Errorf("copy %s of %s: %w", srcKey, src.URL(), err)
		}
		if from.Size > maxCopySize {
			return ObjectInfo{}, errTooLargeToCopy
		}
		dstOpts := minio.CopyDestOptions{Bucket: s.bucket, Object: dstName, ReplaceMetadata: true,
			UserMetadata: map[string]string{"X-Amz-Storage-Class": storageClass(opts.StorageClass)}}
		var up minio.UploadInfo
		err = s.withCreds(ctx, true, func() (err error) {
			up, err = s.client.CopyObject(ctx, dstOpts, minio.CopySrcOptions{Bucket: src.bucket, Object: srcName, MatchETag: from.ETag})
			return err
		})
		if err != nil {
			if minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed && attempt < 3 {
				continue // the source changed since the stat
			}
			return ObjectInfo{}, s.fail(ctx, "copy "+src.URL()+"/"+srcKey+" to", dstKey, err)
		}
		mod := up.LastModified
		if mod.IsZero() {
			mod = time.Now()
		}
		return ObjectInfo{Key: dstKey, Size: from.Size, ETag: trimETag(up.ETag), ModTime: mod, StorageClass: storageClass(opts.StorageClass)}, nil
	}
}
