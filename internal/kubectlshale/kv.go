package kubectlshale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
)

// kubectl shale kv: `shale kv`'s get, put, delete and scan through a
// port-forward to the primary's Pod (or a secondary's), with a client's
// credentials from its Secret NAME-client-CLIENT (docs/operator.md,
// "Certificates and client credentials"). `shale kv` itself lives in
// package main of cmd/shale, which links RocksDB (cgo); the plugin stays
// pure Go, so these few commands are written again over api/kv/v1.

// Keys of a client's Secret (the operator's, operator/certificates.go).
const (
	secretKeyCert  = corev1.TLSCertKey       // tls.crt
	secretKeyKey   = corev1.TLSPrivateKeyKey // tls.key
	secretKeyCA    = "ca.crt"
	secretKeyToken = "token"
	portNameKV     = "grpc" // the KV port of primaries and secondaries
)

type kvOptions struct {
	secondary    bool
	clientName   string
	clientSecret string
	timeout      time.Duration
}

func kvCommand(open func(*cobra.Command) (*plugin, error)) *cobra.Command {
	var o kvOptions
	cmd := &cobra.Command{
		Use:   "kv NAME -- get KEY | put KEY VALUE | delete KEY | scan [--prefix P] [--start S] [--end E] [--limit N] [--reverse] [--keys-only]",
		Short: "Read and write keys through a port-forward to the primary (or a secondary), with a client's credentials from its Secret",
		Long: "Port-forwards (as kubectl port-forward does) to the KV port of the current primary's Pod, or of a ready secondary with --secondary, and runs one command there: get prints the value, put and delete return once durable, scan prints key<TAB>value lines in key order.\n" +
			"With TLS (the default), the client's Secret NAME-client-CLIENT gives the CA, and the certificate (tls.crt, tls.key) or else the token; its role (spec.clients) decides what it may do. The client is the only one in spec.clients, or --client CLIENT, or --client-secret SECRET. The plugin reads that one Secret, with your RBAC.",
		Example: "  kubectl shale kv orders -- put hello world\n  kubectl shale kv orders -- get hello\n  kubectl shale kv orders --secondary --client reader -- scan --prefix user/ --limit 10",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := parseKVOp(args[1:])
			if err != nil {
				return err
			}
			if o.secondary && op.writes() {
				return fmt.Errorf("%s writes: a secondary serves reads only; drop --secondary", op.name)
			}
			p, err := open(cmd)
			if err != nil {
				return err
			}
			return p.kv(cmd.Context(), args[0], o, op)
		},
	}
	cmd.Flags().BoolVar(&o.secondary, "secondary", false, "talk to a ready secondary instead of the primary (reads only)")
	cmd.Flags().BoolVar(&o.secondary, "read-only", false, "the same as --secondary")
	cmd.Flags().StringVar(&o.clientName, "client", "", "the client (of spec.clients) whose Secret NAME-client-CLIENT to use (default: the only one)")
	cmd.Flags().StringVar(&o.clientSecret, "client-secret", "", "the Secret holding the client's credentials (ca.crt, and tls.crt and tls.key or token)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Second, "give up after this long")
	return cmd
}

// kvOp is one parsed KV command.
type kvOp struct {
	name               string
	key, value         string
	prefix, start, end string
	limit              uint64
	reverse, keysOnly  bool
}

func (o kvOp) writes() bool { return o.name == "put" || o.name == "delete" }

