package dynamo

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// MalformedItemError reports an item in the table whose attributes do not
// have the types or values herdguard writes: a wrong type, a missing
// attribute, or an absurd value (a negative epoch, an unknown state, a
// number that does not fit). Someone edited the item by hand, or another
// program shares the table.
//
// The stores return it instead of guessing: the budget store as is (a
// Global then treats the store as unavailable), the breaker store wrapped
// together with breaker.ErrStore. Either way the caller falls back to its
// local layers. Deleting the item repairs it (see the package
// documentation).
type MalformedItemError struct {
	// Key is the item's partition key, such as "c#payments".
	Key string
	// Attribute names the offending attribute.
	Attribute string
	// Problem says what is wrong with it.
	Problem string
}

// Error names the item, the attribute and the problem.
func (e *MalformedItemError) Error() string {
	return fmt.Sprintf("herdguard: dynamo: malformed item %q: attribute %q %s", e.Key, e.Attribute, e.Problem)
}

// item wraps one item read from the table, for decoding. Every accessor
// returns a *MalformedItemError when the attribute is present with a wrong
// type or an out-of-range value; optional ones report absence separately.
type item struct {
	key   string
	attrs map[string]types.AttributeValue
}

func (it item) malformed(attr, format string, args ...any) error {
	return &MalformedItemError{Key: it.key, Attribute: attr, Problem: fmt.Sprintf(format, args...)}
}

// number returns the decimal text of a number attribute.
func (it item) number(attr string) (s string, ok bool, err error) {
	av, ok := it.attrs[attr]
	if !ok {
		return "", false, nil
	}
	n, isN := av.(*types.AttributeValueMemberN)
	if !isN {
		return "", true, it.malformed(attr, "is %s, want a number (N)", typeName(av))
	}
	return n.Value, true, nil
}

// int64In returns an integer attribute within [lo, hi].
func (it item) int64In(attr string, lo, hi int64) (v int64, ok bool, err error) {
	s, ok, err := it.number(attr)
	if !ok || err != nil {
		return 0, ok, err
	}
	v, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil {
		return 0, true, it.malformed(attr, "is %s, want an integer in [%d, %d]", quoteNumber(s), lo, hi)
	}
	if v < lo || v > hi {
		return 0, true, it.malformed(attr, "is %d, want an integer in [%d, %d]", v, lo, hi)
	}
	return v, true, nil
}

// requiredInt64In is int64In for an attribute that must be present.
func (it item) requiredInt64In(attr string, lo, hi int64) (int64, error) {
	v, ok, err := it.int64In(attr, lo, hi)
	if err == nil && !ok {
		err = it.malformed(attr, "is missing")
	}
	return v, err
}

// unixMilli returns a time stored as Unix milliseconds; absent is the zero
// time.
func (it item) unixMilli(attr string) (time.Time, error) {
	ms, ok, err := it.int64In(attr, 0, maxUnixMilli)
	if !ok || err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}

// str returns a string attribute.
func (it item) str(attr string) (s string, ok bool, err error) {
	av, ok := it.attrs[attr]
	if !ok {
		return "", false, nil
	}
	v, isS := av.(*types.AttributeValueMemberS)
	if !isS {
		return "", true, it.malformed(attr, "is %s, want a string (S)", typeName(av))
	}
	return v.Value, true, nil
}

// typeName returns DynamoDB's name for the type of av, such as "S" or "N".
func typeName(av types.AttributeValue) string {
	switch av.(type) {
	case *types.AttributeValueMemberS:
		return "a string (S)"
	case *types.AttributeValueMemberN:
		return "a number (N)"
	case *types.AttributeValueMemberB:
		return "a binary (B)"
	case *types.AttributeValueMemberBOOL:
		return "a boolean (BOOL)"
	case *types.AttributeValueMemberNULL:
		return "a null (NULL)"
	case *types.AttributeValueMemberSS:
		return "a string set (SS)"
	case *types.AttributeValueMemberNS:
		return "a number set (NS)"
	case *types.AttributeValueMemberBS:
		return "a binary set (BS)"
	case *types.AttributeValueMemberL:
		return "a list (L)"
	case *types.AttributeValueMemberM:
		return "a map (M)"
	case nil:
		return "nil"
	default:
		return fmt.Sprintf("an unknown type (%T)", av)
	}
}

// quoteNumber quotes a number's text for an error message, shortened so that
// a 38-digit value or garbage from a fake does not flood a log.
func quoteNumber(s string) string {
	const max = 48
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return strconv.Quote(s)
}
