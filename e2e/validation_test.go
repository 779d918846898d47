//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// stepValidation: invalid RocksDBs are refused by the API server itself,
// with the message of the CRD's CEL rule, as `kubectl apply` shows it.
func stepValidation(t *testing.T, s *suite) {
	cases := []struct {
		name     string
		manifest string
		want     string
	}{{
		name: "negative cache size",
		manifest: `apiVersion: shale.rocks/v1alpha1
kind: RocksDB
metadata:
  name: e2e-bad-cache
spec:
  objectStoreRef: {name: minio}
  primary:
    cacheSize: "-1Gi"
`,
		want: "cacheSize must be a non-negative size",
	}, {
		name: "changed objectStoreRef",
		manifest: fmt.Sprintf(`apiVersion: shale.rocks/v1alpha1
kind: RocksDB
metadata:
  name: %s
spec:
  objectStoreRef: {name: somewhere-else}
`, s.db),
		want: "objectStoreRef is immutable",
	}, {
		name: "too long a name",
		manifest: `apiVersion: shale.rocks/v1alpha1
kind: RocksDB
metadata:
  name: this-name-is-far-too-long-for-a-rocksdb-because-pods-get-suffixes
spec:
  objectStoreRef: {name: minio}
`,
		want: "a RocksDB name must be at most 50",
	}, {
		name: "endpoint with a path",
		manifest: `apiVersion: shale.rocks/v1alpha1
kind: ObjectStore
metadata:
  name: e2e-bad-endpoint
spec:
  endpoint: http://minio:9000/shale
  credentials: {name: shale-objectstore}
  hot: {bucket: shale}
`,
		want: "endpoint must be http://HOST[:PORT]",
	}}
	before := s.rocksDB(t, s.db)
	for _, c := range cases {
		out, err := s.kubectlApply(c.manifest)
		if err == nil {
			t.Errorf("%s: kubectl apply accepted it:\n%s", c.name, out)
			continue
		}
		if !strings.Contains(out, c.want) || !strings.Contains(out, "Invalid") {
			t.Errorf("%s: kubectl apply refused it, but not with the CEL message %q:\n%s", c.name, c.want, out)
			continue
		}
		t.Logf("%s: refused: %s", c.name, strings.TrimSpace(out))
	}
	after := s.rocksDB(t, s.db)
	if after.Spec.ObjectStoreRef != before.Spec.ObjectStoreRef || after.Generation != before.Generation {
		t.Errorf("RocksDB %s changed: generation %d -> %d", s.db, before.Generation, after.Generation)
	}
	for _, name := range []string{"e2e-bad-cache", "this-name-is-far-too-long-for-a-rocksdb-because-pods-get-suffixes"} {
		if out, err := runErr(s.cfg.kubectl, "--kubeconfig", s.cfg.kubeconfig, "-n", s.cfg.namespace, "get", "rocksdb", name); err == nil {
			t.Errorf("RocksDB %s exists after being refused: %s", name, out)
		}
	}
}

// kubectlApply applies a manifest in the suite's namespace.
func (s *suite) kubectlApply(manifest string) (string, error) {
	cmd := exec.Command(s.cfg.kubectl, "--kubeconfig", s.cfg.kubeconfig, "-n", s.cfg.namespace, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
