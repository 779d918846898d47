//go:build e2e

package e2e

// The steps of the suite, in the order they run. Labels select subsets
// (E2E_FOCUS=failover); the first step installs what every other needs and
// always runs. A new feature adds its steps here (and its labels).
var steps = []step{
	{name: "install", labels: []string{"install", "smoke"}, run: stepInstall},
	{name: "kv", labels: []string{"kv", "smoke"}, run: stepKV},
	{name: "secondaries", labels: []string{"secondaries"}, run: stepSecondaries},
	{name: "checkpoint", labels: []string{"checkpoint"}, run: stepCheckpoint},
	{name: "clone", labels: []string{"checkpoint", "clone"}, run: stepClone},
	{name: "backup", labels: []string{"backup"}, run: stepBackup},
	{name: "pitr", labels: []string{"backup", "pitr"}, run: stepPITR},
	{name: "security", labels: []string{"security", "smoke"}, run: stepSecurity},
	{name: "validation", labels: []string{"validation", "smoke"}, run: stepValidation},
	{name: "upgrade", labels: []string{"upgrade", "chart"}, run: stepUpgrade},
	{name: "switchover", labels: []string{"switchover", "failover"}, run: stepSwitchover},
	{name: "rolling-update", labels: []string{"rolling", "switchover"}, run: stepRollingUpdate},
	// After upgrade (which checks that a new operator image alone restarts
	// no primary): a new image for primaries rolls them.
	{name: "upgrade-primaries", labels: []string{"upgrade", "rolling", "chart"}, run: stepUpgradePrimaries},
	{name: "failover-delete", labels: []string{"failover", "failover-delete"}, run: stepFailover(failoverPodDelete)},
	{name: "failover-kill", labels: []string{"failover", "failover-kill"}, run: stepFailover(failoverSIGKILL)},
	{name: "failover-operator-killed", labels: []string{"failover", "operator-killed"}, run: stepOperatorKilledMidFailover},
	{name: "store-outage", labels: []string{"failover", "store-outage"}, run: stepStoreOutage},
	{name: "zombie", labels: []string{"zombie", "fencing"}, run: stepZombie},
	{name: "secondaries-failover", labels: []string{"secondaries", "failover"}, run: stepSecondariesFailover},
	{name: "compaction", labels: []string{"compaction"}, run: stepCompaction},
	{name: "tiering", labels: []string{"tiering"}, run: stepTiering},
	{name: "gc", labels: []string{"gc"}, run: stepGC},
	{name: "unstartable-primary", labels: []string{"backoff", "operator"}, run: stepUnstartablePrimary},
	{name: "namespace-deletion", labels: []string{"gc", "namespace-deletion"}, run: stepNamespaceDeletion},
	{name: "plugin", labels: []string{"plugin", "operator"}, run: stepPlugin},
	{name: "hibernate", labels: []string{"hibernate", "fencing", "plugin"}, run: stepHibernate},
	// Not in the default run (about a minute per three changes of primary).
	{name: "soak", labels: []string{"soak"}, run: stepSoak, optIn: true},
	// Not in the default run: 20 databases, a primary killed every 10 s
	// for 5 minutes (issue 29).
	{name: "scale", labels: []string{"scale"}, run: stepScale, optIn: true},
	// Last: the dashboard's series exist once the steps above produced them.
	{name: "metrics", labels: []string{"metrics", "chart"}, run: stepMetrics},
	// A cluster of several nodes only (make e2e-nodes); opt-in.
	{name: "drain", labels: []string{"nodes", "drain"}, run: stepDrain, optIn: true},
	{name: "node-loss", labels: []string{"nodes", "node-loss"}, run: stepNodeLoss, optIn: true},
}
