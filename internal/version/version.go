// Package version holds the Shale version, set at build time with
// -ldflags "-X github.com/shale-rocks/shale/internal/version.Version=...".
package version

// Version is the Shale release or git revision this binary was built from.
var Version = "dev"
