package primary

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/shale-rocks/shale/internal/node"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// FenceConfig is what `shale fence` needs: the stores and the takeover's
// settings (epoch, --existing, lease, timeouts, cache directory).
type FenceConfig struct {
	DB, ColdDB, ColdEndpoint string
	Storage                  shalefs.Config
	Logger                   *slog.Logger
}

// Fence fences the database at cfg.DB by hand (`shale fence`, RFC 0014):
// a takeover that opens no RocksDB, released at once (shalefs.Fence).
func Fence(ctx context.Context, cfg FenceConfig) (shalefs.FenceReport, error) {
	st, err := node.OpenStores(node.StoreConfig{DB: cfg.DB, ColdDB: cfg.ColdDB, ColdEndpoint: cfg.ColdEndpoint, Store: cfg.Storage.Store, Cold: cfg.Storage.Cold})
	if err != nil {
		return shalefs.FenceReport{}, err
	}
	sc := cfg.Storage
	sc.Store, sc.Cold = st.DB, st.Cold
	if cfg.Logger != nil {
		sc.Logger = cfg.Logger
	}
	if sc.Owner == "" {
		host, _ := os.Hostname()
		sc.Owner = fmt.Sprintf("%s pid %d (shale fence)", host, os.Getpid())
	}
	rep, err := shalefs.Fence(ctx, sc)
	if err != nil {
		return rep, fmt.Errorf("--db %s: %w", st.URL, err)
	}
	return rep, nil
}
