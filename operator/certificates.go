package operator

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/pki"
)

// Certificates and client credentials (docs/operator.md). Each RocksDB
// with TLS on owns the Secrets NAME-primary-tls, NAME-secondary-tls,
// NAME-access (its access list) and NAME-client-CLIENT per spec.clients;
// each CompactorPool with TLS on owns POOL-scheduler-tls and
// POOL-worker-tls. Every reconcile checks each certificate (renewal, a
// pure decision) and issues it again when it is missing, due (two thirds
// into its life), not from the current CA, naming other identities or
// hosts than the spec asks for, or when the owner's annotation
// shale.rocks/renew-certificates has a value the Secret was not issued
// under. Only the Secret changes: the Pods mount it, the kubelet updates
// the files, and the servers read them again at their next handshake, so
// nothing restarts. The reconcile comes back at the earliest renewal.

// Keys of the credential Secrets.
const (
	keyTLSCert      = corev1.TLSCertKey       // tls.crt
	keyTLSKey       = corev1.TLSPrivateKeyKey // tls.key
	keyCA           = "ca.crt"
	keyAccess       = "access.json"
	keyToken        = "token"
	keyClientConfig = "client.yaml"
)

// Event reasons of credentials.
const (
	eventCertificateIssued  = "CertificateIssued"
	eventCertificateRenewed = "CertificateRenewed"
	// eventCertificateRequested: a cert-manager Certificate was made.
	eventCertificateRequested = "CertificateRequested"
	eventCertificatesFailed   = "CertificatesFailed"
	eventClientRevoked        = "ClientRevoked"
	eventSecretConflict       = "SecretConflict"
)

// issuer issues the certificates of databases and pools.
type issuer struct {
	ca       *caSource
	validity time.Duration // of a leaf (--cert-validity)
	domain   string        // the cluster's DNS domain
	now      func() time.Time
	// certManager: whether cert-manager is installed (spec.tls.issuerRef).
	certManager certManagerProbe
}

// commonName is an identity as a certificate's common name (at most 64
// characters: the identity itself is in the URI SAN).
func commonName(id auth.Identity) string {
	s := id.URI().String()
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// serviceNames are the DNS names a Service is reached by from inside the
// cluster, and localhost (the exec readiness probe dials 127.0.0.1 and
// verifies the name localhost).
func serviceNames(svc, ns, domain string) []string {
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc." + domain, "localhost"}
}

// serviceHost is the name the operator and Shale's components verify a
// Service's certificate by: SVC.NS.svc.
func serviceHost(svc, ns string) string { return svc + "." + ns + ".svc" }

var loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

// serverLeaf is a component's certificate: its identity, the names of its
// Service, serving and client use (a primary submits to the scheduler, a
// secondary follows the primary's Watch).
func serverLeaf(id auth.Identity, svc string, domain string, validity time.Duration, extraURIs ...*url.URL) pki.Leaf {
	return pki.Leaf{
		CommonName: commonName(id),
		URIs:       append([]*url.URL{id.URI()}, extraURIs...),
		DNSNames:   serviceNames(svc, id.Namespace, domain),
		IPs:        loopback,
		Server:     true,
		Client:     true,
		Validity:   validity,
	}
}

// clientLeaf is a certificate that only authenticates a client.
func clientLeaf(id auth.Identity, validity time.Duration) pki.Leaf {
	return pki.Leaf{CommonName: commonName(id), URIs: []*url.URL{id.URI()}, Client: true, Validity: validity}
}

// primaryLeaf names the primary and the database URL it serves (its --db):
// the only database it may submit compactions for.
func primaryLeaf(db *shalev1.RocksDB, dbURL string, domain string, validity time.Duration) (pki.Leaf, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return pki.Leaf{}, fmt.Errorf("database URL %q: %w", dbURL, err)
	}
	id := auth.Identity{Namespace: db.Namespace, Kind: auth.KindPrimary, Name: db.Name}
	return serverLeaf(id, db.ServiceName(), domain, validity, u), nil
}

func secondaryLeaf(db *shalev1.RocksDB, domain string, validity time.Duration) pki.Leaf {
	id := auth.Identity{Namespace: db.Namespace, Kind: auth.KindSecondary, Name: db.Name}
	return serverLeaf(id, db.ReadOnlyServiceName(), domain, validity)
}

