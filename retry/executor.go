package retry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/ratio"
)

// Config configures an Executor. The zero value of every field means its
// default; New validates the rest and names the field it rejects. Hooks
// (On*) run synchronously on the calling goroutine and must not block.
type Config struct {
	// MaxAttempts is the number of attempts of one call, the first one
	// included (default 3; 1 disables retries).
	MaxAttempts int

	// TransientBase is the backoff base after a transient failure (default
	// 50 ms), ThrottlingBase after throttling (default 1 s), as in the AWS
	// SDKs' 2026 retry behaviour. The wait before retry n (from 0) is full
	// jitter: random × min(MaxDelay, base × 2^n). A base set above MaxDelay
	// is an error; a defaulted base above MaxDelay is lowered to MaxDelay.
	TransientBase  time.Duration
	ThrottlingBase time.Duration
	// MaxDelay caps the jitter part of one wait (default 20 s; a server's
	// Retry-After comes on top, bounded by MaxRetryAfter and the deadline).
	MaxDelay time.Duration

	// AttemptTimeout, if positive, bounds each attempt with
	// context.WithTimeout (real time, not Clock). An attempt that runs out
	// of it is a timeout: retried only when the call is idempotent, and a
	// failure for the breaker. Note that context.WithTimeout allocates, so
	// the healthy path is allocation-free only without it. Default 0: the
	// attempts share the caller's context.
	AttemptTimeout time.Duration

	// DeadlineMargin is kept free before the context's deadline: when
	// now + wait would reach deadline - DeadlineMargin the executor gives
	// up at once with the partner's error (Reason DeadlineTooClose) instead
	// of sleeping into a deadline it cannot meet, so that the caller still
	// has time to answer (a Lambda handler its 503). Default 100 ms; use a
	// tiny positive value for "no margin".
	DeadlineMargin time.Duration

	// MaxRetryAfter is the longest Retry-After honoured (default 1 min).
	// Retry-After is a lower bound (wait = hint +
	// jitter, never less than the partner asked), so a longer hint is not
	// shortened: the executor gives up at once with the partner's error
	// (Reason RetryAfterTooLong). Together with the deadline check this
	// keeps a hostile Retry-After from parking a call, with or without a
	// deadline.
	MaxRetryAfter time.Duration

	// Idempotent says whether Do's calls may be repeated after they may
	// have reached the partner: a timeout, a reset connection, a 408, 500,
	// 502, 504, a 503 without Retry-After, or an error the classification
	// does not recognise. Failures before the request
	// left, 429, and 503 with Retry-After are retried either way (the
	// partner refused the work). DoIdempotent and the generic DoIdempotent
	// choose per call.
	Idempotent bool

	// Budgets are asked, in order, before every retry; all must grant.
	// Nil (the default) is a local ratio budget of the Executor's own:
	// retries at most 10% of its requests over a sliding 10 s window, and
	// at least 3 per window (local.Ratio with its defaults). A non-nil
	// empty slice is no budget at all: retries are then bounded by
	// MaxAttempts only, which multiplies the load on a failing partner.
	//
	// Put the in-memory local budget first and the fleet-wide one after
	// it, so that a local refusal costs no store call. A layer that cannot
	// reach its store is reported to OnStoreError and abstains or refuses,
	// as it chooses (budget.Global refuses unless configured with
	// FailOpen).
	Budgets []budget.Budget

	// Breaker, if not nil, gates every attempt (the first and each retry)
	// and is told every attempt's outcome. Its state changes are reported
	// through breaker.Settings.OnStateChange, set where the breaker is made.
	Breaker *breaker.Breaker

	// Classifiers run, in order, before the built-in classification (see
	// the package documentation); the first answer other than NoOpinion
	// wins; an error no classifier recognises is a failure, retried only
	// when the call is idempotent. Return NoRetryExcluded for errors that
	// are not the partner's fault, so the breaker does not count them, or
	// add RetryEveryError to retry every error.
	Classifiers []Classifier

	// Clock is the source of time and sleep; nil is the system clock
	// (time.Now, read at every call, and a timer). Tests of code that uses
	// an Executor can run it in a testing/synctest bubble instead of
	// injecting a clock.
	Clock Clock
	// Rand returns numbers in [0, 1) for the jitter (default
	// math/rand/v2.Float64). It is called concurrently.
	Rand func() float64

	// OnRetry is called before every backoff wait, after the budgets
	// granted the retry.
	OnRetry func(RetryEvent)
	// OnGiveUp is called whenever a call ends with an error, with the
	// error about to be returned: the partner's last error, a budget's
	// refusal (Reason BudgetExhausted), the breaker's (BreakerOpen), the
	// context's end (ContextDone).
	OnGiveUp func(*GiveUpError)
	// OnStoreError is called when budget layer Budgets[layer] could not
	// reach its store (it then abstained, or refused if it fails closed).
	OnStoreError func(layer int, err error)
	// Logger, if not nil, logs budget exhaustion and store errors at Warn,
	// give-ups after retrying at Info, and other give-ups at Debug.
	Logger *slog.Logger
}

