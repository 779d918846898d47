// Package e2e is Shale's end-to-end suite: the Helm chart, the operator and
// real primaries on a kind cluster made by `make kind-up`, with every image
// built locally and loaded into the node. Run it with `make e2e`; the tests
// carry the build tag e2e, so `go test ./...` does not run them.
//
// Each step has labels; E2E_FOCUS=failover,gc runs only the steps carrying
// one of them (after the install step, which every step needs). Later
// features add their steps to the table in steps_test.go.
//
// The test process runs on the host. It reaches Services and Pods the way a
// client inside the cluster would: through tcpproxy (a small TCP forwarder,
// in tcpproxy/) that it copies into the kind node and runs there, so a
// connection to the proxy is a connection from the node to a ClusterIP
// (kube-proxy picks the endpoint) or to a Pod IP.
package e2e
