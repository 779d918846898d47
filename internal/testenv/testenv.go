// Package testenv starts a real Kubernetes API server for tests:
// controller-runtime's envtest running the kube-apiserver and etcd that
// `make envtest-assets` builds from Go modules (no downloads at test time).
//
// The binaries are found through KUBEBUILDER_ASSETS, which `make test`
// exports. A test that needs the API server and cannot find them fails with
// a message naming the make target; it never skips.
package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AssetsEnv names the directory holding kube-apiserver, etcd and kubectl.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// requiredAssets are the binaries envtest runs.
var requiredAssets = []string{"kube-apiserver", "etcd"}

// Env is a running API server and a client for it.
type Env struct {
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client with Scheme.
	Client client.Client
	// Scheme knows the built-in Kubernetes types, apiextensions, and whatever
	// the caller added with WithScheme.
	Scheme *runtime.Scheme

	env *envtest.Environment
}

// Option configures Start.
type Option func(*options)

type options struct {
	crds    []*apiextensionsv1.CustomResourceDefinition
	crdDirs []string
	schemes []func(*runtime.Scheme) error
	flags   [][2]string
}

// WithAPIServerFlag sets a flag of kube-apiserver, such as
// service-cluster-ip-range (envtest's /24 holds 254 Services; a test of
// the operator at scale needs more).
func WithAPIServerFlag(name, value string) Option {
	return func(o *options) { o.flags = append(o.flags, [2]string{name, value}) }
}

// WithCRDs installs these CustomResourceDefinitions (and waits until they
// are served) before Start returns.
func WithCRDs(crds ...*apiextensionsv1.CustomResourceDefinition) Option {
	return func(o *options) { o.crds = append(o.crds, crds...) }
}

// WithCRDDirs installs the CRD manifests found in these directories; a
// missing directory is an error.
func WithCRDDirs(dirs ...string) Option {
	return func(o *options) { o.crdDirs = append(o.crdDirs, dirs...) }
}

// WithScheme adds types to the client's scheme (e.g. an API group's
// AddToScheme).
func WithScheme(add func(*runtime.Scheme) error) Option {
	return func(o *options) { o.schemes = append(o.schemes, add) }
}

// AssetsDir returns the directory named by KUBEBUILDER_ASSETS after
// checking that it holds the binaries envtest needs, or an error that says
// how to build them.
func AssetsDir() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: run `make envtest-assets` and export %s=$(hack/envtest-assets.sh --print), or run the tests with `make test`", AssetsEnv, AssetsEnv)
	}
	var missing []string
	for _, name := range requiredAssets {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%s=%s lacks %s: run `make envtest-assets`", AssetsEnv, dir, strings.Join(missing, ", "))
	}
	return dir, nil
}

// Start runs an API server for the test and stops it when the test ends.
// It fails the test (never skips it) when the assets are missing.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dir, err := AssetsDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}

	scheme := runtime.NewScheme()
	adds := append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme}, o.schemes...)
	for _, add := range adds {
		if err := add(scheme); err != nil {
			t.Fatalf("testenv: building the scheme: %v", err)
		}
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDs:                  o.crds,
		CRDDirectoryPaths:     o.crdDirs,
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
		// Two cores shared with other builds: give the control plane time.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	for _, f := range o.flags {
		env.ControlPlane.GetAPIServer().Configure().Set(f[0], f[1])
	}
	cfg, err := env.Start()
	if err != nil {
		// Start may fail after starting the processes (a CRD the API
		// server refuses): stop them rather than leak them.
		if serr := env.Stop(); serr != nil {
			t.Logf("testenv: stopping the control plane after a failed start: %v", serr)
		}
		t.Fatalf("testenv: starting kube-apiserver and etcd from %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("testenv: stopping the control plane: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("testenv: client: %v", err)
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, env: env}
}

// Objects decodes the Kubernetes objects in YAML files (several documents
// per file allowed) with the env's scheme, failing t on any error: a test
// that applies the repository's samples reads them with it.
func (e *Env) Objects(t testing.TB, paths ...string) []client.Object {
	t.Helper()
	decoder := serializer.NewCodecFactory(e.Scheme).UniversalDeserializer()
	var objs []client.Object
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("testenv: %s: document %d: %v", p, i, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("testenv: %s: document %d: %v", p, i, err)
			}
			co, ok := obj.(client.Object)
			if !ok {
				t.Fatalf("testenv: %s: document %d: %T is not an object", p, i, obj)
			}
			objs = append(objs, co)
		}
	}
	return objs
}