// RetryEvent describes a retry about to happen.
type RetryEvent struct {
	// Attempt is the attempt that failed (1 for the first); the next one
	// is Attempt+1.
	Attempt int
	// Delay is the wait before the next attempt: RetryAfter + jitter.
	Delay time.Duration
	// RetryAfter is the partner's hint included in Delay, or zero.
	RetryAfter time.Duration
	// Err is the failed attempt's error.
	Err error
	// Kind is the kind the retry was charged as.
	Kind budget.Kind
}

// configError is a Config field New rejected.
func configError(field, reason string) error {
	return &herdguard.ConfigError{Field: "retry.Config." + field, Reason: reason}
}

// Executor runs calls with retries behind a breaker and retry budgets. It
// is immutable after New and safe for concurrent use; keep one per partner
// for the lifetime of the process (in Lambda, at package level).
type Executor struct {
	maxAttempts    int
	transientBase  time.Duration
	throttlingBase time.Duration
	maxDelay       time.Duration
	attemptTimeout time.Duration
	margin         time.Duration
	maxRetryAfter  time.Duration
	idempotent     bool

	budgets     []budget.Budget
	breaker     *breaker.Breaker
	classifiers []Classifier
	clock       Clock
	sys         bool // clock is the system clock: time an attempt with the monotonic clock
	rand        func() float64

	onRetry      func(RetryEvent)
	onGiveUp     func(*GiveUpError)
	onStoreError func(int, error)
	logger       *slog.Logger
	storeErr     func(int, error) // nil when nobody listens
}

// New validates cfg, fills in the defaults and returns an Executor.
func New(cfg Config) (*Executor, error) {
	if err := validateDurations(&cfg); err != nil {
		return nil, err
	}
	e := &Executor{
		maxAttempts:    cfg.MaxAttempts,
		transientBase:  cfg.TransientBase,
		throttlingBase: cfg.ThrottlingBase,
		maxDelay:       cfg.MaxDelay,
		attemptTimeout: cfg.AttemptTimeout,
		margin:         cfg.DeadlineMargin,
		maxRetryAfter:  cfg.MaxRetryAfter,
		idempotent:     cfg.Idempotent,
		breaker:        cfg.Breaker,
		clock:          cfg.Clock,
		rand:           cfg.Rand,
		onRetry:        cfg.OnRetry,
		onGiveUp:       cfg.OnGiveUp,
		onStoreError:   cfg.OnStoreError,
		logger:         cfg.Logger,
	}
	switch {
	case cfg.MaxAttempts < 0:
		return nil, configError("MaxAttempts", fmt.Sprintf("is %d; want at least 1 (0 means %d)", cfg.MaxAttempts, defaultMaxAttempts))
	case cfg.MaxAttempts == 0:
		e.maxAttempts = defaultMaxAttempts
	}
	for i, b := range cfg.Budgets {
		if b == nil {
			return nil, configError(fmt.Sprintf("Budgets[%d]", i), "is nil")
		}
	}
	if cfg.Budgets == nil {
		r, err := ratio.New(ratio.Config{})
		if err != nil {
			return nil, err // cannot happen: the defaults are valid
		}
		e.budgets = []budget.Budget{r}
	} else {
		e.budgets = append([]budget.Budget(nil), cfg.Budgets...)
	}
	for i, c := range cfg.Classifiers {
		if c == nil {
			return nil, configError(fmt.Sprintf("Classifiers[%d]", i), "is nil")
		}
	}
	e.classifiers = append([]Classifier(nil), cfg.Classifiers...)
	if e.clock == nil {
		e.clock = systemClock{}
	}
	if _, ok := e.clock.(systemClock); ok {
		e.sys = true
	}
	if e.rand == nil {
		e.rand = rand.Float64
	}
	if e.onStoreError != nil || e.logger != nil {
		e.storeErr = e.reportStoreError
	}
	return e, nil
}

