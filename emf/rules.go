package emf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/herdguard/herdguard"
)

// Limits CloudWatch puts on the names and values of an EMF object (the EMF
// specification and PutMetricData's).
const (
	maxNamespaceLen  = 255
	maxDimNameLen    = 250
	maxDimValueLen   = 1024
	maxMetricNameLen = 255
	// maxDimensions is the number of dimensions a dimension set may hold.
	maxDimensions = 30
)

// ErrInvalid is matched (errors.Is) by every error New returns: a
// namespace, dimension, service or metadata entry CloudWatch would reject
// or the Recorder cannot write. The error is also a *herdguard.ConfigError
// (errors.As) whose Field names the option or environment variable and
// whose Reason says what is wrong.
var ErrInvalid = errors.New("herdguard: emf: invalid option")

// invalidError is a *herdguard.ConfigError that also matches ErrInvalid.
type invalidError struct{ ce *herdguard.ConfigError }

func (e *invalidError) Error() string   { return e.ce.Error() }
func (e *invalidError) Unwrap() []error { return []error{e.ce, ErrInvalid} }

func invalid(field, format string, args ...any) error {
	return &invalidError{&herdguard.ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}}
}

// checkNamespace returns what is wrong with a namespace ("" when nothing
// is): 1 to 255 characters among 0-9A-Za-z . - _ / # :, not starting
// with ':' and not in the AWS/ namespaces.
func checkNamespace(s string) string {
	if s == "" {
		return "is empty"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !namespaceByte(c) {
			return fmt.Sprintf("has %q at byte %d; want only 0-9, A-Z, a-z and . - _ / # :", c, i)
		}
	}
	switch {
	case len(s) > maxNamespaceLen:
		return fmt.Sprintf("has %d characters, more than %d", len(s), maxNamespaceLen)
	case s[0] == ':':
		return "starts with ':'"
	case strings.HasPrefix(s, "AWS/"):
		return "is in AWS/, which is reserved for AWS services"
	}
	return ""
}

func namespaceByte(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || strings.IndexByte("._/#:-", c) >= 0
}

// checkDimensionName returns what is wrong with a dimension name (or a
// metadata key): 1 to 250 printable ASCII characters, not only
// whitespace, not starting with ':'.
func checkDimensionName(s string) string {
	if msg := checkText(s, maxDimNameLen); msg != "" {
		return msg
	}
	if s[0] == ':' {
		return "starts with ':'"
	}
	return ""
}

// checkDimensionValue returns what is wrong with a dimension value: 1 to
// 1,024 printable ASCII characters (no control character), not only
// whitespace.
func checkDimensionValue(s string) string { return checkText(s, maxDimValueLen) }

// checkMetricName returns what is wrong with a metric name: 1 to 255
// printable ASCII characters, not only whitespace.
func checkMetricName(s string) string { return checkText(s, maxMetricNameLen) }

// checkText checks s for 1 to max printable ASCII characters (space to
// '~'), not all of them whitespace.
func checkText(s string, max int) string {
	if s == "" {
		return "is empty"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' {
			kind := "a control character"
			if c >= 0x80 {
				kind = "a non-ASCII byte"
			}
			return fmt.Sprintf("has %s (%q) at byte %d; want printable ASCII", kind, c, i)
		}
	}
	switch {
	case len(s) > max: // ASCII: one byte a character
		return fmt.Sprintf("has %d characters, more than %d", len(s), max)
	case strings.TrimSpace(s) == "":
		return "is only whitespace"
	}
	return ""
}

// quote is s quoted for an error message, cut to 40 bytes.
func quote(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", s[:40], len(s))
	}
	return fmt.Sprintf("%q", s)
}
