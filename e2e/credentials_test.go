//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
)

// e2eClient is the client every database of the suite lists with role
// admin; the test connects with its Secret, as an application would.
const e2eClient = "e2e"

// e2eClients is spec.clients of the suite's databases.
func e2eClients() []shalev1.ClientSpec {
	return []shalev1.ClientSpec{{Name: e2eClient, Role: "admin"}}
}

// A tcpproxy's host address stands for a Service or a Pod whose
// certificate names a Service: the test verifies it under that name.
type proxyTarget struct{ db, serverName string }

var (
	credMu       sync.Mutex
	credSuite    *suite
	proxyTargets = map[string]proxyTarget{}
	credDirs     = map[string]string{} // Secret name → directory with its files
)

// registerProxy says that addr reaches a KV server of db presenting a
// certificate for serverName.
func registerProxy(addr, db, serverName string) {
	credMu.Lock()
	defer credMu.Unlock()
	proxyTargets[addr] = proxyTarget{db: db, serverName: serverName}
}

// kvTarget is what a proxied Service name stands for: NAME-rw and NAME-ro
// are database NAME's KV Services.
func kvTarget(service string) (proxyTarget, bool) {
	for _, suffix := range []string{"-rw", "-ro"} {
		if db, ok := strings.CutSuffix(service, suffix); ok {
			return proxyTarget{db: db, serverName: service}, true
		}
	}
	return proxyTarget{}, false
}

// clientConfig is how the test connects to addr: TLS verified as the
// proxied Service, with the e2e client's certificate of that database.
func clientConfig(addr string) (auth.ClientConfig, error) {
	credMu.Lock()
	target, ok := proxyTargets[addr]
	s := credSuite
	credMu.Unlock()
	if !ok {
		return auth.ClientConfig{}, fmt.Errorf("no KV server registered behind proxy %s (registerProxy)", addr)
	}
	dir, err := s.secretDir(target.db + "-client-" + e2eClient)
	if err != nil {
		return auth.ClientConfig{}, err
	}
	return auth.ClientConfig{
		TLS:        auth.TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")},
		ServerName: target.serverName,
	}, nil
}

// secretDir writes a Secret's keys to files (once; the operator creates
// it when the RocksDB is applied, so it is waited for).
func (s *suite) secretDir(name string) (string, error) {
	credMu.Lock()
	dir, ok := credDirs[name]
	credMu.Unlock()
	if ok {
		return dir, nil
	}
	var sec corev1.Secret
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.kube.Get(c, client.ObjectKey{Namespace: s.cfg.namespace, Name: name}, &sec)
		cancel()
		if err == nil && len(sec.Data["tls.crt"]) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("Secret %s/%s with a certificate: not there after 2 minutes (%v)", s.cfg.namespace, name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	dir, err := os.MkdirTemp(s.cfg.artifacts, "secret-"+name+"-")
	if err != nil {
		return "", err
	}
	for k, v := range sec.Data {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			return "", err
		}
	}
	credMu.Lock()
	credDirs[name] = dir
	credMu.Unlock()
	return dir, nil
}

// forgetSecret drops a cached Secret (after the operator re-issued it).
func forgetSecret(name string) {
	credMu.Lock()
	defer credMu.Unlock()
	delete(credDirs, name)
}
