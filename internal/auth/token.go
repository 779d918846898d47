package auth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// TokenCredentials send a bearer token read from a file, read again when
// the file changes (a rotated token Secret is used at once). They need
// TLS: a token must never cross the network in the clear.
func TokenCredentials(path string) (credentials.PerRPCCredentials, error) {
	t := &tokenFile{path: path}
	if _, err := t.token(); err != nil {
		return nil, err
	}
	return t, nil
}

type tokenFile struct {
	path    string
	mu      sync.Mutex
	checked time.Time
	stamp   fileStamp
	tok     string
}

func (t *tokenFile) token() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.checked) < time.Second && t.tok != "" {
		return t.tok, nil
	}
	t.checked = time.Now()
	st, err := stampOf(t.path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if st == t.stamp && t.tok != "" {
		return t.tok, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", errors.New("--token-file " + t.path + " is empty")
	}
	t.tok, t.stamp = tok, st
	return tok, nil
}

func (t *tokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := t.token()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (t *tokenFile) RequireTransportSecurity() bool { return true }