func dbClientLeaf(db *shalev1.RocksDB, client string, validity time.Duration) pki.Leaf {
	return clientLeaf(auth.Identity{Namespace: db.Namespace, Kind: auth.KindClient, Name: db.Name, Client: client}, validity)
}

func schedulerLeaf(pool *shalev1.CompactorPool, domain string, validity time.Duration) pki.Leaf {
	id := auth.Identity{Namespace: pool.Namespace, Kind: auth.KindScheduler, Name: pool.Name}
	return serverLeaf(id, pool.SchedulerName(), domain, validity)
}

func workerLeaf(pool *shalev1.CompactorPool, validity time.Duration) pki.Leaf {
	return clientLeaf(auth.Identity{Namespace: pool.Namespace, Kind: auth.KindWorker, Name: pool.Name}, validity)
}

// renewal says why the certificate in a Secret's data must be issued
// again, "" to keep it: pki.Renewal's reasons (missing, due, another CA,
// other names), a key that does not match it, or a renewal requested by
// the owner's annotation (requested) that this Secret was not issued
// under (renewedFor).
func renewal(data map[string][]byte, renewedFor string, ca *pki.CA, want pki.Leaf, requested string, now time.Time) string {
	if why := pki.Renewal(data[keyTLSCert], ca, want, now); why != "" {
		return why
	}
	if _, err := tls.X509KeyPair(data[keyTLSCert], data[keyTLSKey]); err != nil {
		return "the key does not match the certificate"
	}
	if requested != "" && requested != renewedFor {
		return fmt.Sprintf("renewal requested (%s: %s)", shalev1.AnnotationRenewCertificates, requested)
	}
	return ""
}

// credential is one Secret the operator keeps.
type credential struct {
	name string
	typ  corev1.SecretType
	// labels identify it (owner, LabelCredential, LabelClientName).
	labels map[string]string
	// leaf is the certificate it holds (tls.crt, tls.key, ca.crt); nil
	// for none (the access list).
	leaf *pki.Leaf
	// extra computes its other keys from its current data (a client's
	// token is kept from it).
	extra func(cur map[string][]byte) (map[string][]byte, error)
}

// credentialOwner is what the operator needs of a Secret's owner.
type credentialOwner interface {
	client.Object
	runtime.Object
}

// secretWriter is the API access of ensure.
type secretWriter struct {
	client.Client
	recorder record.EventRecorder
}

// ensure makes the Secret cred, owned by owner, current: created if
// missing, its certificate issued again when renewal says so, ca.crt and
// the extra keys rewritten when they differ. It returns the Secret's data
// and when its certificate is due (zero without one).
func (is *issuer) ensure(ctx context.Context, w secretWriter, owner credentialOwner, cred credential, ca *pki.CA, bundle []byte, requested string) (map[string][]byte, time.Time, error) {
	now := is.now()
	var cur corev1.Secret
	err := w.Get(ctx, types.NamespacedName{Namespace: owner.GetNamespace(), Name: cred.name}, &cur)
	missing := apierrors.IsNotFound(err)
	if err != nil && !missing {
		return nil, time.Time{}, err
	}
	if !missing && !metav1.IsControlledBy(&cur, owner) {
		return nil, time.Time{}, &refusal{eventSecretConflict, fmt.Sprintf("Secret %s exists and is not owned by %s %s; delete it or rename the %s",
			cred.name, kindOf(owner), owner.GetName(), kindOf(owner))}
	}
	data := maps.Clone(cur.Data)
	if data == nil {
		data = map[string][]byte{}
	}
	ann := maps.Clone(cur.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	why := ""
	if cred.leaf != nil {
		why = renewal(data, ann[shalev1.AnnotationRenewedFor], ca, *cred.leaf, requested, now)
		if why != "" {
			certPEM, keyPEM, err := ca.Issue(*cred.leaf, now)
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("issuing %s: %w", cred.name, err)
			}
			data[keyTLSCert], data[keyTLSKey] = certPEM, keyPEM
			if requested != "" {
				ann[shalev1.AnnotationRenewedFor] = requested
			}
		}
		data[keyCA] = bundle
	}
	if cred.extra != nil {
		more, err := cred.extra(data)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("Secret %s: %w", cred.name, err)
		}
		for k, v := range more {
			data[k] = v
		}
	}
	var renewAt time.Time
	if cred.leaf != nil {
		if c, err := pki.ParseCertificate(data[keyTLSCert]); err == nil {
			renewAt = pki.RenewAt(c)
		}
	}

	if missing {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: owner.GetNamespace(), Name: cred.name, Labels: cred.labels, Annotations: ann},
			Type:       cred.typ,
			Data:       data,
		}
		if len(ann) == 0 {
			sec.Annotations = nil
		}
		if err := controllerutil.SetControllerReference(owner, sec, w.Scheme()); err != nil {
			return nil, time.Time{}, err
		}
		if err := w.Create(ctx, sec); err != nil {
			// AlreadyExists: the cache lags a create of ours; the retry
			// finds it.
			return nil, time.Time{}, fmt.Errorf("creating Secret %s: %w", cred.name, err)
		}
		if cred.leaf != nil {
			w.recorder.Eventf(owner, corev1.EventTypeNormal, eventCertificateIssued, "issued Secret %s for %s", cred.name, cred.leaf.URIs[0])
		}
		return data, renewAt, nil
	}
	sameLabels := true
	for k, v := range cred.labels {
		if cur.Labels[k] != v {
			sameLabels = false
		}
	}
	if why == "" && sameLabels && equalData(cur.Data, data) {
		return data, renewAt, nil
	}
	next := cur.DeepCopy()
	next.Data = data
	next.Annotations = ann
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	maps.Copy(next.Labels, cred.labels)
	// Update carries cur's resourceVersion: a conflict retries the
	// reconcile from fresh data, never issuing over a newer certificate.
	if err := w.Update(ctx, next); err != nil {
		return nil, time.Time{}, fmt.Errorf("updating Secret %s: %w", cred.name, err)
	}
	if why != "" {
		w.recorder.Eventf(owner, corev1.EventTypeNormal, eventCertificateRenewed, "issued Secret %s again: %s; renewal due %s", cred.name, why, renewAt.UTC().Format(time.RFC3339))
	}
	return data, renewAt, nil
}

