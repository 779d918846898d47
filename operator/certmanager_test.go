package operator

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/pki"
)

// TestCertificateSpec: a Certificate asks cert-manager for exactly the
// certificate the operator would issue itself.
func TestCertificateSpec(t *testing.T) {
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "orders"}}
	pool := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "pool"}}
	primary, err := primaryLeaf(db, "s3://hot/prod/orders", "cluster.local", 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issuer := shalev1.IssuerRef{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"}
	cluster := shalev1.IssuerRef{Name: "corp", Kind: "ClusterIssuer", Group: "cert-manager.io"}
	for _, tc := range []struct {
		name     string
		secret   string
		leaf     pki.Leaf
		ref      shalev1.IssuerRef
		uris     []any
		dns      []any
		ips      []any
		usages   []any
		duration string
		renew    string
	}{
		{"primary", "orders-primary-tls", primary, issuer,
			[]any{"shale://prod/primary/orders", "s3://hot/prod/orders"},
			[]any{"orders-rw", "orders-rw.prod", "orders-rw.prod.svc", "orders-rw.prod.svc.cluster.local", "localhost"},
			[]any{"127.0.0.1"}, []any{"digital signature", "server auth", "client auth"}, "2160h0m0s", "720h0m0s"},
		{"client", "orders-client-app", dbClientLeaf(db, "app", 24*time.Hour), cluster,
			[]any{"shale://prod/client/orders/app"}, nil, nil, []any{"digital signature", "client auth"}, "24h0m0s", "8h0m0s"},
		{"worker", "pool-worker-tls", workerLeaf(pool, 10*time.Hour), issuer,
			[]any{"shale://prod/worker/pool"}, nil, nil, []any{"digital signature", "client auth"}, "10h0m0s", "3h20m0s"},
		{"scheduler", "pool-scheduler-tls", schedulerLeaf(pool, "example.org", time.Hour), cluster,
			[]any{"shale://prod/scheduler/pool"},
			[]any{"pool-scheduler", "pool-scheduler.prod", "pool-scheduler.prod.svc", "pool-scheduler.prod.svc.example.org", "localhost"},
			[]any{"127.0.0.1"}, []any{"digital signature", "server auth", "client auth"}, "1h0m0s", "20m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels := map[string]string{shalev1.LabelCredential: "x"}
			spec := certificateSpec(tc.secret, tc.leaf, tc.ref, labels)
			check := func(field string, got, want any) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s = %v, want %v", field, got, want)
				}
			}
			check("secretName", spec["secretName"], tc.secret)
			check("commonName", spec["commonName"], tc.leaf.CommonName)
			check("uris", spec["uris"], tc.uris)
			// A client certificate names no host: the fields are left out.
			for field, want := range map[string][]any{"dnsNames": tc.dns, "ipAddresses": tc.ips} {
				if got, ok := spec[field]; ok != (want != nil) || fmt.Sprint(got) != fmt.Sprint(want) && want != nil {
					t.Errorf("%s = %v (set %v), want %v", field, got, ok, want)
				}
			}
			check("usages", spec["usages"], tc.usages)
			check("duration", spec["duration"], tc.duration)
			check("renewBefore", spec["renewBefore"], tc.renew)
			check("privateKey", spec["privateKey"], map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"})
			check("issuerRef", spec["issuerRef"], map[string]any{"name": tc.ref.Name, "kind": tc.ref.Kind, "group": tc.ref.Group})
			check("secretTemplate", spec["secretTemplate"], map[string]any{"labels": map[string]any{shalev1.LabelCredential: "x"}})
			// The identity URI parses back to the identity the servers
			// authorise.
			u, err := url.Parse(tc.uris[0].(string))
			if err != nil || u.String() != tc.leaf.URIs[0].String() {
				t.Errorf("uri %v (%v), want %v", u, err, tc.leaf.URIs[0])
			}
		})
	}
	// No spec.tls (the common case): the operator's CA.
	if r := (&shalev1.RocksDB{}).CertManagerIssuer(); r != nil {
		t.Errorf("issuerRef without spec.tls: %+v, want none", r)
	}
	if r := (&shalev1.CompactorPool{}).CertManagerIssuer(); r != nil {
		t.Errorf("pool issuerRef without spec.tls: %+v, want none", r)
	}
	// The defaults of an issuerRef.
	d := &shalev1.RocksDB{Spec: shalev1.RocksDBSpec{TLS: &shalev1.TLSSpec{IssuerRef: &shalev1.IssuerRef{Name: "ca"}}}}
	if r := d.CertManagerIssuer(); r == nil || *r != issuer {
		t.Errorf("defaulted issuerRef %+v, want %+v", r, issuer)
	}
	off := false
	d.Spec.TLS.Enabled = &off
	if r := d.CertManagerIssuer(); r != nil {
		t.Errorf("issuerRef with TLS off: %+v, want none", r)
	}
}

