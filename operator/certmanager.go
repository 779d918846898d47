package operator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/pki"
)

// Certificates from cert-manager (docs/operator.md, "Certificates from
// cert-manager"). With spec.tls.issuerRef the operator signs nothing for
// the RocksDB or pool: for each Secret it would issue it keeps a
// cert-manager Certificate (cert-manager.io/v1, handled as unstructured
// so cert-manager's module is no dependency) with the same secretName and
// the same names as its own leaves, and cert-manager writes tls.crt,
// tls.key and ca.crt into that Secret. The Pods mount the same Secrets.
// A client's token and client.yaml stay the operator's, in the same
// Secret: the operator makes that Secret before the Certificate and only
// ever rewrites its own keys, and cert-manager writes only its keys into
// a Secret that exists.

// certificateGVK is cert-manager's Certificate.
var certificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;update;patch;delete

// certificateSpec is the spec of the Certificate that has cert-manager
// issue leaf into Secret secretName: the leaf's common name, identity
// URIs, names and uses; a fresh ECDSA P-256 key at every issue; renewal
// a third of the validity before expiry, as the operator's own renewal
// (two thirds into the life); secretLabels go on the Secret so the
// operator's cache and selectors see it.
func certificateSpec(secretName string, leaf pki.Leaf, ref shalev1.IssuerRef, secretLabels map[string]string) map[string]any {
	spec := map[string]any{
		"secretName": secretName,
		"commonName": leaf.CommonName,
		"duration":   leaf.Validity.String(),
		// The validity rounded to whole seconds keeps the string stable.
		"renewBefore": (leaf.Validity / 3).Truncate(time.Second).String(),
		"privateKey": map[string]any{
			"algorithm":      "ECDSA",
			"size":           int64(256),
			"rotationPolicy": "Always",
		},
		"issuerRef": map[string]any{"name": ref.Name, "kind": ref.Kind, "group": ref.Group},
	}
	uris := make([]any, 0, len(leaf.URIs))
	for _, u := range leaf.URIs {
		uris = append(uris, u.String())
	}
	spec["uris"] = uris
	if len(leaf.DNSNames) > 0 {
		dns := make([]any, 0, len(leaf.DNSNames))
		for _, n := range leaf.DNSNames {
			dns = append(dns, n)
		}
		spec["dnsNames"] = dns
	}
	if len(leaf.IPs) > 0 {
		ips := make([]any, 0, len(leaf.IPs))
		for _, ip := range leaf.IPs {
			ips = append(ips, ip.String())
		}
		spec["ipAddresses"] = ips
	}
	usages := []any{"digital signature"}
	if leaf.Server {
		usages = append(usages, "server auth")
	}
	if leaf.Client {
		usages = append(usages, "client auth")
	}
	spec["usages"] = usages
	if len(secretLabels) > 0 {
		l := map[string]any{}
		for k, v := range secretLabels {
			l[k] = v
		}
		spec["secretTemplate"] = map[string]any{"labels": l}
	}
	return spec
}

// certManagerRecheck is how long "cert-manager is not installed" is
// believed: the RESTMapper asks the API server's discovery again at every
// lookup of a group it does not know, and most clusters have no
// cert-manager while every reconcile looks.
const certManagerRecheck = 10 * time.Second

// certManagerProbe says whether the API server serves cert-manager's
// Certificate (its CRD is installed), remembering a no briefly.
type certManagerProbe struct {
	mu      sync.Mutex
	missing time.Time // when it was last found missing
}

func (p *certManagerProbe) installed(c client.Client, now time.Time) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.missing.IsZero() && now.Sub(p.missing) < certManagerRecheck {
		return false, nil
	}
	_, err := c.RESTMapper().RESTMapping(certificateGVK.GroupKind(), certificateGVK.Version)
	if meta.IsNoMatchError(err) {
		p.missing = now
		return false, nil
	}
	p.missing = time.Time{}
	return err == nil, err
}

// certManagerMissing is the refusal when the CRD is not installed.
func certManagerMissing(kind, name string) *refusal {
	return &refusal{shalev1.ReasonCertificateManagerMissing, fmt.Sprintf(
		"%s %s names a cert-manager issuer (spec.tls.issuerRef) but cert-manager is not installed (no Certificate CRD, cert-manager.io/v1): install cert-manager, or remove spec.tls.issuerRef to have the operator issue the certificates",
		kind, name)}
}

