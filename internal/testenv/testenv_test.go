package testenv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shale-rocks/shale/internal/testenv"
)

// placeholderCRD stands in for the RocksDB CRD that the operator issue
// defines (group shale.rocks, v1alpha1): just enough schema to show that
// the real API server validates and stores it.
func placeholderCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "rocksdbs.shale.rocks"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "shale.rocks",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "rocksdbs", Singular: "rocksdb", Kind: "RocksDB", ListKind: "RocksDBList",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1alpha1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
				},
				Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"spec": {
								Type:     "object",
								Required: []string{"objectStore"},
								Properties: map[string]apiextensionsv1.JSONSchemaProps{
									"objectStore": {Type: "string", MinLength: ptr.To[int64](1)},
									"secondaries": {Type: "integer", Minimum: ptr.To(0.0)},
								},
							},
							"status": {
								Type: "object",
								Properties: map[string]apiextensionsv1.JSONSchemaProps{
									"epoch": {Type: "integer", Format: "int64"},
								},
							},
						},
					},
				},
			}},
		},
	}
}

var rocksDBGVK = schema.GroupVersionKind{Group: "shale.rocks", Version: "v1alpha1", Kind: "RocksDB"}

func newRocksDB(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(rocksDBGVK)
	u.SetNamespace("default")
	u.SetName(name)
	return u
}

func TestCRDRoundTrip(t *testing.T) {
	env := testenv.Start(t, testenv.WithCRDs(placeholderCRD()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client

	db := newRocksDB("orders", map[string]any{"objectStore": "minio", "secondaries": int64(2)})
	if err := c.Create(ctx, db); err != nil {
		t.Fatalf("create: %v", err)
	}

	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(rocksDBGVK)
	if err := c.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	if n, _, _ := unstructured.NestedInt64(got.Object, "spec", "secondaries"); n != 2 {
		t.Errorf("spec.secondaries = %d, want 2", n)
	}
	if s, _, _ := unstructured.NestedString(got.Object, "spec", "objectStore"); s != "minio" {
		t.Errorf("spec.objectStore = %q, want minio", s)
	}
	if got.GetUID() == "" || got.GetGeneration() != 1 {
		t.Errorf("uid %q generation %d: not stored by a real API server?", got.GetUID(), got.GetGeneration())
	}

	// Status goes through its subresource and does not bump the generation.
	if err := unstructured.SetNestedField(got.Object, int64(7), "status", "epoch"); err != nil {
		t.Fatal(err)
	}
	if err := c.Status().Update(ctx, got); err != nil {
		t.Fatalf("status update: %v", err)
	}
	after := &unstructured.Unstructured{}
	after.SetGroupVersionKind(rocksDBGVK)
	if err := c.Get(ctx, client.ObjectKeyFromObject(db), after); err != nil {
		t.Fatalf("get after status update: %v", err)
	}
	if e, _, _ := unstructured.NestedInt64(after.Object, "status", "epoch"); e != 7 {
		t.Errorf("status.epoch = %d, want 7", e)
	}
	if after.GetGeneration() != 1 {
		t.Errorf("generation = %d after a status update, want 1", after.GetGeneration())
	}

	// The schema is enforced by the API server.
	for name, spec := range map[string]map[string]any{
		"negative-secondaries": {"objectStore": "minio", "secondaries": int64(-1)},
		"no-object-store":      {"secondaries": int64(1)},
	} {
		err := c.Create(ctx, newRocksDB(name, spec))
		if !apierrors.IsInvalid(err) {
			t.Errorf("create %s: got %v, want Invalid", name, err)
		}
	}

	if err := c.Delete(ctx, db); err != nil {
		t.Fatalf("delete: %v", err)
	}
	err := c.Get(ctx, client.ObjectKeyFromObject(db), after)
	if !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: got %v, want NotFound", err)
	}
}

func TestAssetsDirNamesTheMakeTarget(t *testing.T) {
	t.Setenv(testenv.AssetsEnv, "")
	_, err := testenv.AssetsDir()
	if err == nil || !strings.Contains(err.Error(), "make envtest-assets") {
		t.Errorf("AssetsDir with %s unset: %v, want an error naming make envtest-assets", testenv.AssetsEnv, err)
	}
	t.Setenv(testenv.AssetsEnv, t.TempDir())
	_, err = testenv.AssetsDir()
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Errorf("AssetsDir on an empty dir: %v, want an error naming kube-apiserver", err)
	}
}
