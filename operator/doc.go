// Package operator is Shale's Kubernetes operator: controllers for
// ObjectStore (is the store reachable and does it honour conditional
// writes) and RocksDB (storage path, primary Pod, Service, failover by
// epoch, secondaries, reclaim policy, remote compaction settings),
// CompactorPool (a compactor scheduler and workers scaled on its queue),
// and a garbage collector of orphaned
// database directories. docs/operator.md describes the design and its safety
// arguments.
//
// One file per concern: rocksdb_controller.go (the reconcile loop),
// primary.go (creating and watching the primary), failover.go (the pure
// decisions: when to fail over, which epoch), primary_pod.go (the Pod),
// secondaries.go (the secondaries' Deployment and NAME-ro, and their
// status), secondary_deployment.go (the Deployment), service.go (NAME-rw
// and NAME-ro), finalizer.go (reclaim policy), objectstore_controller.go,
// probe.go (the reachability check), gc.go (the pure orphan rule),
// gc_runner.go (the periodic pass), layout.go (where things live in the
// bucket), owner_record.go, stores.go (store clients from ObjectStores and
// their Secrets), status.go (the one status-patch helper), events.go,
// metrics.go, setup.go; compactorpool_controller.go (the pool's reconcile
// loop and its status), compactorpool_resources.go (its Deployments and
// Service), compactorpool_scale.go (the pure worker-count decision),
// compaction.go (a RocksDB's CompactorPoolReady and status.compaction);
// ca.go (the operator's CA and its own certificate), certificates.go (the
// certificate and client Secrets, and the pure renewal decision),
// tls_pod.go (what TLS adds to a Pod);
// networkpolicy.go (the NetworkPolicies of databases and pools).
//
// The operator is pure Go (CGO_ENABLED=0): it uses internal/objstore and
// the compactor's gRPC API, never the storage engine.
package operator