func equalData(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

func kindOf(o client.Object) string {
	switch o.(type) {
	case *shalev1.RocksDB:
		return "RocksDB"
	case *shalev1.CompactorPool:
		return "CompactorPool"
	}
	return fmt.Sprintf("%T", o)
}

// credentialLabels are the labels of a credential Secret of a RocksDB or
// pool: managed-by (the operator's cache holds only those), the owner,
// what it holds.
func credentialLabels(ownerLabel, owner, kind string) map[string]string {
	return map[string]string{
		shalev1.LabelAppName:      shalev1.AppName,
		shalev1.LabelAppInstance:  owner,
		shalev1.LabelAppManagedBy: shalev1.ManagedBy,
		ownerLabel:                owner,
		shalev1.LabelCredential:   kind,
	}
}

// newToken is a client's bearer token: 32 random bytes, base64url.
func newToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// accessList is the database's access file: each client of the spec with
// its role and the digest of its token (tokens maps client to token; a
// client without one yet is listed without).
func accessList(clients []shalev1.ClientSpec, tokens map[string]string) ([]byte, error) {
	a := auth.AccessList{Clients: []auth.ClientAccess{}}
	for _, c := range clients {
		e := auth.ClientAccess{Name: c.Name, Role: c.Role}
		if t := tokens[c.Name]; t != "" {
			e.TokenSHA256s = []string{auth.TokenDigest(t)}
		}
		a.Clients = append(a.Clients, e)
	}
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return nil, err
	}
	if _, err := auth.ParseAccessList(b); err != nil {
		return nil, err // the servers would refuse it: say so here
	}
	return append(b, '\n'), nil
}

