package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func newHealthCmd() *cobra.Command {
	kc := &kvClient{}
	var service string
	c := &cobra.Command{
		Use:   "health [--addr HOST:PORT] [--service S]",
		Short: "Check a server's gRPC health (exit 0 iff SERVING): a readiness probe",
		Long: `Health asks the server's standard gRPC health service whether it serves
(--service, default the whole server) and prints the answer. It exits 0 only
for SERVING, so that it works as an exec readiness probe. The health service
needs no identity, but with TLS the client verifies the server: give --tls-ca
(and --tls-server-name when --addr is not a name the certificate has; Shale's
server certificates name localhost and 127.0.0.1).`,
		Example: `  shale health --addr 127.0.0.1:7070
  shale health --addr 127.0.0.1:7070 --tls-ca /etc/shale/tls/ca.crt
  shale health --addr 127.0.0.1:7080 --service shale.compactor.v1.Compactor --tls-ca ca.crt`,
		Args: exactArgs(),
	}
	fs := c.Flags()
	fs.StringVar(&kc.addr, "addr", "127.0.0.1:7070", "address of the server, `HOST:PORT`")
	fs.Var(newDuration(&kc.timeout, 5*time.Second), "timeout", "give up after this long")
	fs.StringVar(&service, "service", "", "gRPC `service` to ask about (empty: the whole server)")
	kc.sec = addClientFlags(c, fs, "addr")
	noFileCompletion(c, "addr", "timeout", "service")
	c.RunE = func(c *cobra.Command, _ []string) error {
		conn, err := kc.dial()
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), kc.timeout)
		defer cancel()
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			if derr := describeConnError(kc.addr, kc.security, err); derr != nil {
				return derr
			}
			switch status.Code(err) {
			case codes.NotFound:
				return fmt.Errorf("%s serves no service %q (--service)", kc.addr, service)
			case codes.DeadlineExceeded:
				return fmt.Errorf("no answer from %s within %s (--timeout)", kc.addr, kc.timeout)
			case codes.Unavailable:
				return fmt.Errorf("cannot reach a server at %s: %s", kc.addr, status.Convert(err).Message())
			}
			return fmt.Errorf("%s: %s", status.Code(err), status.Convert(err).Message())
		}
		fmt.Fprintln(c.OutOrStdout(), r.Status)
		if r.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("%s is %s", kc.addr, r.Status)
		}
		return nil
	}
	return c
}
