package operator

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// The operator never uses its own role for an instanceRole ObjectStore
// unless told so (anyone who may create ObjectStores could otherwise have
// it use that role), and says how to allow it.
func TestInstanceRoleNeedsConsent(t *testing.T) {
	st := newStores(nil, nil, nil)
	_, err := st.hot(context.Background(), &shalev1.ObjectStore{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "prod"},
		Spec:       shalev1.ObjectStoreSpec{Endpoint: "https://s3.eu-west-1.amazonaws.com", InstanceRole: true, Hot: shalev1.BucketLocation{Bucket: "data"}},
	})
	ce, ok := asConfigError(err)
	if !ok || ce.Reason != shalev1.ReasonNoOperatorCredentials || !strings.Contains(ce.Msg, "--instance-role-stores") {
		t.Fatalf("instanceRole store without consent: %v", err)
	}
}

// ObjectStores whose Pods take credentials from an instance role or a
// ServiceAccount: the operator checks the first with its own role (when
// allowed) and starts primaries that use the role; for the second it
// acts as the ServiceAccount, and says so when it does not exist or STS
// refuses its token.
func TestObjectStoreWithoutSecret(t *testing.T) {
	opts := testOptions()
	opts.InstanceRoleStores = true
	h := startOperatorWith(t, opts)
	ns := h.namespace("identity")
	_, store, db := h.samples(ns)

	role := store.DeepCopy()
	role.Name, role.Spec.Credentials, role.Spec.InstanceRole = "by-role", nil, true
	h.create(role)
	h.waitStore(ns, role.Name, "reachable with the operator's own role", func(os *shalev1.ObjectStore) bool { return os.IsReachable() })
	db.Spec.ObjectStoreRef.Name = role.Name
	h.create(db)
	pod := h.waitPod(ns, db.PrimaryPodName(1))
	c := pod.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env[objstore.EnvInstanceRole] != "true" || env[objstore.EnvCredentialsDir] != "" || hasVolume(pod.Spec.Volumes, "s3-credentials") || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("primary of an instanceRole store: env %v volumes %+v token %v", env, pod.Spec.Volumes, *pod.Spec.AutomountServiceAccountToken)
	}

	sa := store.DeepCopy()
	sa.Name, sa.Spec.Credentials, sa.Spec.ServiceAccountName = "by-identity", nil, "orders-s3"
	h.create(sa)
	reachable := func(reason string) func(*shalev1.ObjectStore) bool {
		return func(os *shalev1.ObjectStore) bool {
			c := meta.FindStatusCondition(os.Status.Conditions, shalev1.ConditionReachable)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && c.ObservedGeneration == os.Generation
		}
	}
	got := h.waitStore(ns, sa.Name, "ServiceAccountMissing", reachable(shalev1.ReasonServiceAccountMissing))
	msg := meta.FindStatusCondition(got.Status.Conditions, shalev1.ConditionReachable).Message
	if !strings.Contains(msg, "ServiceAccount orders-s3 (serviceAccountName of ObjectStore by-identity) does not exist") {
		t.Errorf("ServiceAccount missing: %q", msg)
	}

	// With the ServiceAccount, the operator asks the API server for a
	// token of it and presents it at the store's STS (this MinIO has no
	// identity provider, so it refuses: a clear condition, not a hang).
	h.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-s3"}})
	got = h.waitStore(ns, sa.Name, "refused at STS", reachable(shalev1.ReasonListFailed))
	msg = meta.FindStatusCondition(got.Status.Conditions, shalev1.ConditionReachable).Message
	t.Logf("Reachable: %s", msg)
	if !strings.Contains(msg, "no S3 credentials") || !strings.Contains(msg, "web identity as ServiceAccount identity/orders-s3") {
		t.Errorf("STS refusal: %q, want it to name the ServiceAccount", msg)
	}
	if strings.Contains(msg, "a token for ServiceAccount") {
		t.Errorf("the API server issued no token: %q", msg)
	}
}

func hasVolume(vs []corev1.Volume, name string) bool {
	for _, v := range vs {
		if v.Name == name {
			return true
		}
	}
	return false
}