// clientConfig is a client's client.yaml: the database's address and its
// files by relative paths, which `shale kv --config` resolves against the
// file's directory, so mounting the Secret anywhere works.
func clientConfig(db *shalev1.RocksDB, c shalev1.ClientSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Client %s of RocksDB %s/%s, role %s. Mount this Secret (say at\n", c.Name, db.Namespace, db.Name, c.Role)
	fmt.Fprintf(&b, "# /etc/shale/client) and run:\n#   shale kv --config /etc/shale/client/client.yaml get KEY\n")
	fmt.Fprintf(&b, "# Reads may go to the secondaries instead: addr: %s:%d\n", serviceHost(db.ReadOnlyServiceName(), db.Namespace), portKV)
	fmt.Fprintf(&b, "# A client that cannot present a certificate sends the token instead:\n# replace tlsCert and tlsKey by tokenFile: %s\n", keyToken)
	fmt.Fprintf(&b, "addr: %s:%d\n", serviceHost(db.ServiceName(), db.Namespace), portKV)
	fmt.Fprintf(&b, "tlsCA: %s\ntlsCert: %s\ntlsKey: %s\n", keyCA, keyTLSCert, keyTLSKey)
	return b.String()
}

// reconcileCertificates keeps the database's credential Secrets and
// reports CertificatesReady; it returns when the earliest certificate is
// due. With TLS off it removes them.
func (r *rocksDBReconciler) reconcileCertificates(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) (time.Time, error) {
	w := secretWriter{r.Client, r.recorder}
	if !db.TLSEnabled() {
		rep.set(shalev1.ConditionCertificatesReady, metav1.ConditionTrue, shalev1.ReasonTLSDisabled,
			"spec.tls.enabled is false: the database serves plaintext, with no authentication")
		if err := r.deleteCredentials(ctx, db, nil); err != nil {
			return time.Time{}, err
		}
		return time.Time{}, r.issuer.deleteOwnedCertificates(ctx, w, db, client.MatchingLabels{shalev1.LabelRocksDB: db.Name}, nil)
	}
	var (
		renewAt time.Time
		issued  []string
		err     error
	)
	if db.CertManagerIssuer() != nil {
		issued, err = r.ensureIssuedCredentials(ctx, w, db, store)
	} else {
		renewAt, issued, err = r.ensureCredentials(ctx, w, db, store)
		if err == nil {
			// Certificates left from an issuerRef since removed: cert-manager
			// would keep writing the Secrets the operator now signs.
			err = r.issuer.deleteOwnedCertificates(ctx, w, db, client.MatchingLabels{shalev1.LabelRocksDB: db.Name}, nil)
		}
	}
	if err != nil {
		rep.set(shalev1.ConditionCertificatesReady, metav1.ConditionFalse, failReason(err), err.Error())
		if _, ok := err.(*refusal); !ok {
			r.recorder.Event(db, corev1.EventTypeWarning, eventCertificatesFailed, err.Error())
		}
		return renewAt, err
	}
	msg := fmt.Sprintf("Secrets %s are current; the next renewal is due %s", strings.Join(issued, ", "), renewAt.UTC().Format(time.RFC3339))
	if ref := db.CertManagerIssuer(); ref != nil {
		msg = fmt.Sprintf("Certificates for Secrets %s are kept; cert-manager issues and renews them (%s %s)", strings.Join(issued, ", "), ref.Kind, ref.Name)
	}
	if store == nil || db.Status.StoragePath == "" {
		msg += fmt.Sprintf("; %s is issued once the database's location is known", db.PrimaryTLSSecretName())
	}
	rep.set(shalev1.ConditionCertificatesReady, metav1.ConditionTrue, shalev1.ReasonCertificatesIssued, msg)
	return renewAt, nil
}

func (r *rocksDBReconciler) ensureCredentials(ctx context.Context, w secretWriter, db *shalev1.RocksDB, store *shalev1.ObjectStore) (time.Time, []string, error) {
	ca, bundle, err := r.issuer.ca.get(ctx)
	if err != nil {
		return time.Time{}, nil, err
	}
	requested := db.Annotations[shalev1.AnnotationRenewCertificates]
	is := r.issuer
	labels := func(kind string) map[string]string { return credentialLabels(shalev1.LabelRocksDB, db.Name, kind) }
	var (
		earliest time.Time
		issued   []string
	)
	ensure := func(cred credential) (map[string][]byte, error) {
		data, at, err := is.ensure(ctx, w, db, cred, ca, bundle, requested)
		if err != nil {
			return nil, err
		}
		if !at.IsZero() && (earliest.IsZero() || at.Before(earliest)) {
			earliest = at
		}
		issued = append(issued, cred.name)
		return data, nil
	}

	if store != nil && db.Status.StoragePath != "" {
		leaf, err := primaryLeaf(db, store.DatabaseURL(db.Status.StoragePath), is.domain, is.validity)
		if err != nil {
			return earliest, issued, err
		}
		if _, err := ensure(credential{name: db.PrimaryTLSSecretName(), typ: corev1.SecretTypeTLS, labels: labels(shalev1.CredentialPrimary), leaf: &leaf}); err != nil {
			return earliest, issued, err
		}
	}
	sl := secondaryLeaf(db, is.domain, is.validity)
	if _, err := ensure(credential{name: db.SecondaryTLSSecretName(), typ: corev1.SecretTypeTLS, labels: labels(shalev1.CredentialSecondary), leaf: &sl}); err != nil {
		return earliest, issued, err
	}
	// Clients first, then the access list that names their tokens: a new
	// client's token is in its Secret before the servers accept it.
	tokens := map[string]string{}
	for _, c := range db.Spec.Clients {
		leaf := dbClientLeaf(db, c.Name, is.validity)
		l := labels(shalev1.CredentialClient)
		l[shalev1.LabelClientName] = c.Name
		config := clientConfig(db, c)
		data, err := ensure(credential{name: db.ClientSecretName(c.Name), typ: corev1.SecretTypeOpaque, labels: l, leaf: &leaf,
			extra: clientExtra(config)})
		if err != nil {
			return earliest, issued, err
		}
		tokens[c.Name] = string(data[keyToken])
	}
	access, err := accessList(db.Spec.Clients, tokens)
	if err != nil {
		return earliest, issued, err
	}
	if _, err := ensure(credential{name: db.AccessSecretName(), typ: corev1.SecretTypeOpaque, labels: labels(shalev1.CredentialAccess),
		extra: func(map[string][]byte) (map[string][]byte, error) { return map[string][]byte{keyAccess: access}, nil }}); err != nil {
		return earliest, issued, err
	}
	// Then revoke the clients the spec no longer names: the access list
	// above has dropped them already.
	keep := map[string]bool{}
	for _, c := range db.Spec.Clients {
		keep[c.Name] = true
	}
	err = r.deleteCredentials(ctx, db, func(s *corev1.Secret) bool {
		return s.Labels[shalev1.LabelCredential] != shalev1.CredentialClient || keep[s.Labels[shalev1.LabelClientName]]
	})
	return earliest, issued, err
}

// failReason is CertificatesReady's reason for err.
func failReason(err error) string {
	if r, ok := err.(*refusal); ok && r.reason == shalev1.ReasonCertificateManagerMissing {
		return r.reason
	}
	return shalev1.ReasonCertificatesFailed
}

// ensureIssuedCredentials keeps the database's Certificates (cert-manager
// issues them) and its own Secrets: each client's token and client.yaml
// (the Secret is made before its Certificate, so cert-manager adds its
// keys to it) and the access list. It returns the Secret names.
func (r *rocksDBReconciler) ensureIssuedCredentials(ctx context.Context, w secretWriter, db *shalev1.RocksDB, store *shalev1.ObjectStore) ([]string, error) {
	ok, err := r.issuer.certManager.installed(r.Client, r.issuer.now())
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, certManagerMissing("RocksDB", db.Name)
	}
	ref := *db.CertManagerIssuer()
	is := r.issuer
	labels := func(kind string) map[string]string { return credentialLabels(shalev1.LabelRocksDB, db.Name, kind) }
	var issued []string
	cert := func(secret string, l map[string]string, leaf pki.Leaf) error {
		if err := ensureCertificate(ctx, w, db, secret, l, certificateSpec(secret, leaf, ref, l)); err != nil {
			return err
		}
		if err := adoptIssuedSecret(ctx, w, db, secret); err != nil {
			return err
		}
		issued = append(issued, secret)
		return nil
	}
	// The operator's own identity from the same issuer: the servers trust
	// only that issuer, and the operator reads their Status with it.
	if err := cert(db.OperatorTLSSecretName(), labels(shalev1.CredentialOperator), operatorLeaf(r.creds.id, is.validity)); err != nil {
		return issued, err
	}
	if store != nil && db.Status.StoragePath != "" {
		leaf, err := primaryLeaf(db, store.DatabaseURL(db.Status.StoragePath), is.domain, is.validity)
		if err != nil {
			return issued, err
		}
		if err := cert(db.PrimaryTLSSecretName(), labels(shalev1.CredentialPrimary), leaf); err != nil {
			return issued, err
		}
	}
	if err := cert(db.SecondaryTLSSecretName(), labels(shalev1.CredentialSecondary), secondaryLeaf(db, is.domain, is.validity)); err != nil {
		return issued, err
	}
	tokens := map[string]string{}
	for _, c := range db.Spec.Clients {
		l := labels(shalev1.CredentialClient)
		l[shalev1.LabelClientName] = c.Name
		data, _, err := is.ensure(ctx, w, db, credential{name: db.ClientSecretName(c.Name), typ: corev1.SecretTypeOpaque, labels: l,
			extra: clientExtra(clientConfig(db, c))}, nil, nil, "")
		if err != nil {
			return issued, err
		}
		tokens[c.Name] = string(data[keyToken])
		if err := cert(db.ClientSecretName(c.Name), l, dbClientLeaf(db, c.Name, is.validity)); err != nil {
			return issued, err
		}
	}
	access, err := accessList(db.Spec.Clients, tokens)
	if err != nil {
		return issued, err
	}
	if _, _, err := is.ensure(ctx, w, db, credential{name: db.AccessSecretName(), typ: corev1.SecretTypeOpaque, labels: labels(shalev1.CredentialAccess),
		extra: func(map[string][]byte) (map[string][]byte, error) { return map[string][]byte{keyAccess: access}, nil }}, nil, nil, ""); err != nil {
		return issued, err
	}
	issued = append(issued, db.AccessSecretName())
	keep := map[string]bool{}
	for _, c := range db.Spec.Clients {
		keep[c.Name] = true
	}
	// Revoke removed clients: their Certificates first (cert-manager
	// would make their Secrets again), then their Secrets.
	if err := r.issuer.deleteOwnedCertificates(ctx, w, db, client.MatchingLabels{shalev1.LabelRocksDB: db.Name}, func(c *unstructured.Unstructured) bool {
		return c.GetLabels()[shalev1.LabelCredential] != shalev1.CredentialClient || keep[c.GetLabels()[shalev1.LabelClientName]]
	}); err != nil {
		return issued, err
	}
	return issued, r.deleteCredentials(ctx, db, func(s *corev1.Secret) bool {
		return s.Labels[shalev1.LabelCredential] != shalev1.CredentialClient || keep[s.Labels[shalev1.LabelClientName]]
	})
}

