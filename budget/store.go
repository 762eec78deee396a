package budget

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Key names one shard of one window of a fleet-wide budget in a Store.
type Key struct {
	// Name is the budget's name (one per partner, typically). Stores
	// reject names that NewGlobal would (1 to 128 bytes of letters,
	// digits, '-', '_', '.' and ':').
	Name string
	// Shard is in [0, shards). One budget may be spread over several items
	// so that no single item takes more writes than the store allows.
	Shard int
	// Window is the start of the fixed window the allowance belongs to.
	// Allowance never carries over from one window to the next.
	Window time.Time
}

// String returns a readable form such as "payments/2/1700000000000".
func (k Key) String() string {
	return fmt.Sprintf("%s/%d/%d", k.Name, k.Shard, k.Window.UnixMilli())
}

// Update is one atomic change to the allowance of a window shard.
//
// Let old be the stored allowance, or Floor if the item does not exist yet.
// The store sets the allowance to old + Deposit - Take if and only if that
// is not negative; otherwise it changes nothing and refuses. Deposit and
// Take are never negative.
type Update struct {
	// Floor is the allowance a window shard starts with: the share of the
	// fleet-wide minimum number of retries per window that this shard holds.
	Floor int64
	// Deposit is allowance earned by requests reported with this update.
	Deposit int64
	// Take is allowance withdrawn for retries (a lease of Take retries).
	Take int64
	// Expires is when the store may delete the item (TTL). It is past the
	// window's end.
	Expires time.Time
}

// Store holds the allowance of fleet-wide budgets. It is the whole contract
// a backend implements for Global: one conditional, atomic read-modify-write
// per call. Implementations are safe for concurrent use, honour ctx, and
// never hold a lock across network I/O.
type Store interface {
	// Apply performs u on the item for k and returns the allowance after
	// the update. When the update would make the allowance negative it
	// changes nothing and returns the allowance as it stands together with
	// an error satisfying errors.Is(err, ErrInsufficient). Any other error
	// means the store could not be reached or returned something malformed;
	// the caller then does not know whether the update was applied.
	Apply(ctx context.Context, k Key, u Update) (allowance int64, err error)
}

// ErrInsufficient is returned by Store.Apply when a window shard holds less
// allowance than an update takes.
var ErrInsufficient = errors.New("herdguard: insufficient allowance")

// ErrThrottled is matched by the errors of stores that refused a request
// for lack of capacity: DynamoDB's ProvisionedThroughputExceededException,
// ThrottlingException and RequestLimitExceeded in package dynamo, and the
// in-memory stores when they model DynamoDB's throughput limits. A throttled
// request changed nothing (an operation made of several requests may have
// applied those before it). Budget and breaker stores both use it; a
// breaker store's error also satisfies errors.Is(err, breaker.ErrStore).
var ErrThrottled = errors.New("herdguard: the store refused the request for lack of capacity")
