package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// AccessList is the clients of one database and their roles: the
// contents of the access file the operator keeps in a Secret (key
// access.json) and mounts into the database's Pods. Tokens are stored as
// SHA-256 digests, so the file does not hold anything a client could
// present.
type AccessList struct {
	Clients []ClientAccess `json:"clients"`
}

// ClientAccess is one client: its name (the last segment of its
// certificate's identity), its role, and the digests of its bearer tokens.
type ClientAccess struct {
	Name         string   `json:"name"`
	Role         string   `json:"role"`
	TokenSHA256s []string `json:"tokenSHA256s,omitempty"`
}

// TokenDigest is the hex SHA-256 of a bearer token, as access files store it.
func TokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ParseAccessList parses and checks an access file.
func ParseAccessList(b []byte) (*AccessList, error) {
	var a AccessList
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("access file: %w", err)
	}
	seen := map[string]bool{}
	for _, c := range a.Clients {
		if c.Name == "" {
			return nil, fmt.Errorf("access file: a client has no name")
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("access file: client %q is listed twice", c.Name)
		}
		seen[c.Name] = true
		if _, err := ParseRole(c.Role); err != nil {
			return nil, fmt.Errorf("access file: client %q: %w", c.Name, err)
		}
		for _, d := range c.TokenSHA256s {
			if b, err := hex.DecodeString(d); err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("access file: client %q: token digest %q is not a hex SHA-256", c.Name, d)
			}
		}
	}
	return &a, nil
}

// Role is the role of the named client; RoleNone if it is not listed.
func (a *AccessList) Role(client string) Role {
	if a == nil {
		return RoleNone
	}
	for _, c := range a.Clients {
		if c.Name == client {
			r, _ := ParseRole(c.Role)
			return r
		}
	}
	return RoleNone
}

// TokenClient is the client a bearer token belongs to, if any. Digests
// are compared in constant time.
func (a *AccessList) TokenClient(token string) (string, bool) {
	if a == nil || token == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	for _, c := range a.Clients {
		for _, d := range c.TokenSHA256s {
			b, _ := hex.DecodeString(d)
			if subtle.ConstantTimeCompare(b, sum[:]) == 1 {
				return c.Name, true
			}
		}
	}
	return "", false
}

// AccessFile is an access list read from a file and read again when the
// file changes (checked at most once a second, when asked), so adding or
// removing a client takes effect without a restart. A file that turns
// unreadable or invalid keeps the last good list and reports the error.
type AccessFile struct {
	path    string
	checked atomic.Int64 // unix nanos of the last stat
	mu      sync.Mutex
	stamp   fileStamp
	list    atomic.Pointer[AccessList]
	lastErr atomic.Pointer[error]
}

// LoadAccessFile reads path; it must be valid now.
func LoadAccessFile(path string) (*AccessFile, error) {
	f := &AccessFile{path: path}
	if err := f.reload(); err != nil {
		return nil, err
	}
	f.checked.Store(time.Now().UnixNano())
	return f, nil
}

// List is the current list.
func (f *AccessFile) List() *AccessList {
	if f == nil {
		return nil
	}
	now := time.Now().UnixNano()
	if last := f.checked.Load(); now-last > int64(time.Second) && f.checked.CompareAndSwap(last, now) {
		if err := f.reload(); err != nil {
			f.lastErr.Store(&err)
		} else {
			f.lastErr.Store(nil)
		}
	}
	return f.list.Load()
}

// Err is the error of the last reload that failed, or nil.
func (f *AccessFile) Err() error {
	if p := f.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *AccessFile) reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := stampOf(f.path)
	if err != nil {
		return fmt.Errorf("access file: %w", err)
	}
	if st == f.stamp && f.list.Load() != nil {
		return nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("access file: %w", err)
	}
	a, err := ParseAccessList(b)
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	f.list.Store(a)
	f.stamp = st
	return nil
}

// fileStamp tells a changed file: kubelet replaces a mounted Secret by
// swapping a symlink, which changes what stat (following links) sees.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ino: inode(fi)}, nil
}
