package operator

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/pki"
)

// The operator's certificate authority (docs/operator.md, "Certificates
// and client credentials"). It lives in a Secret in the operator's
// namespace (--ca-secret, default shale-ca), made when missing: ca.crt
// and ca.key sign every certificate the operator issues; an optional
// ca-bundle.crt lists CAs trusted besides it, which is how a CA is
// rotated by hand (the new CA is trusted everywhere before anything is
// signed with it). Every issued Secret's ca.crt is that bundle plus the
// signing CA.
//
// The operator's own client certificate (shale://OPNS/operator, for the
// Status and Stats calls it makes) is issued from the same CA and kept in
// memory only: nothing outside the process holds its key.

// Keys of the CA Secret.
const (
	caKeyCert   = "ca.crt"
	caKeyKey    = "ca.key"
	caKeyBundle = "ca-bundle.crt"
)

// caReread is how long a CA read from its Secret is used before it is
// read again (a change of the Secret is also seen at once, by a watch).
const caReread = time.Minute

// caSource is the CA, read from its Secret and cached briefly.
type caSource struct {
	c        client.Client
	reader   client.Reader
	key      types.NamespacedName
	validity time.Duration // of a CA made because none exists
	now      func() time.Time

	mu     sync.Mutex
	ca     *pki.CA
	bundle []byte
	read   time.Time
}

// get returns the CA and the bundle of CAs to trust. A missing CA Secret
// is made again (as at start: every certificate is then issued again);
// an unusable one is an error naming it.
func (s *caSource) get(ctx context.Context) (*pki.CA, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ca != nil && s.now().Sub(s.read) < caReread {
		return s.ca, s.bundle, nil
	}
	ca, bundle, err := ensureCA(ctx, s.c, s.reader, s.key, s.validity, s.now())
	if err != nil {
		return nil, nil, err
	}
	s.ca, s.bundle, s.read = ca, bundle, s.now()
	return ca, bundle, nil
}

// invalidate makes the next get read the Secret (it changed).
func (s *caSource) invalidate() {
	s.mu.Lock()
	s.read = time.Time{}
	s.mu.Unlock()
}

// ensureCA reads the CA Secret, making it if it does not exist, and
// labels it as the operator's (its cache and watches see only those).
func ensureCA(ctx context.Context, c client.Client, reader client.Reader, key types.NamespacedName, validity time.Duration, now time.Time) (*pki.CA, []byte, error) {
	var sec corev1.Secret
	err := reader.Get(ctx, key, &sec)
	if apierrors.IsNotFound(err) {
		certPEM, keyPEM, nerr := pki.NewCA("Shale operator CA ("+key.Namespace+")", now, validity)
		if nerr != nil {
			return nil, nil, fmt.Errorf("making the CA: %w", nerr)
		}
		sec = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: caLabels()},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{caKeyCert: certPEM, caKeyKey: keyPEM},
		}
		err = c.Create(ctx, &sec)
		if apierrors.IsAlreadyExists(err) {
			// Another operator replica made it first: use theirs.
			err = reader.Get(ctx, key, &sec)
		}
		if apierrors.IsNotFound(err) && key.Namespace != "" {
			return nil, nil, fmt.Errorf("making the CA Secret %s: %w (does namespace %s exist? --operator-namespace names it)", key, err, key.Namespace)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("CA Secret %s: %w", key, err)
	}
	ca, bundle, err := parseCASecret(&sec)
	if err != nil {
		return nil, nil, fmt.Errorf("CA Secret %s: %w; repair it, or delete it to have a new CA made (every certificate is then issued again)", key, err)
	}
	if sec.Labels[shalev1.LabelAppManagedBy] != shalev1.ManagedBy {
		patch := client.MergeFrom(sec.DeepCopy())
		if sec.Labels == nil {
			sec.Labels = map[string]string{}
		}
		for k, v := range caLabels() {
			sec.Labels[k] = v
		}
		if err := c.Patch(ctx, &sec, patch); err != nil {
			return nil, nil, fmt.Errorf("labelling the CA Secret %s: %w", key, err)
		}
	}
	return ca, bundle, nil
}

func caLabels() map[string]string {
	return map[string]string{
		shalev1.LabelAppName:      shalev1.AppName,
		shalev1.LabelAppManagedBy: shalev1.ManagedBy,
		shalev1.LabelCredential:   shalev1.CredentialCA,
	}
}

// parseCASecret reads the CA and the bundle to trust: ca-bundle.crt (if
// any) with ca.crt appended unless it is there already.
func parseCASecret(sec *corev1.Secret) (*pki.CA, []byte, error) {
	if len(sec.Data[caKeyCert]) == 0 || len(sec.Data[caKeyKey]) == 0 {
		return nil, nil, fmt.Errorf("it must hold %s and %s", caKeyCert, caKeyKey)
	}
	ca, err := pki.LoadCA(sec.Data[caKeyCert], sec.Data[caKeyKey])
	if err != nil {
		return nil, nil, err
	}
	extra := sec.Data[caKeyBundle]
	if len(extra) > 0 {
		if _, err := pki.ParseCertificate(extra); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", caKeyBundle, err)
		}
	}
	return ca, pki.AppendBundle(extra, ca.CertPEM), nil
}

// operatorCreds is the operator's own client identity, issued in memory
// from the CA and issued again when due or when the CA changes.
type operatorCreds struct {
	ca       *caSource
	id       auth.Identity
	validity time.Duration
	now      func() time.Time

	mu      sync.Mutex
	tls     *auth.TLS
	certPEM []byte
	keyPEM  []byte
	bundle  []byte
}

// operatorLeaf is the operator's certificate: client use only.
func operatorLeaf(id auth.Identity, validity time.Duration) pki.Leaf {
	return pki.Leaf{CommonName: commonName(id), URIs: []*url.URL{id.URI()}, Client: true, Validity: validity}
}

// dial is the transport option for a Shale server that serves TLS with a
// certificate naming serverName (any address may be dialled: a Pod IP).
func (o *operatorCreds) dial(ctx context.Context, serverName string) (grpc.DialOption, error) {
	t, err := o.current(ctx)
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(t.ClientCredentials(serverName)), nil
}

func (o *operatorCreds) current(ctx context.Context) (*auth.TLS, error) {
	ca, bundle, err := o.ca.get(ctx)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	want := operatorLeaf(o.id, o.validity)
	if o.tls != nil && pki.Renewal(o.certPEM, ca, want, now) == "" {
		if !bytes.Equal(bundle, o.bundle) {
			if err := o.tls.SetPEM(o.certPEM, o.keyPEM, bundle); err != nil {
				return nil, fmt.Errorf("the operator's certificate: %w", err)
			}
			o.bundle = bundle
		}
		return o.tls, nil
	}
	certPEM, keyPEM, err := ca.Issue(want, now)
	if err != nil {
		return nil, fmt.Errorf("issuing the operator's certificate: %w", err)
	}
	if o.tls == nil {
		o.tls, err = auth.NewTLSFromPEM(certPEM, keyPEM, bundle)
	} else {
		err = o.tls.SetPEM(certPEM, keyPEM, bundle)
	}
	if err != nil {
		return nil, fmt.Errorf("the operator's certificate: %w", err)
	}
	o.certPEM, o.keyPEM, o.bundle = certPEM, keyPEM, bundle
	return o.tls, nil
}

// plaintext is the transport option for a server with TLS turned off.
func plaintext() grpc.DialOption {
	return grpc.WithTransportCredentials(insecure.NewCredentials())
}
