# Shale — build, test and run. `make help` lists the targets.
SHELL := /bin/bash
include hack/versions.env

BIN        := $(CURDIR)/bin
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS    := -X github.com/shale-rocks/shale/internal/version.Version=$(VERSION)
GO_TEST_FLAGS ?= -count=1 -timeout 20m
DEV_DATA   ?= $(CURDIR)/.shale-dev

# Go from its usual install location, for shells whose PATH lacks it.
export PATH := $(BIN):$(PATH):/usr/local/go/bin

# RocksDB is built once per machine from Debian's source package as a static
# library (hack/rocksdb.sh, run by `make deps`); every cgo build compiles
# against its headers and links its librocksdb.a, so binaries carry RocksDB.
export CGO_CFLAGS := $(shell hack/rocksdb.sh --cflags)
export CGO_CXXFLAGS := $(CGO_CFLAGS)
export CGO_LDFLAGS := $(shell hack/rocksdb.sh --ldflags)

.PHONY: help deps rocksdb rocksdb-tools build test stress bench-storage bench-served bench-load bench-knobs bench-idle bench-takeover bench-compaction bench-secondary bench-tiering bench-remote-reads bench-durable bench-clone bench-backup bench-operator bench-archive-lag dev generate lint clean
.PHONY: docker k8s-binaries envtest-assets kind-node-image images kind-up kind-down kind-load kind-smoke
.PHONY: helm helm-lint chart-sync e2e e2e-nodes

# Kubernetes tooling is built from Go modules into a cache outside the repo
# (hack/k8s-binaries.sh); envtest finds kube-apiserver and etcd here.
KUBEBUILDER_ASSETS = $(shell hack/envtest-assets.sh --print)
KIND_CLUSTER ?= shale
export KIND_CLUSTER
# make e2e runs on a cluster of its own, so it never touches yours.
E2E_CLUSTER ?= shale-e2e
# make e2e-nodes: a cluster of three nodes (a control plane, which keeps its
# taint and runs the operator and MinIO, and two workers for the databases).
E2E_NODES_CLUSTER ?= shale-nodes
HELM = $(shell hack/k8s-binaries.sh --print helm)

help: ## list targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

deps: ## install every build and test dependency (apt, Go tools, MinIO)
	hack/install-deps.sh

rocksdb: ## build RocksDB (the version in hack/versions.env, static) into the cache if missing (part of deps; ~15 min the first time on 2 cores)
	hack/rocksdb.sh

rocksdb-tools: ## also build db_bench, ldb and sst_dump from the same RocksDB tree (the benchmarks that need them do this themselves)
	hack/rocksdb.sh tools

build: rocksdb ## build bin/shale, bin/shale-operator and the kubectl plugin bin/kubectl-shale
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/shale ./cmd/shale
	CGO_ENABLED=0 go build -ldflags '$(LDFLAGS)' -o $(BIN)/shale-operator ./cmd/shale-operator
	CGO_ENABLED=0 go build -ldflags '$(LDFLAGS)' -o $(BIN)/kubectl-shale ./cmd/kubectl-shale

# The storage layer (FileSystem, fencing, object stores) runs under the race
# detector; everything else without it, to keep the run short on 2 cores.
RACE_PKGS = ./internal/shalefs/... ./internal/objstore/...

test: deps envtest-assets helm-lint ## install dependencies and envtest binaries, check the chart, then run every test (storage layer with -race)
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) HELM=$(HELM) go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /internal/shalefs -e /internal/objstore)
	go test -race $(GO_TEST_FLAGS) $(RACE_PKGS)

stress: deps ## long fencing race on MinIO: STRESS_ROUNDS (1000) takeovers under concurrent synced writes (STRESS_BACKEND=file for file://; STRESS_PIPELINE=D: D WAL uploads in flight, RFC 0013); then the log-protocol model at its large bound
	SHALE_STRESS_ROUNDS=$${STRESS_ROUNDS:-1000} SHALE_STRESS_PIPELINE=$${STRESS_PIPELINE:-1} go test -count=1 -timeout 120m -run "^TestFencingRace$$/$${STRESS_BACKEND:-minio}" -v ./primary/ 2>&1 | grep --line-buffered -vE 'level=|INFO|ERROR this owner'
	SHALE_MODEL_BOUND=large go test -count=1 -timeout 60m -run 'TestLogModel$$' -v ./internal/shalefs/protocol/

