// Package attempt carries, from the retry loop to the breaker, whether an
// attempt is a retry: the breaker samples only first attempts for the
// fleet's counts, since a retry exists because an attempt failed and the
// environments that retry first are those that failed first (counting
// their retries would bias the estimate towards failures). Not public API.
package attempt

import "context"

type retryKey struct{}

// Retry returns ctx marked as the context of a retry.
func Retry(ctx context.Context) context.Context {
	return context.WithValue(ctx, retryKey{}, true)
}

// IsRetry reports whether ctx was marked by Retry.
func IsRetry(ctx context.Context) bool {
	v, _ := ctx.Value(retryKey{}).(bool)
	return v
}
