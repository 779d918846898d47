package auth

import (
	"context"
	"crypto/x509"
	"runtime"
	"strings"
	"sync"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Guard authenticates every call to a server and asks authorize whether
// the caller may make it. Calls that need no role (health checks) pass
// without an identity.
type Guard struct {
	// Self is the server's own identity (from its certificate).
	Self Identity
	// Access lists the database's clients and tokens; nil: none.
	Access *AccessFile
	// Authorize decides; nil means KV rules (KVRole and RequireKV).
	Authorize func(self, id Identity, method string) error

	// certIDs caches the identity read from each connection's verified
	// client certificate (weak.Pointer[x509.Certificate] → Identity): the
	// certificate is the same object on every call of a connection and
	// cannot change under it, so it is read once per connection, not
	// once per call. An entry goes when its certificate is collected
	// (its connection gone). What the identity may do is still decided
	// on every call, from the access file as it is then.
	certIDs sync.Map
}

type ctxKey struct{}

// FromContext is the identity the guard authenticated for this call.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// WithIdentity returns ctx carrying id (for handlers called directly).
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// Identify finds who is calling: a verified client certificate, else a
// bearer token in the access list.
func (g *Guard) Identify(ctx context.Context) (Identity, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
			id, err := g.certIdentity(ti.State.VerifiedChains[0][0])
			if err != nil {
				return Identity{}, status.Errorf(codes.Unauthenticated, "client certificate: %v", err)
			}
			return id, nil
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		tok, ok := strings.CutPrefix(v, "Bearer ")
		if !ok {
			return Identity{}, status.Error(codes.Unauthenticated, `authorization metadata must be "Bearer TOKEN"`)
		}
		if name, ok := g.Access.List().TokenClient(strings.TrimSpace(tok)); ok {
			return Identity{Namespace: g.Self.Namespace, Kind: KindClient, Name: g.Self.Name, Client: name, Via: "token"}, nil
		}
		return Identity{}, status.Error(codes.Unauthenticated, "bearer token not recognised (revoked, or for another database)")
	}
	return Identity{}, status.Error(codes.Unauthenticated, "no client certificate and no bearer token: connect with --tls-cert/--tls-key or --token-file (or a client config with them)")
}

// certIdentity is FromCertificate(c), read once per certificate object
// (see certIDs). A certificate naming no valid identity is not cached:
// its connection is refused on every call anyway.
func (g *Guard) certIdentity(c *x509.Certificate) (Identity, error) {
	k := weak.Make(c)
	if id, ok := g.certIDs.Load(k); ok {
		return id.(Identity), nil
	}
	id, err := FromCertificate(c)
	if err != nil {
		return Identity{}, err
	}
	if _, loaded := g.certIDs.LoadOrStore(k, id); !loaded {
		runtime.AddCleanup(c, func(k weak.Pointer[x509.Certificate]) { g.certIDs.Delete(k) }, k)
	}
	return id, nil
}

func (g *Guard) check(ctx context.Context, method string) (context.Context, error) {
	if g.Authorize == nil && MethodRole(method) == RoleNone {
		return ctx, nil
	}
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return ctx, nil
	}
	id, err := g.Identify(ctx)
	if err != nil {
		return nil, err
	}
	if g.Authorize != nil {
		err = g.Authorize(g.Self, id, method)
	} else {
		err = RequireKV(id, KVRole(g.Self, id, g.Access.List()), method)
	}
	if err != nil {
		return nil, err
	}
	return WithIdentity(ctx, id), nil
}

// Unary is the guard as a unary interceptor.
func (g *Guard) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, err := g.check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// Stream is the guard as a stream interceptor.
func (g *Guard) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, err := g.check(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return h(srv, &identStream{ServerStream: ss, ctx: ctx})
	}
}

type identStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identStream) Context() context.Context { return s.ctx }
