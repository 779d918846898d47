// Command shale-operator is the Kubernetes operator that runs Shale
// databases. It is a pure-Go binary (CGO_ENABLED=0).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/shale-rocks/shale/internal/version"
)

func main() {
	fs := flag.NewFlagSet("shale-operator", flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if *showVersion {
		fmt.Printf("shale-operator %s\n", version.Version)
		return
	}
	// The controllers (RocksDB, CompactorPool, GC) arrive with the operator
	// issue; until then refuse to pretend to manage anything.
	fmt.Fprintln(os.Stderr, "shale-operator: this build has no controllers yet; run `shale dev` or `shale primary` to serve a database")
	os.Exit(1)
}