// certificate reads Certificate ns/name.
func (h *harness) certificate(ns, name string) *unstructured.Unstructured {
	h.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(certificateGVK)
	eventually(h.t, "Certificate "+name, func() (bool, string) {
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, u)
		return err == nil, fmt.Sprint(err)
	})
	return u
}

// TestCertManagerIssuer: with spec.tls.issuerRef the operator says when
// cert-manager is missing; once it is installed it makes a Certificate
// per certificate and signs none itself; a Secret cert-manager writes is
// what the Pods mount and what clients authenticate with, and tokens and
// the access list stay the operator's.
func TestCertManagerIssuer(t *testing.T) {
	h := startOperator(t)
	ns := h.namespace("cm")
	sec, store, db := h.samples(ns)
	db.Spec.TLS = &shalev1.TLSSpec{IssuerRef: &shalev1.IssuerRef{Name: "corp-ca"}}
	db.Spec.Clients = []shalev1.ClientSpec{{Name: "app", Role: "write"}}
	pool := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: shalev1.CompactorPoolSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: store.Name},
			TLS: &shalev1.TLSSpec{IssuerRef: &shalev1.IssuerRef{Name: "corp", Kind: "ClusterIssuer"}}}}
	h.create(sec, store, db, pool)

	// No cert-manager: the conditions say so and name the fix.
	eventually(t, "the pool's CertificateManagerMissing", func() (bool, string) {
		var p shalev1.CompactorPool
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "pool"}, &p); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(p.Status.Conditions, shalev1.ConditionCertificatesReady)
		return c != nil && c.Reason == shalev1.ReasonCertificateManagerMissing && strings.Contains(c.Message, "cert-manager"), fmt.Sprint(c)
	})
	got := h.waitDB(ns, "orders", "CertificateManagerMissing", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionCertificatesReady, metav1.ConditionFalse, shalev1.ReasonCertificateManagerMissing), statusString(db)
	})
	if c := condMessage(got, shalev1.ConditionCertificatesReady); !strings.Contains(c, "cert-manager is not installed") || !strings.Contains(c, "spec.tls.issuerRef") {
		t.Errorf("CertificatesReady message %q: want cert-manager and spec.tls.issuerRef named", c)
	}

	// Installing cert-manager (its CRD) is picked up.
	if _, err := envtest.InstallCRDs(h.env.Config, envtest.CRDInstallOptions{Paths: []string{"testdata/certmanager"}}); err != nil {
		t.Fatal(err)
	}
	db = h.waitDB(ns, "orders", "CertificatesReady", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionCertificatesReady, metav1.ConditionTrue, shalev1.ReasonCertificatesIssued) && db.Status.StoragePath != "", statusString(db)
	})
	dbURL := store.DatabaseURL(db.Status.StoragePath)
	for _, tc := range []struct {
		name   string
		uris   []string
		dns    string
		usages []string
	}{
		{"orders-primary-tls", []string{"shale://cm/primary/orders", dbURL}, "orders-rw.cm.svc", []string{"digital signature", "server auth", "client auth"}},
		{"orders-secondary-tls", []string{"shale://cm/secondary/orders"}, "orders-ro.cm.svc", []string{"digital signature", "server auth", "client auth"}},
		{"orders-client-app", []string{"shale://cm/client/orders/app"}, "", []string{"digital signature", "client auth"}},
		// The operator's identity from the same issuer, to read Status.
		{"orders-operator-tls", []string{"shale://" + operatorNS + "/operator"}, "", []string{"digital signature", "client auth"}},
	} {
		c := h.certificate(ns, tc.name)
		if !metav1.IsControlledBy(c, db) {
			t.Errorf("Certificate %s owners %v", tc.name, c.GetOwnerReferences())
		}
		secretName, _, _ := unstructured.NestedString(c.Object, "spec", "secretName")
		uris, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "uris")
		dns, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "dnsNames")
		usages, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "usages")
		ref, _, _ := unstructured.NestedStringMap(c.Object, "spec", "issuerRef")
		if secretName != tc.name || !slices.Equal(uris, tc.uris) || !slices.Equal(usages, tc.usages) ||
			(tc.dns != "" && !slices.Contains(dns, tc.dns)) || (tc.dns == "" && len(dns) > 0) {
			t.Errorf("Certificate %s: secretName %s uris %v dnsNames %v usages %v", tc.name, secretName, uris, dns, usages)
		}
		if fmt.Sprint(ref) != fmt.Sprint(map[string]string{"name": "corp-ca", "kind": "Issuer", "group": "cert-manager.io"}) {
			t.Errorf("Certificate %s issuerRef %v", tc.name, ref)
		}
	}
	for name, usages := range map[string][]string{
		"pool-scheduler-tls": {"digital signature", "server auth", "client auth"},
		"pool-worker-tls":    {"digital signature", "client auth"},
		"pool-operator-tls":  {"digital signature", "client auth"},
	} {
		c := h.certificate(ns, name)
		got, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "usages")
		ref, _, _ := unstructured.NestedString(c.Object, "spec", "issuerRef", "kind")
		if !slices.Equal(got, usages) || ref != "ClusterIssuer" || !metav1.IsControlledBy(c, pool) {
			t.Errorf("Certificate %s: usages %v issuer kind %s owners %v", name, got, ref, c.GetOwnerReferences())
		}
	}

	// The operator signed nothing: no certificate Secrets, and the
	// client's Secret holds only its token and client.yaml.
	for _, name := range []string{"orders-primary-tls", "orders-secondary-tls", "pool-scheduler-tls", "pool-worker-tls"} {
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("Secret %s: %v, want none (cert-manager makes it)", name, err)
		}
	}
	cs := h.secret(ns, "orders-client-app")
	token := string(cs.Data[keyToken])
	if token == "" || len(cs.Data[keyClientConfig]) == 0 || cs.Data[keyTLSCert] != nil {
		t.Errorf("orders-client-app keys %v: want token and client.yaml only", slices.Sorted(maps.Keys(cs.Data)))
	}
	h.secret(ns, "orders-access")

	// cert-manager's part, played by a test CA: it writes the primary's
	// Secret and adds its keys to the client's.
	caCert, caKey, err := pki.NewCA("test issuer", time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := primaryLeaf(db, dbURL, "cluster.local", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pc, pk, err := ca.Issue(pl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-primary-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{keyTLSCert: pc, keyTLSKey: pk, keyCA: caCert}})
	cc, ck, err := ca.Issue(dbClientLeaf(db, "app", time.Hour), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cs.Data[keyTLSCert], cs.Data[keyTLSKey], cs.Data[keyCA] = cc, ck, caCert
	if err := h.c.Update(h.ctx, cs); err != nil {
		t.Fatal(err)
	}

	// A reconcile (a second client) keeps cert-manager's keys and the
	// first client's token.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Spec.Clients = append(db.Spec.Clients, shalev1.ClientSpec{Name: "reports", Role: "read"})
	})
	h.certificate(ns, "orders-client-reports")
	eventually(t, "reports in the access list", func() (bool, string) {
		a := h.secret(ns, "orders-access")
		return strings.Contains(string(a.Data[keyAccess]), `"reports"`), string(a.Data[keyAccess])
	})
	cs = h.secret(ns, "orders-client-app")
	if string(cs.Data[keyToken]) != token || string(cs.Data[keyTLSCert]) != string(cc) || string(cs.Data[keyCA]) != string(caCert) {
		t.Errorf("orders-client-app after a reconcile: token kept %v, cert-manager's keys kept %v", string(cs.Data[keyToken]) == token, string(cs.Data[keyTLSCert]) == string(cc))
	}

	// The primary mounts the Secret cert-manager wrote, and a client
	// authenticates with its cert-manager certificate or its token.
	pod := h.waitPod(ns, "orders-primary-1")
	checkSecretMount(t, pod.Spec, pod.Spec.Containers[0], "tls", "orders-primary-tls", "/etc/shale/tls")
	checkSecretMount(t, pod.Spec, pod.Spec.Containers[0], "access", "orders-access", "/etc/shale/access")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := h.guardedKV(lis, ns, "orders-primary-tls", "orders-access", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY})
	dir := h.mountSecret(cs)
	for _, cfg := range []auth.ClientConfig{
		{TLS: auth.TLSFiles{Cert: filepath.Join(dir, keyTLSCert), Key: filepath.Join(dir, keyTLSKey), CA: filepath.Join(dir, keyCA)}, ServerName: "orders-rw.cm.svc"},
		{TLS: auth.TLSFiles{CA: filepath.Join(dir, keyCA)}, TokenFile: filepath.Join(dir, keyToken), ServerName: "orders-rw.cm.svc"},
	} {
		conn, err := cfg.Dial(lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		kv := kvv1.NewKVClient(conn)
		if _, err := kv.Status(h.ctx, &kvv1.StatusRequest{}); err != nil {
			t.Errorf("Status with %+v: %v", cfg, err)
		}
		if _, err := kv.Put(h.ctx, &kvv1.PutRequest{Key: []byte("k")}); status.Code(err) != codes.Unimplemented {
			t.Errorf("Put with %+v: %v, want past the guard (Unimplemented)", cfg, err)
		}
		conn.Close()
	}
	for _, id := range g.callers() {
		if id.Kind != auth.KindClient || id.Client != "app" {
			t.Errorf("caller %+v, want client app", id)
		}
	}

	// The operator reads a secondary's Status with its certificate from
	// the issuer (the servers trust only the issuer's CA): before
	// cert-manager has written it, the dial names the Secret; after, the
	// server sees the operator. cert-manager's Secrets become the
	// database's (deleted with it).
	r := &rocksDBReconciler{Client: h.c}
	if _, err := r.kvDial(h.ctx, db, db.ReadOnlyServiceName()); err == nil || !strings.Contains(err.Error(), "orders-operator-tls") {
		t.Errorf("dial before cert-manager wrote orders-operator-tls: %v, want the Secret named", err)
	}
	issue := func(name string, leaf pki.Leaf) {
		c, k, err := ca.Issue(leaf, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		h.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      credentialLabels(shalev1.LabelRocksDB, "orders", "x"),
			Annotations: map[string]string{annotationCertificateName: name}},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{keyTLSCert: c, keyTLSKey: k, keyCA: caCert}})
	}
	issue("orders-secondary-tls", secondaryLeaf(db, "cluster.local", time.Hour))
	issue("orders-operator-tls", operatorLeaf(auth.Identity{Namespace: operatorNS, Kind: auth.KindOperator}, time.Hour))
	for _, name := range []string{"orders-secondary-tls", "orders-operator-tls"} {
		eventually(t, name+" adopted", func() (bool, string) {
			s := h.secret(ns, name)
			return metav1.IsControlledBy(s, db), fmt.Sprint(s.OwnerReferences)
		})
	}
	slis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sg := h.guardedKV(slis, ns, "orders-secondary-tls", "orders-access", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_SECONDARY})
	dial, err := r.kvDial(h.ctx, db, db.ReadOnlyServiceName())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(slis.Addr().String(), dial)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kvv1.NewKVClient(conn).Status(h.ctx, &kvv1.StatusRequest{}); err != nil || st.Role != kvv1.Role_ROLE_SECONDARY {
		t.Errorf("the operator's Status of a secondary: %v, %v", st, err)
	}
	conn.Close()
	if c := sg.callers(); len(c) != 1 || c[0].Kind != auth.KindOperator || c[0].Namespace != operatorNS {
		t.Errorf("Status callers %v, want the operator of %s", c, operatorNS)
	}

	// Removing a client deletes its Certificate (cert-manager would
	// write its Secret again) and its Secret.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Clients = db.Spec.Clients[:1] })
	h.waitSecretGone(ns, "orders-client-reports")
	eventually(t, "Certificate orders-client-reports gone", func() (bool, string) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(certificateGVK)
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-client-reports"}, u)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func condMessage(db *shalev1.RocksDB, t string) string {
	for _, c := range db.Status.Conditions {
		if c.Type == t {
			return c.Message
		}
	}
	return ""
}

// TestCertManagerProbe: "not installed" is believed for a short while
// (discovery is asked again at every lookup of an unknown group), and an
// installed cert-manager is seen once that passes.
func TestCertManagerProbe(t *testing.T) {
	m := apimeta.NewDefaultRESTMapper(nil)
	c := fake.NewClientBuilder().WithRESTMapper(m).Build()
	var p certManagerProbe
	t0 := time.Unix(1_700_000_000, 0)
	for _, step := range []struct {
		name    string
		install bool
		at      time.Duration
		want    bool
	}{
		{"missing", false, 0, false},
		{"installed, within the recheck", true, certManagerRecheck - time.Second, false},
		{"installed, after the recheck", false, certManagerRecheck, true},
		{"still installed", false, certManagerRecheck + time.Second, true},
	} {
		if step.install {
			m.Add(certificateGVK, apimeta.RESTScopeNamespace)
		}
		got, err := p.installed(c, t0.Add(step.at))
		if err != nil || got != step.want {
			t.Errorf("%s: installed %v (%v), want %v", step.name, got, err, step.want)
		}
	}
}