// parseKVOp parses what follows NAME (and "--").
func parseKVOp(args []string) (kvOp, error) {
	op := kvOp{name: args[0]}
	rest := args[1:]
	want := func(names ...string) error {
		if len(rest) != len(names) {
			return fmt.Errorf("kv %s wants %s, got %d argument(s): kubectl shale kv NAME -- %s %s", op.name, strings.Join(names, " "), len(rest), op.name, strings.Join(names, " "))
		}
		return nil
	}
	switch op.name {
	case "get", "delete":
		if err := want("KEY"); err != nil {
			return op, err
		}
		op.key = rest[0]
	case "put":
		if err := want("KEY", "VALUE"); err != nil {
			return op, err
		}
		op.key, op.value = rest[0], rest[1]
	case "scan":
		fs := pflag.NewFlagSet("scan", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.StringVar(&op.prefix, "prefix", "", "")
		fs.StringVar(&op.start, "start", "", "")
		fs.StringVar(&op.end, "end", "", "")
		fs.Uint64Var(&op.limit, "limit", 0, "")
		fs.BoolVar(&op.reverse, "reverse", false, "")
		fs.BoolVar(&op.keysOnly, "keys-only", false, "")
		if err := fs.Parse(rest); err != nil {
			return op, fmt.Errorf("kv scan: %w (flags: --prefix P, --start S, --end E, --limit N, --reverse, --keys-only)", err)
		}
		if fs.NArg() > 0 {
			return op, fmt.Errorf("kv scan takes flags only, got %q", fs.Args())
		}
		if op.prefix != "" && (op.start != "" || op.end != "") {
			return op, errors.New("kv scan: --prefix or --start/--end, not both")
		}
	default:
		return op, fmt.Errorf("unknown kv command %q: want get KEY, put KEY VALUE, delete KEY or scan", op.name)
	}
	return op, nil
}

// kvEndpoint is the Pod and port to forward to, and the name its
// certificate is verified by.
type kvEndpoint struct {
	pod        *corev1.Pod
	port       int32
	serverName string
}

func (p *plugin) kv(ctx context.Context, name string, o kvOptions, op kvOp) error {
	db, err := p.rocksDB(ctx, name)
	if err != nil {
		return err
	}
	ep, err := p.kvEndpoint(ctx, db, o.secondary)
	if err != nil {
		return err
	}
	creds, perRPC, err := p.kvCredentials(ctx, db, o, ep.serverName)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	addr, stop, err := p.forward(ctx, ep.pod, ep.port)
	if err != nil {
		return fmt.Errorf("port-forward to Pod %s port %d: %w", ep.pod.Name, ep.port, err)
	}
	defer stop()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if perRPC != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(perRPC))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	err = runKVOp(ctx, kvv1.NewKVClient(conn), op, p.out)
	if st, ok := status.FromError(err); ok && err != nil {
		switch st.Code() {
		case codes.NotFound:
			if op.name == "get" {
				return fmt.Errorf("key %q not found", op.key)
			}
		case codes.Unavailable:
			return fmt.Errorf("Pod %s does not answer on port %d: %s (kubectl shale status %s)", ep.pod.Name, ep.port, st.Message(), name)
		case codes.DeadlineExceeded:
			return fmt.Errorf("no answer from Pod %s within %s (--timeout)", ep.pod.Name, o.timeout)
		}
		return fmt.Errorf("%s: %s", st.Code(), st.Message())
	}
	return err
}

func runKVOp(ctx context.Context, kv kvv1.KVClient, op kvOp, out io.Writer) error {
	switch op.name {
	case "get":
		r, err := kv.Get(ctx, &kvv1.GetRequest{Key: []byte(op.key)})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", r.Value)
		return err
	case "put":
		_, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(op.key), Value: []byte(op.value), Sync: true})
		return err
	case "delete":
		_, err := kv.Delete(ctx, &kvv1.DeleteRequest{Key: []byte(op.key), Sync: true})
		return err
	}
	stream, err := kv.Scan(ctx, &kvv1.ScanRequest{Prefix: []byte(op.prefix), Start: []byte(op.start), End: []byte(op.end),
		Limit: op.limit, Reverse: op.reverse, KeysOnly: op.keysOnly})
	if err != nil {
		return err
	}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, kv := range chunk.Pairs {
			if op.keysOnly {
				fmt.Fprintf(out, "%s\n", kv.Key)
			} else {
				fmt.Fprintf(out, "%s\t%s\n", kv.Key, kv.Value)
			}
		}
	}
}

// kvEndpoint picks the current primary's Pod, or a ready secondary.
func (p *plugin) kvEndpoint(ctx context.Context, db *shalev1.RocksDB, secondary bool) (kvEndpoint, error) {
	if secondary {
		var pods corev1.PodList
		if err := p.c.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels(db.SecondarySelector())); err != nil {
			return kvEndpoint{}, fmt.Errorf("list the secondaries of %s: %w", db.Name, err)
		}
		slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		for i := range pods.Items {
			if pod := &pods.Items[i]; pod.DeletionTimestamp == nil && podReady(pod) {
				return endpointOf(pod, db.ReadOnlyServiceName()+"."+db.Namespace+".svc")
			}
		}
		return kvEndpoint{}, fmt.Errorf("RocksDB %s has no ready secondary (%d Pods); drop --secondary to use the primary", db.Name, len(pods.Items))
	}
	if db.Status.CurrentPrimary == "" {
		return kvEndpoint{}, fmt.Errorf("RocksDB %s has no primary now (phase %s); kubectl shale status %s", db.Name, orDash(string(db.Status.Phase)), db.Name)
	}
	var pod corev1.Pod
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Status.CurrentPrimary}, &pod); err != nil {
		return kvEndpoint{}, fmt.Errorf("the primary Pod %s of %s: %w", db.Status.CurrentPrimary, db.Name, err)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return kvEndpoint{}, fmt.Errorf("the primary Pod %s is %s, not Running; kubectl shale status %s", pod.Name, orDash(string(pod.Status.Phase)), db.Name)
	}
	return endpointOf(&pod, db.ServiceName()+"."+db.Namespace+".svc")
}

