package operator

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/s3utils"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// stores opens object-store clients for ObjectStores, with credentials
// that depend on where the ObjectStore's come from (storeAccess):
//   - a Secret: its keys, read with an uncached read each time (the
//     operator caches and watches only the Secrets it makes itself,
//     labelled as its own, and never logs their values), so a rotated key gets a new client;
//   - serviceAccountName: web identity as that ServiceAccount, with
//     tokens the API server issues for it (TokenRequest), never with the
//     operator's own identity: whoever may create an ObjectStore gets no
//     access through the operator that the ServiceAccount lacks;
//   - instanceRole: the operator's own credentials (its node's or Pod's
//     role), only if the operator was told so (Options.InstanceRoleStores).
//
// Clients are kept per location and identity.
type stores struct {
	// reader reads Secrets and ServiceAccounts from the API server.
	reader client.Reader
	// tokens requests ServiceAccount tokens (TokenRequest).
	tokens client.Client
	// own are the operator's own credentials for instanceRole stores; nil
	// when the operator may not use them (Options.InstanceRoleStores).
	own *objstore.S3Config
	// transport is shared by every client (one connection pool).
	transport http.RoundTripper

	mu      sync.Mutex
	clients map[storeKey]objstore.Store
}

type storeKey struct {
	url, endpoint, region string
	checksum              string
	identity              [sha256.Size]byte
}

func newStores(reader client.Reader, tokens client.Client, own *objstore.S3Config) *stores {
	return &stores{
		reader:    reader,
		tokens:    tokens,
		own:       own,
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

// Annotations of a ServiceAccount for EKS IAM roles for service accounts,
// which the operator follows when it acts as the ServiceAccount.
const (
	annotationRoleARN  = "eks.amazonaws.com/role-arn"
	annotationAudience = "eks.amazonaws.com/audience"
	// defaultAudience is the audience of the tokens STS accepts.
	defaultAudience = "sts.amazonaws.com"
	// tokenSeconds is the lifetime asked for ServiceAccount tokens (the
	// API server's minimum is 10 minutes); a token is only exchanged for
	// credentials, at once.
	tokenSeconds = 600
)

// access returns the credential settings the operator uses for the
// ObjectStore (endpoint and region left to the caller) and a string that
// identifies them, for the client cache.
func (s *stores) access(ctx context.Context, os *shalev1.ObjectStore) (objstore.S3Config, string, error) {
	switch {
	case os.Spec.Credentials != nil:
		access, secret, err := s.credentials(ctx, os)
		if err != nil {
			return objstore.S3Config{}, "", err
		}
		return objstore.S3Config{AccessKeyID: access, SecretAccessKey: secret}, "secret\x00" + access + "\x00" + secret, nil
	case os.Spec.ServiceAccountName != "":
		return s.serviceAccount(ctx, os)
	case os.Spec.InstanceRole:
		if s.own == nil {
			return objstore.S3Config{}, "", &configError{shalev1.ReasonNoOperatorCredentials, fmt.Sprintf(
				"ObjectStore %s takes its credentials from the instance role; the operator checks it, writes owner records and collects garbage with its own role only when started with --instance-role-stores (then anyone who may create ObjectStores can have it use that role on any bucket the role reaches: grant the role only Shale's buckets), or use credentials or serviceAccountName", os.Name)}
		}
		return *s.own, "own", nil
	}
	return objstore.S3Config{}, "", &configError{shalev1.ReasonInvalidConfig, fmt.Sprintf("ObjectStore %s names no credentials: set credentials, serviceAccountName or instanceRole", os.Name)}
}

// serviceAccount is web identity as the ObjectStore's ServiceAccount: the
// operator asks the API server for a token of it (audience from the
// eks.amazonaws.com/audience annotation, default sts.amazonaws.com) each
// time the credentials run out, and exchanges it at STS for the role the
// eks.amazonaws.com/role-arn annotation names (AWS's regional STS for an
// AWS endpoint, else the store's endpoint, where MinIO serves STS).
func (s *stores) serviceAccount(ctx context.Context, os *shalev1.ObjectStore) (objstore.S3Config, string, error) {
	sa := &corev1.ServiceAccount{}
	key := types.NamespacedName{Namespace: os.Namespace, Name: os.Spec.ServiceAccountName}
	if err := s.reader.Get(ctx, key, sa); err != nil {
		if apierrors.IsNotFound(err) {
			return objstore.S3Config{}, "", &configError{shalev1.ReasonServiceAccountMissing, fmt.Sprintf(
				"ServiceAccount %s (serviceAccountName of ObjectStore %s) does not exist in namespace %s: create it and give it access to the buckets (e.g. annotate it with %s)", key.Name, os.Name, key.Namespace, annotationRoleARN)}
		}
		return objstore.S3Config{}, "", fmt.Errorf("reading ServiceAccount %s: %w", key.Name, err)
	}
	role := sa.Annotations[annotationRoleARN]
	audience := sa.Annotations[annotationAudience]
	if audience == "" {
		audience = defaultAudience
	}
	if role == "" && isAmazonEndpoint(os.Spec.Endpoint) {
		return objstore.S3Config{}, "", &configError{shalev1.ReasonNoOperatorCredentials, fmt.Sprintf(
			"ServiceAccount %s has no %s annotation: the operator checks ObjectStore %s, writes owner records and collects garbage as that ServiceAccount through web identity (IAM roles for service accounts), which needs the role; EKS Pod Identity associations serve Pods only", key.Name, annotationRoleARN, os.Name)}
	}
	tokens := s.tokens
	token := func() (string, error) {
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{audience},
			ExpirationSeconds: ptr.To[int64](tokenSeconds),
		}}
		tctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		target := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := tokens.SubResource("token").Create(tctx, target, tr); err != nil {
			return "", fmt.Errorf("a token for ServiceAccount %s/%s: %w", key.Namespace, key.Name, err)
		}
		return tr.Status.Token, nil
	}
	return objstore.S3Config{WebIdentityToken: token, WebIdentityName: "ServiceAccount " + key.String(), RoleARN: role},
		"serviceaccount\x00" + string(sa.UID) + "\x00" + role + "\x00" + audience, nil
}

// isAmazonEndpoint reports whether an endpoint URL is AWS's S3.
func isAmazonEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	return err == nil && s3utils.IsAmazonEndpoint(*u)
}

// open returns a client for the store URL (s3://BUCKET/PREFIX) on endpoint,
// with the credentials the operator uses for the ObjectStore.
func (s *stores) open(ctx context.Context, os *shalev1.ObjectStore, endpoint, url string) (objstore.Store, error) {
	cfg, identity, err := s.access(ctx, os)
	if err != nil {
		return nil, err
	}
	k := storeKey{url: url, endpoint: endpoint, region: os.Spec.Region, checksum: os.Spec.Checksum, identity: sha256.Sum256([]byte(identity))}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.clients[k]; ok {
		return st, nil
	}
	cfg.Endpoint, cfg.Region, cfg.Transport = endpoint, os.Spec.Region, s.transport
	cfg.Checksum = os.Spec.Checksum
	st, err := objstore.OpenS3(url, cfg)
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

// highestEpoch lists the epochs taken in a database's directory, read as
// the storage layer reads its claims.
func highestEpoch(ctx context.Context, db objstore.Store) (uint64, error) {
	var highest uint64
	err := db.List(ctx, layout.EpochPrefix, func(o objstore.ObjectInfo) error {
		if e, ok := layout.ParseEpochKey(o.Key); ok && e > highest {
			highest = e
		}
		return nil
	})
	return highest, err
}
