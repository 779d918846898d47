// Package v1alpha1 is the Kubernetes API of Shale (group shale.rocks):
// ObjectStore, where databases live, and RocksDB, one database with its
// primary. The files named *_types.go hold only the schema; behaviour on the
// types is in *_funcs.go, and label, annotation and finalizer keys are in
// labels_annotations.go.
//
// +kubebuilder:object:generate=true
// +groupName=shale.rocks
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "shale.rocks", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group and version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
