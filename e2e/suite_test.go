//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// config comes from the environment hack/e2e.sh sets up.
type config struct {
	kubeconfig string
	helm       string
	kubectl    string
	docker     string
	// node is the kind node's container name.
	node string
	// repo is the repository root (the chart is charts/shale in it).
	repo string
	// imageTag is the tag of the three images loaded into the node;
	// upgradeTag is a second, different operator image for the upgrade step.
	imageTag   string
	upgradeTag string
	// imagePrefix is the repository prefix of the images (IMAGE_PREFIX of
	// hack/images.sh; shale.local unless set).
	imagePrefix string
	// namespace holds the release, the demo MinIO and the databases.
	namespace string
	release   string
	// focus is E2E_FOCUS split at commas; empty runs every step.
	focus        []string
	failoverRuns int
	// nodeLossRuns is how many times the node-loss step freezes the
	// primary's node (E2E_NODE_LOSS_RUNS).
	nodeLossRuns int
	// switchoverRuns: switchovers measured by the switchover step.
	switchoverRuns int
	// hibernateIdle: how long the hibernate step watches MinIO serve no
	// request in the hibernated database's directory (E2E_HIBERNATE_IDLE;
	// the 10 minutes is E2E_HIBERNATE_IDLE=10m).
	hibernateIdle time.Duration
	// soakFailovers: failovers of the soak step (label soak).
	soakFailovers int
	// scaleDBs and scaleDuration: the scale step's databases and how long
	// it kills primaries (E2E_SCALE_DBS, E2E_SCALE_DURATION).
	scaleDBs      int
	scaleDuration time.Duration
	artifacts     string
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func loadConfig() (config, error) {
	wd, err := os.Getwd()
	if err != nil {
		return config{}, err
	}
	c := config{
		kubeconfig:  os.Getenv("KUBECONFIG"),
		helm:        os.Getenv("HELM"),
		kubectl:     os.Getenv("KUBECTL"),
		docker:      env("DOCKER", "/usr/bin/docker"),
		node:        env("KIND_CLUSTER", "shale-e2e") + "-control-plane",
		repo:        filepath.Dir(wd),
		imageTag:    os.Getenv("E2E_IMAGE_TAG"),
		upgradeTag:  os.Getenv("E2E_UPGRADE_TAG"),
		imagePrefix: env("IMAGE_PREFIX", "shale.local"),
		namespace:   env("E2E_NAMESPACE", "shale-e2e"),
		release:     "shale",
		artifacts:   env("E2E_ARTIFACTS", filepath.Join(os.TempDir(), "shale-e2e-"+time.Now().Format("20060102-150405"))),
	}
	for _, f := range strings.Split(os.Getenv("E2E_FOCUS"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			c.focus = append(c.focus, f)
		}
	}
	c.failoverRuns, err = strconv.Atoi(env("E2E_FAILOVER_RUNS", "5"))
	if err != nil || c.failoverRuns < 1 {
		return c, fmt.Errorf("E2E_FAILOVER_RUNS=%q: want a positive number", os.Getenv("E2E_FAILOVER_RUNS"))
	}
	c.nodeLossRuns, err = strconv.Atoi(env("E2E_NODE_LOSS_RUNS", "3"))
	if err != nil || c.nodeLossRuns < 1 {
		return c, fmt.Errorf("E2E_NODE_LOSS_RUNS=%q: want a positive number", os.Getenv("E2E_NODE_LOSS_RUNS"))
	}
	c.hibernateIdle, err = time.ParseDuration(env("E2E_HIBERNATE_IDLE", "30s"))
	if err != nil || c.hibernateIdle <= 0 {
		return c, fmt.Errorf("E2E_HIBERNATE_IDLE=%q: want a positive duration (30s, 10m)", os.Getenv("E2E_HIBERNATE_IDLE"))
	}
	c.switchoverRuns, err = strconv.Atoi(env("E2E_SWITCHOVER_RUNS", "5"))
	if err != nil || c.switchoverRuns < 1 {
		return c, fmt.Errorf("E2E_SWITCHOVER_RUNS=%q: want a positive number", os.Getenv("E2E_SWITCHOVER_RUNS"))
	}
	c.soakFailovers, err = strconv.Atoi(env("E2E_SOAK_FAILOVERS", "21"))
	if err != nil || c.soakFailovers < 3 {
		return c, fmt.Errorf("E2E_SOAK_FAILOVERS=%q: want a number of at least 3 (one of each kind)", os.Getenv("E2E_SOAK_FAILOVERS"))
	}
	c.scaleDBs, err = strconv.Atoi(env("E2E_SCALE_DBS", "20"))
	if err != nil || c.scaleDBs < 1 {
		return c, fmt.Errorf("E2E_SCALE_DBS=%q: want a positive number of databases", os.Getenv("E2E_SCALE_DBS"))
	}
	c.scaleDuration, err = time.ParseDuration(env("E2E_SCALE_DURATION", "5m"))
	if err != nil || c.scaleDuration <= 0 {
		return c, fmt.Errorf("E2E_SCALE_DURATION=%q: want a positive duration (5m)", os.Getenv("E2E_SCALE_DURATION"))
	}
	var missing []string
	for name, v := range map[string]string{"KUBECONFIG": c.kubeconfig, "HELM": c.helm, "KUBECTL": c.kubectl, "E2E_IMAGE_TAG": c.imageTag, "E2E_UPGRADE_TAG": c.upgradeTag} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return c, fmt.Errorf("%s not set: run the suite with make e2e (hack/e2e.sh sets them up)", strings.Join(missing, ", "))
	}
	return c, nil
}

