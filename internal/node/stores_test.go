package node

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
)

// flakyFront is a TCP front for a store that drops the first `drop`
// connections as soon as they are accepted (what a node sees while the
// store or its DNS name is not there yet), then relays to target.
type flakyFront struct {
	ln      net.Listener
	drop    int32
	dropped atomic.Int32
	wg      sync.WaitGroup
}

func startFlakyFront(t *testing.T, target string, drop int32) *flakyFront {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyFront{ln: ln, drop: drop}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if f.dropped.Load() < f.drop {
				f.dropped.Add(1)
				c.Close()
				continue
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, up)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return f
}

// A store that drops connections for a while at start-up (more attempts
// than the store client's own retries) is waited for; one that answers
// "no such bucket" is refused at once, naming the flag.
func TestOpenStoresWaitsForTheStore(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "dbs")
	front := startFlakyFront(t, strings.TrimPrefix(srv.Endpoint, "http://"), 8)
	t.Setenv(objstore.EnvEndpoint, "http://"+front.ln.Addr().String())
	t.Setenv(objstore.EnvEndpointS3, "")
	t.Setenv(objstore.EnvAccessKeyID, srv.AccessKey)
	t.Setenv(objstore.EnvSecretAccessKey, srv.SecretKey)

	s, err := OpenStores(StoreConfig{DB: "s3://dbs/orders"})
	if err != nil {
		t.Fatalf("OpenStores with a store that dropped its first %d connections: %v", front.drop, err)
	}
	if got := front.dropped.Load(); got != front.drop {
		t.Errorf("the front dropped %d connections, want %d: the check did not outlast them", got, front.drop)
	}
	if s.URL != "s3://dbs/orders" {
		t.Errorf("URL %s", s.URL)
	}

	_, err = OpenStores(StoreConfig{DB: "s3://missing/orders"})
	if err == nil || !strings.Contains(err.Error(), "--db s3://missing/orders") || !errors.Is(err, objstore.ErrBucketNotFound) {
		t.Errorf("a missing bucket: %v, want --db ... and ErrBucketNotFound", err)
	}
}

// The check gives up after its timeout on a store that never answers,
// with the last failure in the error.
func TestCheckBucketGivesUp(t *testing.T) {
	srv := miniotest.Start(t)
	front := startFlakyFront(t, strings.TrimPrefix(srv.Endpoint, "http://"), 1<<30)
	s3, err := objstore.OpenS3("s3://dbs/x", objstore.S3Config{Endpoint: "http://" + front.ln.Addr().String(), AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	err = checkBucket(s3, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "no answer for 2s") {
		t.Errorf("checkBucket on a store that drops every connection: %v, want \"no answer for 2s: ...\"", err)
	}
}
