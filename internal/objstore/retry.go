package objstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
)

// IsRetryable reports whether the operation that failed with err may
// succeed if repeated unchanged: the store was unreachable, overloaded, or
// failed internally. Answers the store itself has given (not found,
// precondition failed, access denied, invalid key, any other 4xx) and the
// end of the caller's context are not retryable.
//
// A retryable error from a conditional Put (IfNoneMatch or IfMatch) means
// the outcome is unknown: the request may have been applied before the
// connection broke. Repeating it can then fail with ErrPreconditionFailed
// against the caller's own write. Stores never repeat conditional puts
// themselves for this reason; the caller decides (e.g. Stat the key and
// compare what it finds with what it wrote).
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var r interface{ Retryable() bool }
	if errors.As(err, &r) {
		return r.Retryable()
	}
	return retryableCause(err)
}

// retryable is the retry policy for one failed store request, as a pure
// function of what is known about the failure:
//
//   - ctxErr: the caller's context had ended (canceled or past its
//     deadline). Repeating with the same context cannot succeed, and the
//     caller asked to stop; never retryable.
//   - status, code: the HTTP status and S3 error code of the server's
//     answer (0, "" when there was none). See retryableResponse.
//   - cause: the underlying error, for failures without an answer
//     (connection refused or reset, timeouts, DNS). See retryableCause.
func retryable(ctxErr error, status int, code string, cause error) bool {
	if ctxErr != nil {
		return false
	}
	if status != 0 {
		return retryableResponse(status, code)
	}
	return retryableCause(cause)
}

// retryableResponse classifies an S3 error response. Throttling (429, 503
// SlowDown), request timeouts and server errors are transient; every other
// answer, 4xx included (403 AccessDenied, 404 NoSuchKey, 412
// PreconditionFailed), is final: repeating the request gets the same
// answer, except 409 ConditionalRequestConflict. 501 Not Implemented and
// 505 are final too. A refusal of the request's credentials is final here
// as well; the S3 store itself repeats such a request once when reading
// its credentials again gives new ones (authRetry, S3Store.withCreds).
func retryableResponse(status int, code string) bool {
	switch code {
	case "SlowDown", "SlowDownRead", "SlowDownWrite", "RequestTimeout",
		"Throttling", "ThrottlingException", "RequestLimitExceeded",
		"RequestThrottled", "TooManyRequests", "InternalError",
		"ServiceUnavailable", "XMinioServerNotInitialized",
		// AWS: a concurrent conditional request on the same key won; this
		// one was not applied and may be repeated.
		"ConditionalRequestConflict":
		return true
	}
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return true
	case status == http.StatusNotImplemented, status == http.StatusHTTPVersionNotSupported:
		return false
	case status >= 500 && status <= 599:
		return true
	}
	return false
}

// retryableCause classifies an error that came without a server answer.
func retryableCause(err error) bool {
	var dnsErr *net.DNSError
	var urlErr *url.Error
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrPreconditionFailed), errors.Is(err, ErrInvalidKey):
		return false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false // the caller's context ended
	case isTLSConfigError(err):
		return false // a wrong certificate or scheme does not fix itself
	case errors.As(err, &dnsErr):
		// A name that does not exist is a configuration error; a DNS
		// server that timed out or failed is not.
		return !dnsErr.IsNotFound || dnsErr.IsTemporary || dnsErr.IsTimeout
	case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.EAGAIN),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ENETDOWN):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF):
		return true // a connection closed mid-response
	case errors.As(err, &netErr) && netErr.Timeout():
		return true
	case errors.As(err, &opErr):
		return true // any other failure to reach the server
	case errors.As(err, &urlErr):
		return true // the HTTP transport failed (e.g. the server closed the connection)
	}
	// Local I/O errors (EIO, ENOSPC, EROFS, ...) and everything else.
	return false
}

// isTLSConfigError reports certificate and protocol mismatches.
func isTLSConfigError(err error) bool {
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verify) || errors.As(err, &header) ||
		errors.Is(err, http.ErrSchemeMismatch)
}
