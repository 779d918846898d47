package operator

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// stores opens object-store clients for ObjectStores. Credentials are read
// from the ObjectStore's Secret with an uncached read each time (the
// operator caches and watches only the Secrets it makes itself, labelled
// as its own, and never logs their values);
// clients are kept per location and credentials, so a rotated key gets a
// new client.
type stores struct {
	// reader reads Secrets from the API server.
	reader client.Reader
	// transport is shared by every client (one connection pool).
	transport http.RoundTripper

	mu      sync.Mutex
	clients map[storeKey]objstore.Store
}

type storeKey struct {
	url, endpoint, region string
	creds                 [sha256.Size]byte
}

func newStores(reader client.Reader) *stores {
	return &stores{
		reader:    reader,
		transport: http.DefaultTransport.(*http.Transport).Clone(),
		clients:   make(map[storeKey]objstore.Store),
	}
}

// configError is an ObjectStore the operator cannot use as configured (its
// Secret missing or incomplete): a refusal with a condition reason, not
// a transient failure.
type configError struct {
	Reason string
	Msg    string
}

func (e *configError) Error() string { return e.Msg }

func asConfigError(err error) (*configError, bool) {
	var ce *configError
	ok := errors.As(err, &ce)
	return ce, ok
}

// credentials reads the access key from the ObjectStore's Secret.
func (s *stores) credentials(ctx context.Context, os *shalev1.ObjectStore) (access, secret string, err error) {
	var sec corev1.Secret
	key := types.NamespacedName{Namespace: os.Namespace, Name: os.Spec.Credentials.Name}
	if err := s.reader.Get(ctx, key, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", &configError{shalev1.ReasonSecretMissing, fmt.Sprintf("Secret %s (credentials of ObjectStore %s) does not exist", key.Name, os.Name)}
		}
		return "", "", fmt.Errorf("reading Secret %s: %w", key.Name, err)
	}
	access, secret = string(sec.Data[shalev1.SecretKeyAccessKeyID]), string(sec.Data[shalev1.SecretKeySecretAccessKey])
	var missing []string
	if access == "" {
		missing = append(missing, shalev1.SecretKeyAccessKeyID)
	}
	if secret == "" {
		missing = append(missing, shalev1.SecretKeySecretAccessKey)
	}
	if len(missing) > 0 {
		return "", "", &configError{shalev1.ReasonSecretInvalid, fmt.Sprintf("Secret %s lacks the key(s) %v", key.Name, missing)}
	}
	return access, secret, nil
}

// open returns a client for the store URL (s3://BUCKET/PREFIX) on endpoint,
// with the ObjectStore's credentials.
func (s *stores) open(ctx context.Context, os *shalev1.ObjectStore, endpoint, url string) (objstore.Store, error) {
	access, secret, err := s.credentials(ctx, os)
	if err != nil {
		return nil, err
	}
	k := storeKey{url: url, endpoint: endpoint, region: os.Spec.Region, creds: sha256.Sum256([]byte(access + "\x00" + secret))}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.clients[k]; ok {
		return st, nil
	}
	st, err := objstore.OpenS3(url, objstore.S3Config{
		Endpoint:        endpoint,
		AccessKeyID:     access,
		SecretAccessKey: secret,
		Region:          os.Spec.Region,
		Transport:       s.transport,
	})
	if err != nil {
		return nil, &configError{shalev1.ReasonInvalidConfig, fmt.Sprintf("ObjectStore %s: %v", os.Name, err)}
	}
	s.clients[k] = st
	return st, nil
}

// hot opens the hot tier's root: keys are NAMESPACE/NAME-UID/...
func (s *stores) hot(ctx context.Context, os *shalev1.ObjectStore) (objstore.Store, error) {
	return s.open(ctx, os, os.Spec.Endpoint, os.Spec.Hot.URL())
}

// cold opens the cold tier's root.
func (s *stores) cold(ctx context.Context, os *shalev1.ObjectStore) (objstore.Store, error) {
	return s.open(ctx, os, os.ColdEndpoint(), os.Spec.Cold.URL())
}

// database opens a database's directory (storagePath relative to the hot
// bucket).
func (s *stores) database(ctx context.Context, os *shalev1.ObjectStore, storagePath string) (objstore.Store, error) {
	return s.open(ctx, os, os.Spec.Endpoint, os.DatabaseURL(storagePath))
}

func isNotFound(err error) bool { return errors.Is(err, objstore.ErrNotFound) }

// highestEpoch lists the epochs taken in a database's directory.
func highestEpoch(ctx context.Context, db objstore.Store) (uint64, error) {
	var highest uint64
	err := db.List(ctx, epochDir, func(o objstore.ObjectInfo) error {
		if e, ok := parseEpochKey(o.Key); ok && e > highest {
			highest = e
		}
		return nil
	})
	return highest, err
}

// deleteAll deletes every object under prefix ("" for the store's whole
// root) and reports how many objects and bytes it deleted.
func deleteAll(ctx context.Context, st objstore.Store, prefix string) (objects int, bytes int64, err error) {
	const batch = 1000
	var keys []string
	var sizes int64
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		if err := st.DeleteMany(ctx, keys); err != nil {
			return err
		}
		objects += len(keys)
		bytes += sizes
		keys, sizes = keys[:0], 0
		return nil
	}
	err = st.List(ctx, prefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		sizes += o.Size
		if len(keys) == batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return objects, bytes, err
}
