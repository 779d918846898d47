package objstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestRetryable(t *testing.T) {
	refused := &url.Error{Op: "Put", URL: "http://127.0.0.1:9000/b/k", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	reset := &url.Error{Op: "Get", URL: "http://h/b/k", Err: &net.OpError{
		Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}}
	dialTimeout := &url.Error{Op: "Get", URL: "http://h/b/k", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}}
	noHost := &url.Error{Op: "Get", URL: "http://nohost/b/k", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "nohost", IsNotFound: true}}}
	dnsDown := &url.Error{Op: "Get", URL: "http://h/b/k", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "server misbehaving", Name: "h", IsTemporary: true}}}
	serverClosed := &url.Error{Op: "Put", URL: "http://h/b/k", Err: io.EOF}
	badCert := &url.Error{Op: "Get", URL: "https://h/b/k", Err: x509.UnknownAuthorityError{}}
	schemeMismatch := &url.Error{Op: "Get", URL: "https://h/b/k", Err: http.ErrSchemeMismatch}

	for _, tc := range []struct {
		name   string
		ctxErr error
		status int
		code   string
		cause  error
		want   bool
	}{
		// Server answers.
		{name: "503 SlowDown", status: 503, code: "SlowDown", want: true},
		{name: "503 no code", status: 503, want: true},
		{name: "500 InternalError", status: 500, code: "InternalError", want: true},
		{name: "502", status: 502, want: true},
		{name: "504", status: 504, want: true},
		{name: "501 NotImplemented", status: 501, code: "NotImplemented", want: false},
		{name: "429", status: 429, want: true},
		{name: "408", status: 408, want: true},
		{name: "400 RequestTimeout", status: 400, code: "RequestTimeout", want: true},
		{name: "409 ConditionalRequestConflict", status: 409, code: "ConditionalRequestConflict", want: true},
		{name: "503 MinIO not initialized", status: 503, code: "XMinioServerNotInitialized", want: true},
		{name: "412 PreconditionFailed", status: 412, code: "PreconditionFailed", want: false},
		{name: "404 NoSuchKey", status: 404, code: "NoSuchKey", want: false},
		{name: "404 NoSuchBucket", status: 404, code: "NoSuchBucket", want: false},
		{name: "403 AccessDenied", status: 403, code: "AccessDenied", want: false},
		{name: "403 SignatureDoesNotMatch", status: 403, code: "SignatureDoesNotMatch", want: false},
		{name: "400 InvalidArgument", status: 400, code: "InvalidArgument", want: false},
		{name: "416 InvalidRange", status: 416, code: "InvalidRange", want: false},

		// No answer.
		{name: "connection refused", cause: refused, want: true},
		{name: "connection reset", cause: reset, want: true},
		{name: "dial timeout", cause: dialTimeout, want: true},
		{name: "server closed the connection", cause: serverClosed, want: true},
		{name: "body cut short", cause: fmt.Errorf("read: %w", io.ErrUnexpectedEOF), want: true},
		{name: "DNS name not found", cause: noHost, want: false},
		{name: "DNS server failure", cause: dnsDown, want: true},
		{name: "bad certificate", cause: badCert, want: false},
		{name: "http endpoint with https", cause: schemeMismatch, want: false},
		{name: "EINTR", cause: fmt.Errorf("put: %w", syscall.EINTR), want: true},
		{name: "EAGAIN", cause: fmt.Errorf("put: %w", syscall.EAGAIN), want: true},
		{name: "EIO", cause: fmt.Errorf("put: %w", &os.PathError{Op: "write", Path: "/x", Err: syscall.EIO}), want: false},
		{name: "ENOSPC", cause: fmt.Errorf("put: %w", syscall.ENOSPC), want: false},
		{name: "not found", cause: fmt.Errorf("stat k: %w", ErrNotFound), want: false},
		{name: "precondition", cause: fmt.Errorf("put k: %w", ErrPreconditionFailed), want: false},
		{name: "invalid key", cause: ErrInvalidKey, want: false},
		{name: "other", cause: errors.New("something"), want: false},
		{name: "nil", want: false},

		// The caller's context ended: never, whatever else happened.
		{name: "canceled", ctxErr: context.Canceled, cause: context.Canceled, want: false},
		{name: "deadline", ctxErr: context.DeadlineExceeded, cause: context.DeadlineExceeded, want: false},
		{name: "canceled while refused", ctxErr: context.Canceled, cause: refused, want: false},
		{name: "deadline during 503", ctxErr: context.DeadlineExceeded, status: 503, code: "SlowDown", want: false},
		{name: "bare canceled", cause: context.Canceled, want: false},
		{name: "bare deadline", cause: fmt.Errorf("get: %w", context.DeadlineExceeded), want: false},
	} {
		if got := retryable(tc.ctxErr, tc.status, tc.code, tc.cause); got != tc.want {
			t.Errorf("%s: retryable = %v, want %v", tc.name, got, tc.want)
		}
		if tc.status == 0 && tc.ctxErr == nil {
			if got := IsRetryable(tc.cause); got != tc.want {
				t.Errorf("%s: IsRetryable = %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// Errors that carry a classification keep it through wrapping.
func TestIsRetryableMarked(t *testing.T) {
	e := &s3Error{op: "put", where: "s3://b/k", err: errors.New("x"), retryable: true}
	if !IsRetryable(fmt.Errorf("flush: %w", e)) {
		t.Fatal("wrapped retryable s3 error")
	}
	e = &s3Error{op: "put", where: "s3://b/k", err: io.ErrUnexpectedEOF, kind: ErrPreconditionFailed}
	if IsRetryable(e) || !errors.Is(e, ErrPreconditionFailed) || !errors.Is(e, io.ErrUnexpectedEOF) {
		t.Fatal("marked error lost its classification or causes")
	}
}

// A DeleteMany error names the first few keys left behind, matches every
// cause, and is retryable only when every failure is.
func TestDeleteError(t *testing.T) {
	var failed []error
	for i := 1; i <= 5; i++ {
		failed = append(failed, &s3Error{op: "delete", where: fmt.Sprintf("s3://b/k%d", i), err: errors.New("boom"), retryable: true})
	}
	e := &deleteError{where: "s3://b", total: 2500, failed: failed, skipped: 1000}
	want := "delete from s3://b: 1005 of 2500 keys not deleted; s3 delete s3://b/k1: boom; s3 delete s3://b/k2: boom; s3 delete s3://b/k3: boom; and 2 more failed; 1000 not attempted"
	if e.Error() != want {
		t.Fatalf("message:\n%s\nwant\n%s", e.Error(), want)
	}
	if !IsRetryable(fmt.Errorf("gc: %w", e)) {
		t.Fatal("all failures retryable, the error is not")
	}
	e.failed = append(e.failed, &s3Error{op: "delete", where: "s3://b/k6", kind: ErrBucketNotFound, err: errors.New("gone")})
	if IsRetryable(e) || !errors.Is(e, ErrBucketNotFound) {
		t.Fatal("a final failure among retryable ones: retryable, or its kind lost")
	}
	e = &deleteError{where: "file:///x", total: 3, skipped: 3, stopped: context.Canceled}
	if IsRetryable(e) || !errors.Is(e, context.Canceled) || !strings.HasSuffix(e.Error(), "3 not attempted (context canceled)") {
		t.Fatalf("canceled DeleteMany: %v", e)
	}
	if (&deleteError{total: 3}).result() != nil {
		t.Fatal("a DeleteMany that left nothing behind failed")
	}
}