func endpointOf(pod *corev1.Pod, serverName string) (kvEndpoint, error) {
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == portNameKV {
				return kvEndpoint{pod: pod, port: port.ContainerPort, serverName: serverName}, nil
			}
		}
	}
	return kvEndpoint{}, fmt.Errorf("Pod %s has no port named %s", pod.Name, portNameKV)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// kvCredentials are the connection's credentials: plaintext for a
// database without TLS; else the CA and the certificate (or the token) in
// the client's Secret.
func (p *plugin) kvCredentials(ctx context.Context, db *shalev1.RocksDB, o kvOptions, serverName string) (credentials.TransportCredentials, credentials.PerRPCCredentials, error) {
	if !db.TLSEnabled() {
		return insecure.NewCredentials(), nil, nil
	}
	secret := o.clientSecret
	if secret == "" {
		c := o.clientName
		if c == "" {
			switch len(db.Spec.Clients) {
			case 0:
				return nil, nil, fmt.Errorf("RocksDB %s has no spec.clients: add one (its Secret %s-client-NAME holds its certificate) or name a Secret with --client-secret", db.Name, db.Name)
			case 1:
				c = db.Spec.Clients[0].Name
			default:
				var names []string
				for _, cl := range db.Spec.Clients {
					names = append(names, cl.Name+" ("+cl.Role+")")
				}
				return nil, nil, fmt.Errorf("RocksDB %s has %d clients: %s; choose one with --client", db.Name, len(names), strings.Join(names, ", "))
			}
		}
		secret = db.ClientSecretName(c)
	}
	var s corev1.Secret
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: secret}, &s); err != nil {
		return nil, nil, fmt.Errorf("client Secret %s in namespace %s: %w", secret, db.Namespace, err)
	}
	ca, cert, key, token := s.Data[secretKeyCA], s.Data[secretKeyCert], s.Data[secretKeyKey], s.Data[secretKeyToken]
	if len(ca) == 0 {
		return nil, nil, fmt.Errorf("Secret %s has no %s: not a client Secret of %s (the operator issues NAME-client-CLIENT)", secret, secretKeyCA, db.Name)
	}
	var perRPC credentials.PerRPCCredentials
	if len(cert) == 0 || len(key) == 0 {
		if len(token) == 0 {
			return nil, nil, fmt.Errorf("Secret %s has neither %s and %s nor %s: nothing to authenticate with", secret, secretKeyCert, secretKeyKey, secretKeyToken)
		}
		cert, key, perRPC = nil, nil, bearer(strings.TrimSpace(string(token)))
	}
	t, err := auth.NewTLSFromPEM(cert, key, ca)
	if err != nil {
		return nil, nil, fmt.Errorf("Secret %s: %w", secret, err)
	}
	return t.ClientCredentials(serverName), perRPC, nil
}

// bearer sends a client's token (over TLS only).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// portForward forwards a free loopback port to the Pod's port as kubectl
// port-forward does (WebSocket, falling back to SPDY on API servers that
// do not upgrade to it), until stop is called.
func (p *plugin) portForward(ctx context.Context, pod *corev1.Pod, port int32) (string, func(), error) {
	if p.cfg == nil {
		return "", nil, errors.New("no cluster configuration")
	}
	rt, upgrader, err := spdy.RoundTripperFor(p.cfg)
	if err != nil {
		return "", nil, err
	}
	u := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, p.cfg); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	stopc, ready := make(chan struct{}), make(chan struct{})
	var errOut strings.Builder
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(int(port))}, stopc, ready, io.Discard, &errOut)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		if err == nil {
			err = errors.New("port-forward ended")
		}
		return "", nil, fmt.Errorf("%w %s", err, strings.TrimSpace(errOut.String()))
	case <-ctx.Done():
		close(stopc)
		return "", nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		close(stopc)
		return "", nil, fmt.Errorf("port-forward: no local port (%v)", err)
	}
	return "127.0.0.1:" + strconv.Itoa(int(ports[0].Local)), func() { close(stopc); <-done }, nil
}
