// Command kubectl-shale is the kubectl plugin for Shale: copy it onto your
// PATH and run `kubectl shale status NAME`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/shale-rocks/shale/internal/kubectlshale"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := kubectlshale.NewCommand(nil).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl shale:", err)
		os.Exit(1)
	}
}
