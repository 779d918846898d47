package operator

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// primaryService is the NAME-rw Service: the gRPC KV API and metrics of
// the primary of the current epoch, and of no other Pod (a deposed primary
// that is still running must not get requests through it).
func primaryService(db *shalev1.RocksDB, epoch int64) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      db.ServiceName(),
			Namespace: db.Namespace,
			Labels: map[string]string{
				shalev1.LabelRocksDB:      db.Name,
				shalev1.LabelAppName:      shalev1.AppName,
				shalev1.LabelAppInstance:  db.Name,
				shalev1.LabelAppManagedBy: shalev1.ManagedBy,
			},
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: db.PrimaryServiceSelector(epoch),
			Ports: []corev1.ServicePort{
				{Name: portNameKV, Port: portKV, TargetPort: intstr.FromString(portNameKV), Protocol: corev1.ProtocolTCP},
				{Name: portNameMet, Port: portMetrics, TargetPort: intstr.FromString(portNameMet), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// ensureService creates the NAME-rw Service, or points its selector at the
// primary of the current epoch.
func (r *rocksDBReconciler) ensureService(ctx context.Context, db *shalev1.RocksDB) error {
	want := primaryService(db, db.Status.Epoch)
	if err := controllerutil.SetControllerReference(db, want, r.Scheme()); err != nil {
		return err
	}
	var cur corev1.Service
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	if apierrors.IsNotFound(err) {
		err = r.Create(ctx, want)
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache lags our own create; the next reconcile checks it
		}
		return err
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(&cur, db) {
		return &refusal{reason: "ServiceConflict", msg: "Service " + cur.Name + " exists and is not owned by this RocksDB"}
	}
	if maps.Equal(cur.Spec.Selector, want.Spec.Selector) {
		return nil
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Selector = want.Spec.Selector
	return r.Patch(ctx, &cur, patch)
}