// clientExtra keeps a client's token (made once) and writes its
// client.yaml.
func clientExtra(config string) func(cur map[string][]byte) (map[string][]byte, error) {
	return func(cur map[string][]byte) (map[string][]byte, error) {
		tok := string(cur[keyToken])
		if tok == "" {
			var err error
			if tok, err = newToken(); err != nil {
				return nil, err
			}
		}
		return map[string][]byte{keyToken: []byte(tok), keyClientConfig: []byte(config)}, nil
	}
}

// deleteCredentials deletes the credential Secrets of the database that
// keep does not keep (nil: all).
func (r *rocksDBReconciler) deleteCredentials(ctx context.Context, db *shalev1.RocksDB, keep func(*corev1.Secret) bool) error {
	return deleteOwnedSecrets(ctx, secretWriter{r.Client, r.recorder}, db, client.MatchingLabels{shalev1.LabelRocksDB: db.Name, shalev1.LabelAppManagedBy: shalev1.ManagedBy}, keep)
}

func deleteOwnedSecrets(ctx context.Context, w secretWriter, owner credentialOwner, sel client.MatchingLabels, keep func(*corev1.Secret) bool) error {
	var secs corev1.SecretList
	if err := w.List(ctx, &secs, client.InNamespace(owner.GetNamespace()), sel); err != nil {
		return err
	}
	for i := range secs.Items {
		s := &secs.Items[i]
		if s.Labels[shalev1.LabelCredential] == "" || !metav1.IsControlledBy(s, owner) || s.DeletionTimestamp != nil || (keep != nil && keep(s)) {
			continue
		}
		uid := s.UID
		if err := w.Delete(ctx, s, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if c := s.Labels[shalev1.LabelClientName]; c != "" {
			w.recorder.Eventf(owner, corev1.EventTypeNormal, eventClientRevoked, "client %s revoked: removed from the access list, Secret %s deleted", c, s.Name)
		}
	}
	return nil
}

// reconcilePoolCertificates keeps the pool's scheduler and worker
// certificates and reports CertificatesReady; it returns when the earlier
// is due.
func (r *compactorPoolReconciler) reconcilePoolCertificates(ctx context.Context, pool *shalev1.CompactorPool, rep *poolReport) (time.Time, error) {
	w := secretWriter{r.Client, r.recorder}
	sel := client.MatchingLabels{shalev1.LabelCompactorPool: pool.Name, shalev1.LabelAppManagedBy: shalev1.ManagedBy}
	if !pool.TLSEnabled() {
		rep.set(shalev1.ConditionCertificatesReady, metav1.ConditionTrue, shalev1.ReasonTLSDisabled,
			"spec.tls.enabled is false: the scheduler serves plaintext, with no authentication")
		if err := deleteOwnedSecrets(ctx, w, pool, sel, nil); err != nil {
			return time.Time{}, err
		}
		return time.Time{}, r.issuer.deleteOwnedCertificates(ctx, w, pool, client.MatchingLabels{shalev1.LabelCompactorPool: pool.Name}, nil)
	}
	fail := func(err error) (time.Time, error) {
		rep.set(shalev1.ConditionCertificatesReady, metav1.ConditionFalse, failReason(err), err.Error())
		if _, ok := err.(*refusal); !ok {
			r.recorder.Event(pool, corev1.EventTypeWarning, eventCertificatesFailed, err.Error())
		}
		return time.Time{}, err
	}
	labels := func(kind string) map[string]string {
		return credentialLabels(shalev1.LabelCompactorPool, pool.Name, kind)
	}
	if ref := pool.CertManagerIssuer(); ref != nil {
		ok, err := r.issuer.certManager.installed(r.Client, r.issuer.now())
		if err != nil {
			return fail(err)
		}
		if !ok {
			return fail(certManagerMissing("CompactorPool", pool.Name))
		}
		for _, c := range []struct {
			secret, kind string
			leaf         pki.Leaf
		}{
			{pool.SchedulerTLSSecretName(), shalev1.CredentialScheduler, schedulerLeaf(pool, r.issuer.domain, r.issuer.validity)},
			{pool.WorkerTLSSecretName(), shalev1.CredentialWorker, workerLeaf(pool, r.issuer.validity)},
			{pool.OperatorTLSSecretName(), shalev1.CredentialOperator, operatorLeaf(r.creds.id, r.issuer.validity)},
		} {
			if err := ensureCertificate(ctx, w, pool, c.secret, labels(c.kind), certificateSpec(c.secret, c.leaf, *ref, labels(c.kind))); err != nil {
				return fail(err)
			}
			if err := adoptIssuedSecret(ctx, w, pool, c.secret); err != nil {
				return fail(err)
			}
		}
		rep.set(shalev1.ConditionCertificatesReady, metav1.ConditionTrue, shalev1.ReasonCertificatesIssued,
			fmt.Sprintf("Certificates for Secrets %s and %s are kept; cert-manager issues and renews them (%s %s)", pool.SchedulerTLSSecretName(), pool.WorkerTLSSecretName(), ref.Kind, ref.Name))
		return time.Time{}, nil
	}
	if err := r.issuer.deleteOwnedCertificates(ctx, w, pool, client.MatchingLabels{shalev1.LabelCompactorPool: pool.Name}, nil); err != nil {
		return fail(err)
	}
	ca, bundle, err := r.issuer.ca.get(ctx)
	if err != nil {
		return fail(err)
	}
	requested := pool.Annotations[shalev1.AnnotationRenewCertificates]
	sl := schedulerLeaf(pool, r.issuer.domain, r.issuer.validity)
	wl := workerLeaf(pool, r.issuer.validity)
	var earliest time.Time
	for _, cred := range []credential{
		{name: pool.SchedulerTLSSecretName(), typ: corev1.SecretTypeTLS, labels: labels(shalev1.CredentialScheduler), leaf: &sl},
		{name: pool.WorkerTLSSecretName(), typ: corev1.SecretTypeTLS, labels: labels(shalev1.CredentialWorker), leaf: &wl},
	} {
		_, at, err := r.issuer.ensure(ctx, w, pool, cred, ca, bundle, requested)
		if err != nil {
			return fail(err)
		}
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	rep.set(shalev1.ConditionCertificatesReady, metav1.ConditionTrue, shalev1.ReasonCertificatesIssued,
		fmt.Sprintf("Secrets %s and %s are current; the next renewal is due %s", pool.SchedulerTLSSecretName(), pool.WorkerTLSSecretName(), earliest.UTC().Format(time.RFC3339)))
	return earliest, nil
}

// requeueBy brings res's requeue forward to at (zero: no change).
func requeueBy(res time.Duration, at time.Time, now time.Time) time.Duration {
	if at.IsZero() {
		return res
	}
	d := max(at.Sub(now), time.Second)
	if res == 0 || d < res {
		return d
	}
	return res
}
