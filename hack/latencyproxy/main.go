// Command latencyproxy is an HTTP reverse proxy that holds each request
// back by -latency before it forwards it: the first-byte latency of a
// remote object store (5-30 ms for S3) in front of a MinIO on loopback
// (~0.3 ms). Benchmarks only (hack/bench-remote-reads.sh, LATENCY=); never
// in a test's path.
//
// It keeps the client's Host header, so S3 signatures made for the
// proxy's address verify at the server behind it.
//
//	latencyproxy -target http://127.0.0.1:9000 -latency 10ms
//
// prints "http://127.0.0.1:PORT" on its first line once it listens.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	target := flag.String("target", "", "the store's endpoint, http://HOST:PORT")
	latency := flag.Duration("latency", 10*time.Millisecond, "added before each request is forwarded")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		fmt.Fprintf(os.Stderr, "latencyproxy: -target %q is not an endpoint; want http://HOST:PORT\n", *target)
		os.Exit(2)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // signed by the client
		},
		Transport: &http.Transport{
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			DisableCompression:  true, // an added Accept-Encoding is not signed
		},
		FlushInterval: -1,
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "latencyproxy:", err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", l.Addr())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(*latency) // the store's first-byte latency
		rp.ServeHTTP(w, r)
	})
	if err := http.Serve(l, h); err != nil {
		fmt.Fprintln(os.Stderr, "latencyproxy:", err)
		os.Exit(1)
	}
}