// ensureCertificate makes the Certificate name (owned by owner) have spec
// and labels: created if missing, updated when it differs.
func ensureCertificate(ctx context.Context, w secretWriter, owner credentialOwner, name string, labels map[string]string, spec map[string]any) error {
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(certificateGVK)
	err := w.Get(ctx, types.NamespacedName{Namespace: owner.GetNamespace(), Name: name}, cur)
	if apierrors.IsNotFound(err) {
		obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		obj.SetGroupVersionKind(certificateGVK)
		obj.SetNamespace(owner.GetNamespace())
		obj.SetName(name)
		obj.SetLabels(labels)
		if err := controllerutil.SetControllerReference(owner, obj, w.Scheme()); err != nil {
			return err
		}
		if err := w.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating Certificate %s: %w", name, err)
		}
		w.recorder.Eventf(owner, "Normal", eventCertificateRequested, "Certificate %s made for Secret %s (cert-manager issues it)", name, spec["secretName"])
		return nil
	}
	if err != nil {
		return fmt.Errorf("Certificate %s: %w", name, err)
	}
	if !metav1.IsControlledBy(cur, owner) {
		return &refusal{eventSecretConflict, fmt.Sprintf("Certificate %s exists and is not owned by %s %s; delete it or rename the %s",
			name, kindOf(owner), owner.GetName(), kindOf(owner))}
	}
	curSpec, _, _ := unstructured.NestedMap(cur.Object, "spec")
	sameLabels := true
	for k, v := range labels {
		if cur.GetLabels()[k] != v {
			sameLabels = false
		}
	}
	// Only the fields the operator sets are compared: defaults another
	// controller adds do not start an update loop.
	same := sameLabels
	for k, v := range spec {
		if !equality.Semantic.DeepEqual(curSpec[k], v) {
			same = false
		}
	}
	if same {
		return nil
	}
	next := cur.DeepCopy()
	if curSpec == nil {
		curSpec = map[string]any{}
	}
	for k, v := range spec {
		curSpec[k] = v
	}
	next.Object["spec"] = curSpec
	l := next.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range labels {
		l[k] = v
	}
	next.SetLabels(l)
	if err := w.Update(ctx, next); err != nil {
		return fmt.Errorf("updating Certificate %s: %w", name, err)
	}
	return nil
}

// deleteOwnedCertificates deletes the Certificates of owner selected by
// sel that keep does not keep (nil: all). Without cert-manager there are
// none.
func (is *issuer) deleteOwnedCertificates(ctx context.Context, w secretWriter, owner credentialOwner, sel client.MatchingLabels, keep func(*unstructured.Unstructured) bool) error {
	if ok, err := is.certManager.installed(w.Client, is.now()); err != nil || !ok {
		return err
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(certificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := w.List(ctx, list, client.InNamespace(owner.GetNamespace()), sel); err != nil {
		return err
	}
	for i := range list.Items {
		c := &list.Items[i]
		if !metav1.IsControlledBy(c, owner) || c.GetDeletionTimestamp() != nil || (keep != nil && keep(c)) {
			continue
		}
		uid := c.GetUID()
		if err := w.Delete(ctx, c, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// annotationCertificateName is what cert-manager writes on a Secret it
// issued into: the Certificate's name.
const annotationCertificateName = "cert-manager.io/certificate-name"

// adoptIssuedSecret makes the owner the controller of the Secret name
// that cert-manager wrote for the owner's Certificate of the same name:
// deleting the RocksDB or pool then deletes the private key with it
// (cert-manager leaves Secrets behind by default), and a later switch
// back to the operator's CA finds the Secret its own. Not written yet:
// nothing to do; written for another Certificate or owned by another
// object: left alone (ensureCertificate has refused a foreign
// Certificate already).
func adoptIssuedSecret(ctx context.Context, w secretWriter, owner credentialOwner, name string) error {
	var s corev1.Secret
	err := w.Get(ctx, types.NamespacedName{Namespace: owner.GetNamespace(), Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if metav1.GetControllerOf(&s) != nil || s.Annotations[annotationCertificateName] != name {
		return nil
	}
	next := s.DeepCopy()
	if err := controllerutil.SetControllerReference(owner, next, w.Scheme()); err != nil {
		return err
	}
	return w.Patch(ctx, next, client.MergeFromWithOptions(&s, client.MergeFromWithOptimisticLock{}))
}

// issuedDial is how the operator dials a server whose certificate comes
// from cert-manager: with its own client certificate from the same
// issuer, kept in the Secret secret (the operator's CA is not trusted
// there, and it cannot check those servers' certificates either),
// verifying the server by serverName.
func issuedDial(ctx context.Context, c client.Reader, ns, secret, serverName string) (grpc.DialOption, error) {
	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, &s); err != nil {
		return nil, fmt.Errorf("the operator's certificate from cert-manager (Secret %s/%s): %w", ns, secret, err)
	}
	t, err := auth.NewTLSFromPEM(s.Data[keyTLSCert], s.Data[keyTLSKey], s.Data[keyCA])
	if err != nil {
		return nil, fmt.Errorf("the operator's certificate from cert-manager (Secret %s/%s) is not usable yet: %w", ns, secret, err)
	}
	return grpc.WithTransportCredentials(t.ClientCredentials(serverName)), nil
}