// suite is what the steps share.
type suite struct {
	cfg  config
	rest *rest.Config
	kube client.Client
	cs   *kubernetes.Clientset
	// top is the suite's test, for what lives as long as the run.
	top *testing.T
	// rw is the host address of the main database's NAME-rw Service.
	rw string
	// ro: the NAME-ro Service; secondaryProxies: each secondary Pod.
	ro               string
	secondaryProxies map[string]string
	// db is the RocksDB the traffic steps use; ledger is every write
	// acknowledged to it (and every one refused) since the suite began.
	db     string
	ledger *ledger
	// ran records the steps that passed.
	ran map[string]bool
	// operatorSeries are the metric names the operator exported after
	// some step.
	operatorSeries map[string]bool
	// failovers are the measurements of the failover step, for the summary.
	failovers map[string][]failoverRun
	// nodes are the cluster's nodes (more than one: the operator and MinIO
	// are kept on the control plane, chartArgs).
	nodes []string
	// timelines: where each measured failover's time went.
	timelines map[string][]*timeline
}

const (
	objectStoreName = "minio"
	mainDB          = "e2e"
	kvPort          = 7070
)

func newSuite(t *testing.T) *suite {
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", cfg.kubeconfig, err)
	}
	rc.QPS, rc.Burst = 50, 100
	scheme := clientgoscheme.Scheme
	if err := shalev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kc, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &suite{cfg: cfg, rest: rc, kube: kc, cs: cs, db: mainDB, ledger: newLedger(), failovers: map[string][]failoverRun{}, timelines: map[string][]*timeline{}, ran: map[string]bool{}, operatorSeries: map[string]bool{}, secondaryProxies: map[string]string{}}
	credMu.Lock()
	credSuite = s
	credMu.Unlock()
	return s
}

// step is one stage of the suite. Steps run in the order of the table;
// each leaves the main database serving for the next.
type step struct {
	name   string
	labels []string
	run    func(t *testing.T, s *suite)
	// optIn: only when E2E_FOCUS names it or one of its labels, never in
	// the default run.
	optIn bool
}

func (st step) selected(focus []string) bool {
	if len(focus) == 0 {
		return !st.optIn
	}
	for _, f := range focus {
		if f == st.name || slices.Contains(st.labels, f) {
			return true
		}
	}
	return false
}

func TestE2E(t *testing.T) {
	s := newSuite(t)
	s.top = t
	known := map[string]bool{}
	for _, st := range steps {
		known[st.name] = true
		for _, l := range st.labels {
			known[l] = true
		}
	}
	for _, f := range s.cfg.focus {
		if !known[f] {
			labels := make([]string, 0, len(known))
			for l := range known {
				labels = append(labels, l)
			}
			slices.Sort(labels)
			t.Fatalf("E2E_FOCUS names %q, which is no step or label; known: %s", f, strings.Join(labels, ", "))
		}
	}
	s.nodes = s.nodeNames(t)
	t.Logf("cluster nodes %v (control plane %s), images tagged %s, namespace %s, artifacts in %s", s.nodes, s.cfg.node, s.cfg.imageTag, s.cfg.namespace, s.cfg.artifacts)
	s.prepareNode(t)

	type result struct{ name, outcome string }
	var results []result
	defer func() {
		t.Log("summary:")
		for _, r := range results {
			t.Logf("  %-16s %s", r.name, r.outcome)
		}
		s.printFailovers(t)
	}()
	for i, st := range steps {
		// The first step installs everything the others use; it always runs.
		if i > 0 && !st.selected(s.cfg.focus) {
			why := "not selected by E2E_FOCUS"
			if st.optIn && len(s.cfg.focus) == 0 {
				why = "runs only when E2E_FOCUS names it (" + strings.Join(st.labels, ", ") + ")"
			}
			results = append(results, result{st.name, why})
			continue
		}
		start := time.Now()
		ok := t.Run(st.name, func(t *testing.T) {
			defer func() {
				if t.Failed() {
					s.dump(t, st.name)
				}
			}()
			st.run(t, s)
		})
		outcome := fmt.Sprintf("passed in %s", time.Since(start).Round(time.Second))
		s.ran[st.name] = ok
		s.noteOperatorMetrics()
		if !ok {
			outcome = fmt.Sprintf("FAILED after %s", time.Since(start).Round(time.Second))
		}
		results = append(results, result{st.name, outcome})
		if !ok && i == 0 {
			t.Fatal("the install step failed; the other steps need it")
		}
	}
	// Every write acknowledged over the whole run is still there.
	if len(results) > 1 && !t.Failed() {
		t.Run("final-check", func(t *testing.T) {
			defer func() {
				if t.Failed() {
					s.dump(t, "final-check")
				}
			}()
			s.verifyLedger(t, s.rwAddr(t))
		})
	}
}

// ctx is a context that ends with the test (and at the latest after d).
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// eventually polls cond every interval until it reports done or the
// timeout passes; then it fails t with cond's last description of the
// state. Tests wait for conditions, never for fixed times.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := 100 * time.Millisecond
	var state string
	for {
		var done bool
		done, state = cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(interval)
		if interval < time.Second {
			interval += interval / 2
		}
	}
}

// run runs a command, failing t with its output if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := runErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *suite) helm(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, s.cfg.helm, append([]string{"--kubeconfig", s.cfg.kubeconfig}, args...)...)
}

func (s *suite) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, s.cfg.kubectl, append([]string{"--kubeconfig", s.cfg.kubeconfig}, args...)...)
}

// nodeExec runs a shell command inside the kind node.
func (s *suite) nodeExec(t *testing.T, script string) string {
	t.Helper()
	return strings.TrimSpace(run(t, s.cfg.docker, "exec", s.cfg.node, "sh", "-c", script))
}