// validateDurations checks the durations of cfg and fills in their
// defaults in place.
func validateDurations(cfg *Config) error {
	for _, f := range [...]struct {
		name string
		d    time.Duration
	}{
		{"TransientBase", cfg.TransientBase},
		{"ThrottlingBase", cfg.ThrottlingBase},
		{"MaxDelay", cfg.MaxDelay},
		{"AttemptTimeout", cfg.AttemptTimeout},
		{"DeadlineMargin", cfg.DeadlineMargin},
		{"MaxRetryAfter", cfg.MaxRetryAfter},
	} {
		if f.d < 0 {
			return configError(f.name, fmt.Sprintf("is negative (%s)", f.d))
		}
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = defaultMaxDelay
	}
	for _, b := range [...]struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"TransientBase", &cfg.TransientBase, defaultTransientBase},
		{"ThrottlingBase", &cfg.ThrottlingBase, defaultThrottlingBase},
	} {
		switch {
		case *b.d == 0:
			*b.d = min(b.def, cfg.MaxDelay)
		case *b.d > cfg.MaxDelay:
			return configError(b.name, fmt.Sprintf("(%s) is above MaxDelay (%s)", *b.d, cfg.MaxDelay))
		}
	}
	if cfg.DeadlineMargin == 0 {
		cfg.DeadlineMargin = defaultDeadlineMargin
	}
	if cfg.MaxRetryAfter == 0 {
		cfg.MaxRetryAfter = defaultMaxRetryAfter
	}
	return nil
}

// MaxAttempts returns the configured number of attempts per call.
func (e *Executor) MaxAttempts() int { return e.maxAttempts }

// Do calls op until it succeeds or the executor gives up, and returns nil
// or a *GiveUpError saying why it gave up: its Reason, the attempts made,
// the partner's last error (errors.Is and errors.As reach it) and, when
// something else stopped the call, the Cause: a budget's
// *budget.ExhaustedError (errors.Is(err, budget.ErrExhausted)), the
// breaker's *breaker.OpenError (errors.Is(err, breaker.ErrOpen)), for the
// first attempt too, or ctx.Err() (errors.Is(err, context.Canceled)).
//
// RetryAfter extracts the hint a handler passes on. op receives the attempt
// number, from 1, and a context bounded by AttemptTimeout if set. Whether
// the call counts as idempotent comes from Config.Idempotent.
//
// On the healthy path (breaker closed, in-memory budgets, first attempt
// succeeds, no AttemptTimeout) Do does not allocate and reads the clock
// twice (with the system clock, time.Now when the call starts and the monotonic
// clock when its attempt ends).
func (e *Executor) Do(ctx context.Context, op func(ctx context.Context, attempt int) error) error {
	return e.loop(ctx, call{idempotent: e.idempotent}, op)
}

// DoIdempotent is Do with the call's idempotency given explicitly instead
// of taken from Config.Idempotent.
func (e *Executor) DoIdempotent(ctx context.Context, idempotent bool, op func(ctx context.Context, attempt int) error) error {
	return e.loop(ctx, call{idempotent: idempotent}, op)
}

// Do is Executor.Do for an operation that returns a value: it returns the
// value of the successful attempt, or T's zero value and the error.
func Do[T any](ctx context.Context, e *Executor, op func(ctx context.Context, attempt int) (T, error)) (T, error) {
	return run(ctx, e, call{idempotent: e.idempotent}, op)
}

// DoIdempotent is Do with the call's idempotency given explicitly.
func DoIdempotent[T any](ctx context.Context, e *Executor, idempotent bool, op func(ctx context.Context, attempt int) (T, error)) (T, error) {
	return run(ctx, e, call{idempotent: idempotent}, op)
}

