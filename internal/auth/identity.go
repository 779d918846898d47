// Package auth decides who is calling a Shale server and what they may
// do: identities from client certificates (a URI SAN shale://...) or
// bearer tokens, the roles read < write < admin, the method each role
// grants, and the gRPC credentials and interceptors that carry them.
//
// The decisions (RoleOf, Require, the scheduler's rules) are pure
// functions with table tests; the TLS files and the access file are
// re-read when they change, so certificates and client lists rotate
// without a restart.
package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Kind is what a certificate was issued to.
type Kind string

// The kinds of identity. Components have fixed rights; clients get the
// role their database's access file gives them.
const (
	KindClient    Kind = "client"    // an application, named per database
	KindPrimary   Kind = "primary"   // a database's primary (submits compactions)
	KindSecondary Kind = "secondary" // a read replica (follows the primary's Watch)
	KindScheduler Kind = "scheduler" // a compactor pool's scheduler
	KindWorker    Kind = "worker"    // a compactor pool's worker
	KindOperator  Kind = "operator"  // the operator (reads Status and Stats)
)

// Scheme is the URI scheme of identity SANs.
const Scheme = "shale"

// Identity is an authenticated caller.
type Identity struct {
	Namespace string
	Kind      Kind
	// Name is the RocksDB (primary, secondary, client) or CompactorPool
	// (scheduler, worker) it belongs to; empty for the operator.
	Name string
	// Client is a client's own name (KindClient only).
	Client string
	// Database is the store URL a primary's certificate names (its second
	// URI SAN): the only database it may submit compactions for.
	Database string
	// Via says how it was proven: "certificate" or "token".
	Via string
}

// URI is the identity's URI SAN: shale://NAMESPACE/KIND[/NAME[/CLIENT]].
func (id Identity) URI() *url.URL {
	p := "/" + string(id.Kind)
	if id.Name != "" {
		p += "/" + id.Name
	}
	if id.Client != "" {
		p += "/" + id.Client
	}
	return &url.URL{Scheme: Scheme, Host: id.Namespace, Path: p}
}

// String names the identity in logs and errors.
func (id Identity) String() string {
	s := id.URI().String()
	if id.Via == "token" {
		s += " (token)"
	}
	return s
}

// ParseURI parses an identity URI.
func ParseURI(u *url.URL) (Identity, error) {
	if u.Scheme != Scheme {
		return Identity{}, fmt.Errorf("identity %q: scheme is not %s://", u, Scheme)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Identity{}, fmt.Errorf("identity %q: want %s://NAMESPACE/KIND[/NAME[/CLIENT]]", u, Scheme)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	id := Identity{Namespace: u.Host, Kind: Kind(parts[0])}
	want := 2
	switch id.Kind {
	case KindOperator:
		want = 1
	case KindClient:
		want = 3
	case KindPrimary, KindSecondary, KindScheduler, KindWorker:
	default:
		return Identity{}, fmt.Errorf("identity %q: unknown kind %q", u, parts[0])
	}
	if len(parts) != want {
		return Identity{}, fmt.Errorf("identity %q: a %s identity has %d path segments", u, id.Kind, want)
	}
	for _, p := range parts {
		if p == "" {
			return Identity{}, fmt.Errorf("identity %q: empty path segment", u)
		}
	}
	if want > 1 {
		id.Name = parts[1]
	}
	if want > 2 {
		id.Client = parts[2]
	}
	return id, nil
}

// FromCertificate reads the identity of a verified client certificate:
// exactly one shale:// URI SAN, and for a primary the database URL it
// may submit compactions for (a second URI SAN).
func FromCertificate(c *x509.Certificate) (Identity, error) {
	var id Identity
	found := false
	var dbs []string
	for _, u := range c.URIs {
		if u.Scheme != Scheme {
			dbs = append(dbs, u.String())
			continue
		}
		if found {
			return Identity{}, errors.New("certificate names more than one shale:// identity")
		}
		var err error
		if id, err = ParseURI(u); err != nil {
			return Identity{}, err
		}
		found = true
	}
	if !found {
		return Identity{}, fmt.Errorf("certificate %q names no %s:// identity (URI SAN)", c.Subject.CommonName, Scheme)
	}
	if id.Kind == KindPrimary {
		if len(dbs) != 1 {
			return Identity{}, fmt.Errorf("primary certificate %s must name exactly one database URL", id)
		}
		id.Database = dbs[0]
	}
	id.Via = "certificate"
	return id, nil
}
