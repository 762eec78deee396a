package retry

// The built-in classification and the backoff, for the package's external
// tests.
var (
	ClassifyControl = classifyControl
	ClassifyStatus  = classifyStatus
	ClassifyNetwork = classifyNetwork
	FullJitter      = fullJitter
)

// SystemClock is the default Clock.
type SystemClock = systemClock

// Defaults of Config.
const (
	DefaultMaxAttempts    = defaultMaxAttempts
	DefaultTransientBase  = defaultTransientBase
	DefaultThrottlingBase = defaultThrottlingBase
	DefaultMaxDelay       = defaultMaxDelay
	DefaultDeadlineMargin = defaultDeadlineMargin
	DefaultMaxRetryAfter  = defaultMaxRetryAfter
	DefaultDrainLimit     = defaultDrainLimit
)

// Retryable reports whether v retries.
func (v Verdict) Retryable() bool { return v.retryable() }