// Flush reports what the budgets and the breaker keep in memory for the
// fleet (budget.Global's unreported requests, the breaker's sampled
// counts), at the time the Executor's Clock reads, and joins their errors.
// It writes nothing while the fleet is healthy. A Lambda handler calls it
// before returning, since the execution environment may be frozen
// afterwards.
func (e *Executor) Flush(ctx context.Context) error {
	now := e.now()
	var errs []error
	for _, b := range e.budgets {
		if f, ok := b.(flusher); ok {
			if err := f.Flush(ctx, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if e.breaker != nil {
		if err := e.breaker.Flush(ctx, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// flusher is a budget that keeps counts in memory and reports them to a
// store in batches, as budget.Global does.
type flusher interface {
	Flush(ctx context.Context, now time.Time) error
}

// call holds the per-call settings of run.
type call struct {
	// idempotent is passed to the classifiers.
	idempotent bool
	// maxAttempts, if positive and lower, replaces the executor's.
	maxAttempts int
	// ownTimeout: op applies AttemptTimeout itself (Transport, whose
	// response body outlives the attempt).
	ownTimeout bool
	// beforeWait runs after a retry was granted, before the backoff wait.
	beforeWait func()
}

// run is loop for an operation that returns a value: it returns the value
// of the successful attempt, or T's zero value and the error.
func run[T any](ctx context.Context, e *Executor, c call, op func(context.Context, int) (T, error)) (T, error) {
	var v T
	err := e.loop(ctx, c, func(ctx context.Context, attempt int) (err error) {
		v, err = op(ctx, attempt)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// loop is the retry loop, shared by every entry point: breaker gate →
// attempt → classification → breaker outcome (decided by the verdict) →
// attempts left? → delay and deadline check → open breaker? → budgets →
// wait → breaker gate → next attempt. A retry an open breaker rejects is
// never charged to the budgets; one the gate rejects after the wait (the
// breaker opened meanwhile, or adaptive throttling refuses retries) hands
// its grant back (RetryNotUsed).
// It is not generic, so that Executor.Do calls op directly; run wraps it
// for values.
func (e *Executor) loop(ctx context.Context, c call, op func(context.Context, int) error) error {
	if err := ctx.Err(); err != nil {
		return e.giveUp(ctx, 0, ContextDone, nil, err)
	}
	maxAttempts := e.maxAttempts
	if c.maxAttempts > 0 && c.maxAttempts < maxAttempts {
		maxAttempts = c.maxAttempts
	}

	var (
		now      = e.now()
		permit   breaker.Permit
		release  budget.Release // grant of the retry in progress, if any
		cancel   context.CancelFunc
		inFlight bool // op is running: if it panics, settle permit and grant
	)
	defer func() {
		if inFlight { // op panicked; account for it and let the panic go on
			if cancel != nil {
				cancel()
			}
			if e.breaker != nil {
				e.breaker.Done(ctx, e.clock.Now(), permit, breaker.Failure)
			}
			release.Done(budget.RetryFailed)
		}
	}()

	for attempt := 1; ; attempt++ {
		if attempt == 1 {
			if e.breaker != nil {
				var err error
				if permit, err = e.breaker.Allow(ctx, now); err != nil {
					return e.rejected(ctx, 0, nil, err)
				}
			}
			for _, b := range e.budgets {
				b.RecordRequest(now)
			}
		}

		actx := ctx
		if e.attemptTimeout > 0 && !c.ownTimeout {
			actx, cancel = context.WithTimeout(ctx, e.attemptTimeout)
		}
		inFlight = true
		err := op(actx, attempt)
		inFlight = false
		timedOut := false
		if cancel != nil {
			timedOut = err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded)
			cancel()
			cancel = nil
		}
		now = e.attemptEnd(now)

		if err == nil {
			if e.breaker != nil {
				e.breaker.Done(ctx, now, permit, breaker.Success)
			}
			if attempt == 1 {
				for _, b := range e.budgets {
					b.RecordSuccess(now)
				}
			} else {
				release.Done(budget.RetrySucceeded)
			}
			return nil
		}

		verdict := e.classify(ctx, c, err, timedOut)
		if e.breaker != nil {
			e.breaker.Done(ctx, now, permit, verdict.outcome())
		}
		release.Done(budget.RetryFailed)
		release = nil

		if !verdict.retryable() {
			return e.giveUp(ctx, attempt, NotRetryable, err, nil)
		}
		if attempt >= maxAttempts {
			return e.giveUp(ctx, attempt, AttemptsExhausted, err, nil)
		}
		kind := verdict.kind()
		hint := partnerHint(err)
		deadline, hasDeadline := ctx.Deadline()
		delay, reason, ok := e.plan(now, deadline, hasDeadline, attempt-1, kind, hint, e.rand())
		if !ok {
			return e.giveUp(ctx, attempt, reason, err, nil)
		}
		// The breaker is asked with AllowRetry for a retry: retries are
		// not sampled for the fleet's counts.
		if oerr := e.openGate(ctx, now); oerr != nil {
			return e.rejected(ctx, attempt, err, oerr)
		}
		rel, gerr := e.grant(ctx, now, RetryEvent{Attempt: attempt, Delay: delay, RetryAfter: hint, Err: err, Kind: kind})
		if gerr != nil {
			return gerr
		}
		release = rel
		if c.beforeWait != nil {
			c.beforeWait()
		}
		if serr := e.clock.Sleep(ctx, delay); serr != nil {
			release.Done(budget.RetryNotUsed)
			return e.giveUp(ctx, attempt, ContextDone, err, serr)
		}
		now = e.now()
		if e.breaker != nil {
			var oerr error
			if permit, oerr = e.breaker.AllowRetry(ctx, now); oerr != nil {
				// The breaker opened (or throttles) during the wait.
				release.Done(budget.RetryNotUsed)
				return e.rejected(ctx, attempt, err, oerr)
			}
		}
	}
}

// openGate keeps a retry an open breaker would reject from being charged to
// the budgets: when the breaker reads Open at now, it asks AllowRetry for
// the rejection (and hands back the permit should the breaker admit after
// all, a state change in between). The permit the retry runs under is
// taken after the wait, so that its slow-call clock, its probe lease and
// its generation start when the attempt does.
func (e *Executor) openGate(ctx context.Context, now time.Time) error {
	if e.breaker == nil || e.breaker.State(now) != breaker.Open {
		return nil
	}
	p, err := e.breaker.AllowRetry(ctx, now)
	if err != nil {
		return err
	}
	e.excluded(ctx, now, p)
	return nil
}

// excluded hands back a breaker permit whose attempt will not run.
func (e *Executor) excluded(ctx context.Context, now time.Time, p breaker.Permit) {
	if e.breaker != nil {
		e.breaker.Done(ctx, now, p, breaker.Excluded)
	}
}

// now reads the clock.
func (e *Executor) now() time.Time {
	if e.sys {
		return time.Now()
	}
	return e.clock.Now()
}

// attemptEnd returns the time an attempt that started at start ended. With
// the system clock it is start plus the monotonic time elapsed (start was
// read just before the attempt, so the freeze of a Lambda environment
// cannot fall in between), one monotonic clock read, and an attempt's
// duration ignores wall-clock steps during it.
func (e *Executor) attemptEnd(start time.Time) time.Time {
	if e.sys {
		return start.Add(time.Since(start))
	}
	return e.clock.Now()
}

// classify runs the classification chain over the error of one attempt.
func (e *Executor) classify(ctx context.Context, c call, err error, timedOut bool) Verdict {
	v := NoOpinion
	for _, cl := range e.classifiers {
		if v = cl(err, c.idempotent); v != NoOpinion {
			break
		}
	}
	if v == NoOpinion && timedOut {
		// The attempt ran out of AttemptTimeout, whatever op returned.
		v = NoRetryFailure
		if c.idempotent {
			v = RetryTransient
		}
	}
	if v == NoOpinion {
		for _, cl := range defaultClassifiers {
			if v = cl(err, c.idempotent); v != NoOpinion {
				break
			}
		}
	}
	if v > NoRetryExcluded { // not a Verdict: a classifier's bug
		v = NoOpinion
	}
	if v == NoOpinion { // nobody recognised it: a failure of the partner
		v = classifyUnknown(err, c.idempotent)
	}
	if !v.retryable() {
		return v
	}
	if cerr := ctx.Err(); cerr != nil {
		// The caller's context ended: no retry can run. A cancellation
		// says nothing about the partner; a deadline means it did not
		// answer in the time the caller had.
		if errors.Is(cerr, context.Canceled) {
			return NoRetryExcluded
		}
		return NoRetryFailure
	}
	return v
}

// plan computes the wait before retry number retry (0 for the first) after
// a failure of the given kind with the partner's hint, and checks it against
// MaxRetryAfter and the deadline. ok is false, with the reason, when the
// executor must give up instead. The wait is never negative, and when ok,
// now + wait + DeadlineMargin is before the deadline.
func (e *Executor) plan(now, deadline time.Time, hasDeadline bool, retry int, kind budget.Kind, hint time.Duration, random float64) (wait time.Duration, reason Reason, ok bool) {
	if hint < 0 {
		hint = 0
	}
	base := e.transientBase
	if kind == budget.Throttling {
		base = e.throttlingBase
	}
	wait = addSat(hint, fullJitter(retry, base, e.maxDelay, random))
	if reason, ok = e.fits(now, deadline, hasDeadline, hint, wait); !ok {
		return 0, reason, false
	}
	return wait, 0, true
}

// addSat and subSat add and subtract durations, saturating instead of
// overflowing.
func addSat(a, b time.Duration) time.Duration {
	if s := a + b; (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return time.Duration(1<<63 - 1)
		}
		return time.Duration(-1 << 63)
	}
	return a + b
}

func subSat(a, b time.Duration) time.Duration {
	if b == -1<<63 {
		if a >= 0 {
			return time.Duration(1<<63 - 1)
		}
		return a - b
	}
	return addSat(a, -b)
}

// rejected builds the error for a breaker rejection after attempts
// attempts.
func (e *Executor) rejected(ctx context.Context, attempts int, lastErr, openErr error) error {
	gu := &GiveUpError{Attempts: attempts, Reason: BreakerOpen, Err: lastErr, Cause: openErr, RetryAfter: partnerHint(lastErr)}
	var oe *breaker.OpenError
	if errors.As(openErr, &oe) && oe.RetryAfter > gu.RetryAfter {
		gu.RetryAfter = oe.RetryAfter
	}
	e.notifyGiveUp(ctx, gu)
	return gu
}

// giveUp builds the error for a give-up after attempts attempts, the last
// of which failed with partnerErr.
func (e *Executor) giveUp(ctx context.Context, attempts int, reason Reason, partnerErr, cause error) error {
	gu := &GiveUpError{Attempts: attempts, Reason: reason, Err: partnerErr, Cause: cause, RetryAfter: partnerHint(partnerErr)}
	e.notifyGiveUp(ctx, gu)
	return gu
}

// exhausted builds the error for a budget refusal: a *GiveUpError whose
// Cause is a copy of the layer's *budget.ExhaustedError (never the
// backend's own value, which it may share). When the layer could not tell
// when it will grant again, the copy's RetryAfter is the wait the executor
// would have made.
func (e *Executor) exhausted(ctx context.Context, attempts int, partnerErr, refusal error, wait time.Duration) error {
	ex := &budget.ExhaustedError{Cause: refusal}
	var layer *budget.ExhaustedError
	if errors.As(refusal, &layer) {
		*ex = *layer // Budget, RetryAfter, and the Cause of a layer that fails closed
	}
	if ex.RetryAfter <= 0 {
		ex.RetryAfter = wait
	}
	gu := &GiveUpError{Attempts: attempts, Reason: BudgetExhausted, Err: partnerErr, Cause: ex,
		RetryAfter: max(ex.RetryAfter, partnerHint(partnerErr))}
	if e.logger != nil {
		e.logger.LogAttrs(ctx, slog.LevelWarn, "herdguard: retry budget exhausted",
			slog.String("budget", ex.Budget), slog.Int("attempts", attempts),
			slog.Duration("retry_after", ex.RetryAfter), slog.Any("error", partnerErr))
	}
	e.notifyGiveUp(ctx, gu)
	return gu
}

func (e *Executor) notifyGiveUp(ctx context.Context, gu *GiveUpError) {
	if e.onGiveUp != nil {
		e.onGiveUp(gu)
	}
	if e.logger == nil || gu.Reason == BudgetExhausted { // logged at Warn already
		return
	}
	level := slog.LevelInfo
	switch {
	case gu.Reason == BreakerOpen, gu.Reason == ContextDone, gu.Attempts <= 1 && gu.Reason == NotRetryable:
		level = slog.LevelDebug
	}
	if e.logger.Enabled(ctx, level) {
		e.logger.LogAttrs(ctx, level, "herdguard: gave up",
			slog.String("reason", gu.Reason.String()), slog.Int("attempts", gu.Attempts), slog.String("error", gu.Error()))
	}
}

func (e *Executor) reportStoreError(layer int, err error) {
	if e.onStoreError != nil {
		e.onStoreError(layer, err)
	}
	if e.logger != nil {
		msg := "herdguard: retry budget store unavailable; layer abstained"
		if errors.Is(err, budget.ErrExhausted) { // a layer that fails closed
			msg = "herdguard: retry budget store unavailable; layer refused"
		}
		e.logger.LogAttrs(context.Background(), slog.LevelWarn, msg,
			slog.Int("layer", layer), slog.String("error", err.Error()))
	}
}
