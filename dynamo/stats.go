package dynamo

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
)

// Stats are a store's cumulative DynamoDB request counts and the capacity
// DynamoDB reported they consumed. Each count is of requests the store made
// (an SDK retry inside one request is not counted again). Every item the
// stores write is under 1 KB, so on an on-demand table a write costs one
// write request unit, refused or not, and an eventually consistent read of
// one item half a read request unit.
type Stats struct {
	// Reads counts read requests: GetItem, and BatchGetItem of a breaker's
	// two items (which costs as much as two GetItems but takes one round
	// trip).
	Reads int64
	// Writes counts write requests (UpdateItem), those refused by
	// their condition included: DynamoDB charges for them too.
	Writes int64
	// ConditionalFailures counts writes refused by their condition. Most are
	// domain answers (allowance too low, epoch moved, probe slot held).
	ConditionalFailures int64
	// Errors counts requests that failed otherwise: timeouts, throttling,
	// network faults, validation errors.
	Errors int64
	// Malformed counts answers that held an item the store could not
	// decode (see MalformedItemError).
	Malformed int64
	// Throttled counts requests DynamoDB refused for lack of capacity
	// (errors.Is(err, budget.ErrThrottled)), BatchGetItems that left keys
	// unprocessed included. They are counted in Errors too.
	Throttled int64
	// WriteUnits and ReadUnits add up the capacity units DynamoDB reported
	// the requests consumed: every request asks for them
	// (ReturnConsumedCapacity TOTAL). DynamoDB reports nothing for a
	// request that failed, nor for a write refused by its condition,
	// although such a write consumes write units as well (one per KB of
	// the item as it stands; see ConditionalFailures).
	WriteUnits, ReadUnits float64
}

// RequestInfo describes one DynamoDB request a store made, for
// StoreOptions.OnRequest.
type RequestInfo struct {
	// Operation is the DynamoDB operation, such as "UpdateItem".
	Operation string
	// Key is the partition key of the (first) item concerned.
	Key string
	// Duration is how long the request took, SDK retries included.
	Duration time.Duration
	// Err is the request's error, nil on success. A write refused by its
	// condition has a *types.ConditionalCheckFailedException here.
	Err error
}

// counters is the mutable side of Stats; safe for concurrent use.
type counters struct {
	reads, writes, conditionalFailures, errors, malformed, throttled atomic.Int64
	// writeHalves and readHalves count consumed units in halves (DynamoDB
	// reports multiples of 0.5).
	writeHalves, readHalves atomic.Int64
}

func (c *counters) stats() Stats {
	return Stats{
		Reads:               c.reads.Load(),
		Writes:              c.writes.Load(),
		ConditionalFailures: c.conditionalFailures.Load(),
		Errors:              c.errors.Load(),
		Malformed:           c.malformed.Load(),
		Throttled:           c.throttled.Load(),
		WriteUnits:          float64(c.writeHalves.Load()) / 2,
		ReadUnits:           float64(c.readHalves.Load()) / 2,
	}
}

// consumed adds the capacity DynamoDB reported for a request (nil: none).
func (c *counters) consumed(kind opKind, cc *types.ConsumedCapacity) {
	if cc == nil || cc.CapacityUnits == nil {
		return
	}
	halves := int64(math.Round(*cc.CapacityUnits * 2))
	if kind == opRead {
		c.readHalves.Add(halves)
	} else {
		c.writeHalves.Add(halves)
	}
}

// opKind says which counter a request increments.
type opKind uint8

const (
	opRead opKind = iota
	opWrite
)

// instrument counts one request and reports it to the hook. It returns a
// function to call with the request's error when it completes.
func (c *counters) instrument(hook func(RequestInfo), kind opKind, op, key string) func(error) {
	if kind == opRead {
		c.reads.Add(1)
	} else {
		c.writes.Add(1)
	}
	var start time.Time
	if hook != nil {
		start = time.Now()
	}
	return func(err error) {
		if err != nil {
			var ccf *types.ConditionalCheckFailedException
			if errors.As(err, &ccf) {
				c.conditionalFailures.Add(1)
			} else {
				c.errors.Add(1)
				if errors.Is(err, budget.ErrThrottled) {
					c.throttled.Add(1)
				}
			}
		}
		if hook != nil {
			hook(RequestInfo{Operation: op, Key: key, Duration: time.Since(start), Err: err})
		}
	}
}

// countMalformed counts err if it is a *MalformedItemError, and returns it.
func (c *counters) countMalformed(err error) error {
	var m *MalformedItemError
	if errors.As(err, &m) {
		c.malformed.Add(1)
	}
	return err
}

// errNoOutput is the error of a request that returned neither an answer nor
// an error: the SDK never does, but a wrapper around it might, and the
// stores must not dereference a nil answer.
var errNoOutput = errors.New("herdguard: dynamo: the DynamoDB client returned neither an answer nor an error")

// answer passes a request's answer on, turning a nil answer without an
// error into errNoOutput.
func answer[T any](out *T, err error) (*T, error) {
	if err == nil && out == nil {
		return nil, errNoOutput
	}
	return out, err
}

// markThrottled makes an error by which DynamoDB refused a request for lack of
// capacity (ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded, recognised by their error codes) also satisfy
// errors.Is(err, budget.ErrThrottled). Other errors are returned as they
// are.
func markThrottled(err error) error {
	var ae smithy.APIError
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	switch ae.ErrorCode() {
	case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded":
		return fmt.Errorf("%w: %w: %w", budget.ErrThrottled, breaker.ErrThrottled, err)
	}
	return err
}
