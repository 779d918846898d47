package v1alpha1

// TLSSpec says how the gRPC ports of a RocksDB or a CompactorPool are
// secured (docs/operator.md, "Certificates and client credentials").
// With issuerRef the certificates come from cert-manager instead of the
// operator's CA.
type TLSSpec struct {
	// Enabled: true (the default) serves TLS 1.3 with certificates the
	// operator issues from its CA and renews, and authenticates every
	// caller by certificate or bearer token. False serves plaintext with
	// no authentication (--insecure), for networks that secure traffic
	// some other way (a service mesh). Like other primary settings, a
	// change reaches the primary when the next one starts; secondaries
	// and compactor Pods roll at once.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// IssuerRef names a cert-manager Issuer or ClusterIssuer: the
	// operator then signs none of the certificates itself but makes a
	// cert-manager Certificate for each (same Secret names), and
	// cert-manager issues and renews them. Client tokens and the access
	// list stay the operator's. Needs cert-manager's CRDs installed.
	// +optional
	IssuerRef *IssuerRef `json:"issuerRef,omitempty"`
}

// IssuerRef is a cert-manager issuer (cert-manager's own issuerRef).
type IssuerRef struct {
	// Name of the Issuer (in the resource's namespace) or ClusterIssuer.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Kind: Issuer (the default) or ClusterIssuer, or an external
	// issuer's kind with its group.
	// +optional
	// +kubebuilder:default=Issuer
	Kind string `json:"kind,omitempty"`

	// Group of the issuer: cert-manager.io (the default), or an external
	// issuer's API group.
	// +optional
	// +kubebuilder:default=cert-manager.io
	Group string `json:"group,omitempty"`
}

// CertManagerIssuer is the cert-manager issuer of the database's
// certificates, nil when the operator issues them (or TLS is off).
func (db *RocksDB) CertManagerIssuer() *IssuerRef { return issuerRef(db.Spec.TLS) }

// CertManagerIssuer is the cert-manager issuer of the pool's
// certificates, nil when the operator issues them (or TLS is off).
func (p *CompactorPool) CertManagerIssuer() *IssuerRef { return issuerRef(p.Spec.TLS) }

func issuerRef(s *TLSSpec) *IssuerRef {
	if s == nil || !tlsEnabled(s) || s.IssuerRef == nil {
		return nil
	}
	r := *s.IssuerRef
	if r.Kind == "" {
		r.Kind = "Issuer"
	}
	if r.Group == "" {
		r.Group = "cert-manager.io"
	}
	return &r
}

// ClientSpec is an application allowed to call a database.
type ClientSpec struct {
	// Name of the client: the last segment of its identity
	// shale://NAMESPACE/client/DATABASE/NAME and of its Secret
	// DATABASE-client-NAME.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Role: read (Get, MultiGet, Scan, Status, Watch), write (read plus
	// Put, Delete, Write, Load) or admin (write plus Flush, Compact,
	// Ingest and reflection).
	// +kubebuilder:validation:Enum=read;write;admin
	Role string `json:"role"`
}

// TLSEnabled says whether the database serves TLS (spec.tls.enabled,
// true when unset).
func (db *RocksDB) TLSEnabled() bool { return tlsEnabled(db.Spec.TLS) }

// TLSEnabled says whether the pool serves TLS (spec.tls.enabled, true
// when unset).
func (p *CompactorPool) TLSEnabled() bool { return tlsEnabled(p.Spec.TLS) }

func tlsEnabled(s *TLSSpec) bool { return s == nil || s.Enabled == nil || *s.Enabled }

// PrimaryTLSSecretName is the primary's certificate: NAME-primary-tls.
func (db *RocksDB) PrimaryTLSSecretName() string { return db.Name + "-primary-tls" }

// SecondaryTLSSecretName is the secondaries' certificate:
// NAME-secondary-tls.
func (db *RocksDB) SecondaryTLSSecretName() string { return db.Name + "-secondary-tls" }

// AccessSecretName is the database's access list: NAME-access.
func (db *RocksDB) AccessSecretName() string { return db.Name + "-access" }

// ClientSecretName is a client's credentials: NAME-client-CLIENT.
func (db *RocksDB) ClientSecretName(client string) string { return db.Name + "-client-" + client }

// SchedulerTLSSecretName is the scheduler's certificate:
// NAME-scheduler-tls.
func (p *CompactorPool) SchedulerTLSSecretName() string { return p.Name + "-scheduler-tls" }

// WorkerTLSSecretName is the workers' certificate: NAME-worker-tls.
func (p *CompactorPool) WorkerTLSSecretName() string { return p.Name + "-worker-tls" }

// OperatorTLSSecretName is, with spec.tls.issuerRef, the operator's own
// client certificate from that issuer, with which it reads the database's
// Status: NAME-operator-tls.
func (db *RocksDB) OperatorTLSSecretName() string { return db.Name + "-operator-tls" }

// OperatorTLSSecretName is, with spec.tls.issuerRef, the operator's own
// client certificate from that issuer, with which it reads the
// scheduler's Stats: NAME-operator-tls.
func (p *CompactorPool) OperatorTLSSecretName() string { return p.Name + "-operator-tls" }
