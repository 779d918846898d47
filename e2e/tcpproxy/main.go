// Command tcpproxy forwards TCP connections: the e2e suite copies it into
// the kind node and runs it there (docker exec), so that the test process
// on the host reaches a Service's ClusterIP or a Pod's IP exactly as a
// client inside the cluster would. Each accepted connection gets its own
// connection to the target (so kube-proxy picks the Service's endpoint for
// it), and the two are closed together.
//
//	tcpproxy LISTEN_ADDR TARGET_ADDR
//
// It prints "listening on ADDR" once it accepts connections, and exits when
// its standard input closes (the suite holds it open), so that it never
// outlives the test that started it.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: tcpproxy LISTEN_ADDR TARGET_ADDR")
		os.Exit(2)
	}
	target := os.Args[2]
	l, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpproxy:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", l.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "tcpproxy:", err)
			os.Exit(1)
		}
		go forward(c, target)
	}
}

func forward(c net.Conn, target string) {
	defer c.Close()
	t, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		// The client sees its connection closed, as it would see a refused
		// connection to the Service.
		return
	}
	defer t.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		// Either side finishing ends both: a half-open connection to a
		// dead primary must not keep the client waiting.
		dst.Close()
		src.Close()
	}
	go pipe(t, c)
	go pipe(c, t)
	wg.Wait()
}