bench-storage: deps ## db_bench on a local dir vs Shale on file:// vs Shale on MinIO (NUM keys, default 1M; BASE=<git ref> adds that revision's engine)
	hack/bench-storage.sh

bench-served: deps ## server and client CPU per unary Put and Get of shale primary on MinIO, with and without TLS (NUM, ROUNDS, TLS=0; BASE=<git ref> also measures that revision)
	hack/bench-served.sh

bench-remote-reads: deps ## reads of tables left in the store with caches under 5% of the data: BASE (default main) vs this tree (sync, sync with --scan-readahead, --async-io) vs all cached (NUM, ROUNDS, READ_SECONDS, CACHE, SETUPS, READAHEAD, LATENCY=10ms: through a proxy adding that per request)
	hack/bench-remote-reads.sh

bench-durable: deps ## durable (sync) writes at 16 and 64 clients on MinIO: BASE (default main) vs this tree (depth 1, and PIPELINE=4 WAL uploads in flight) vs one conditional PUT vs db_bench fillsync, and BATCH=100 batched loads; PEER_BIN (Rust) or PEER_PYTHON add SlateDB (THREADS, DURATION, ROUNDS)
	hack/bench-durable.sh

bench-archive-lag: deps ## the continuous archive's lag (p50/p99/max) under ~1,000 synced writes/s for 30 s on MinIO (internal/backup, build tag bench)
	go test -tags bench -count=1 -run '^TestArchiveLagUnderLoad$$' -v ./internal/backup/

bench-operator: deps envtest-assets ## the operator at scale in envtest: OPERATOR_DBS (1000) RocksDBs at once, time to all Ready, reconcile p50/p99, memory, API requests per minute at rest and while OPERATOR_FAILOVERS (100) fail over (OPERATOR_REST=3m, OPERATOR_NAMESPACES=10)
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) go test -tags bench -count=1 -timeout 90m -run '^TestOperatorScale$$' -v ./operator/

bench-load: deps ## bulk loads on MinIO: in-process engine vs shale kv load vs kv load --sst (LOAD_NUM pairs, default 1M)
	hack/bench-load.sh

bench-knobs: deps ## each RocksDB knob of shale primary (hash index, unordered/pipelined writes, async IO) vs defaults, with shale bench on MinIO
	hack/bench-knobs.sh

bench-idle: deps build ## object-store requests of an idle primary (IDLE_SECONDS, default 300) and per 1,000 synced writes, priced (docs/cost.md)
	hack/idle-cost.sh

bench-takeover: deps ## takeover time to serve on MinIO after many SSTs, WAL segments, takeovers (TAKEOVER_SST, _SEGMENTS, _ROUNDS)
	hack/bench-takeover.sh

bench-compaction: deps build ## fillrandom with local vs remote compaction (1 and 2 workers), primary pinned to one core: throughput, p50/p99/p99.9, compaction MB/s (DURATION, THREADS, KEYS)
	hack/bench-compaction.sh

bench-secondary: deps build ## secondaries on MinIO: visibility lag with notifications vs polling (SECONDARY_RATE, _DURATION), read ops/s vs the primary (SECONDARY_KEYS)
	hack/bench-secondary.sh
bench-clone: deps ## a clone of a CLONE_BYTES (default 1GiB) parent on MinIO: zero-copy in the same store vs a full server-side copy into a 2nd bucket (time to serve, bytes copied, ratios)
	hack/bench-clone.sh

bench-backup: deps ## backups on two MinIOs: a full backup of BACKUP_BYTES (default 1GiB) vs a plain copy of the same objects (server-side and streamed), an incremental after 1% change, restore to serving, archive lag p50/p99 under ~1,000 synced writes/s (ratios)
	hack/bench-backup.sh

bench-tiering: deps ## tiered placement on two MinIOs, cold one behind TIERING_LATENCY: cold share over time, readrandom recent vs old keys
	hack/bench-tiering.sh

dev: deps build ## install dependencies, build, and run `shale dev` on DEV_DATA
	$(BIN)/shale dev --data $(DEV_DATA)

generate: ## regenerate protobuf/gRPC code, deepcopy, CRDs and RBAC (all committed)
	protoc --proto_path=. \
	  --plugin=protoc-gen-go=$(BIN)/protoc-gen-go \
	  --plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
	  --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
	  api/kv/v1/kv.proto api/compactor/v1/compactor.proto
	$(BIN)/controller-gen object paths=./api/v1alpha1/...
	$(BIN)/controller-gen crd paths=./api/v1alpha1/... output:crd:dir=config/crd/bases
	$(BIN)/controller-gen rbac:roleName=shale-operator paths=./operator/... output:rbac:dir=config/rbac
	hack/chart.sh sync

lint: ## gofmt, go vet, and a check that generated code is up to date
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	$(MAKE) --no-print-directory generate
	git diff --exit-code -- api/ config/ charts/shale/files/ || { echo "generated code is stale: run make generate and commit"; exit 1; }
	@out=$$(git status --porcelain --untracked-files=all -- api/ config/ charts/shale/files/); if [ -n "$$out" ]; then echo "generated files not committed:"; echo "$$out"; exit 1; fi

docker: ## make sure a dockerd that can run privileged containers is up (installs docker.io)
	hack/docker.sh

k8s-binaries: ## build kubelet, kubeadm, kubectl, control plane, etcd, CoreDNS, crictl, kind, helm (cached)
	hack/k8s-binaries.sh

envtest-assets: ## lay out kube-apiserver, etcd, kubectl for envtest (cached; no docker needed)
	hack/envtest-assets.sh

kind-node-image: docker ## assemble the kind node image offline (rebuilt only when its inputs change)
	hack/node-image.sh

images: docker deps build ## build Shale's images: shale-operator, shale, minio (tagged with the git revision)
	hack/images.sh

kind-up: kind-node-image images ## create the kind cluster KIND_CLUSTER (default shale) and load Shale's images
	hack/kind.sh up
	hack/kind.sh load

kind-load: images ## load Shale's images into the running cluster
	hack/kind.sh load

kind-down: ## delete the kind cluster KIND_CLUSTER
	hack/kind.sh down

kind-smoke: kind-node-image images ## create a cluster, run shale and minio pods, check a Service, delete it
	hack/kind-smoke.sh

helm: ## build helm from its Go module (pinned, cached)
	hack/chart.sh helm >/dev/null

chart-sync: ## copy the generated CRDs and RBAC rules (config/) into charts/shale/files
	hack/chart.sh sync

helm-lint: helm ## charts/shale: in sync with config/, helm lint, helm template with its values files and schema
	hack/chart.sh lint

e2e: ## kind cluster shale-e2e (E2E_CLUSTER) with fresh images, then the end-to-end suite (E2E_FOCUS=label runs a subset); not part of make test
	$(MAKE) --no-print-directory kind-up KIND_CLUSTER=$(E2E_CLUSTER)
	KIND_CLUSTER=$(E2E_CLUSTER) hack/e2e.sh

e2e-nodes: ## kind cluster shale-nodes (E2E_NODES_CLUSTER: control plane + 2 workers), then the node steps: drain and node loss (E2E_FOCUS=nodes); not part of make e2e
	$(MAKE) --no-print-directory kind-up KIND_CLUSTER=$(E2E_NODES_CLUSTER) KIND_WORKERS=2
	KIND_CLUSTER=$(E2E_NODES_CLUSTER) E2E_FOCUS=$${E2E_FOCUS:-nodes} hack/e2e.sh

clean: ## remove built binaries (never data: DEV_DATA is kept)
	rm -rf $(BIN)/shale $(BIN)/shale-operator
