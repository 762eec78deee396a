package breaker

import (
	"fmt"
	"math"
	"time"
)

// Defaults applied by New to the zero fields of Settings.
const (
	// DefaultFailureRatio is the failure ratio that trips a closed breaker.
	DefaultFailureRatio = 0.5
	// DefaultMinRequests is the minimum number of counted calls (successes
	// plus failures) in the window before the failure ratio can trip.
	DefaultMinRequests = 20
	// DefaultWindow is the length of the rolling window the ratio is
	// computed over (and of a fleet window in shared mode).
	DefaultWindow = 10 * time.Second
	// DefaultWindowSlots is the number of slots the rolling window is
	// divided into; the window rolls one slot at a time.
	DefaultWindowSlots = 10
	// DefaultOpenDuration is how long the breaker stays open after its
	// first trip.
	DefaultOpenDuration = 30 * time.Second
	// DefaultMaxOpenDuration caps the open duration as it doubles on
	// every re-open.
	DefaultMaxOpenDuration = 5 * time.Minute
	// DefaultJitter spreads every open duration uniformly over ±20%.
	DefaultJitter = 0.2
	// DefaultHalfOpenProbes is the number of probes a half-open breaker
	// lets through at the same time.
	DefaultHalfOpenProbes = 1
	// DefaultProbeLease is how long a probe holds its slot before the slot
	// is considered lost and given to another probe.
	DefaultProbeLease = 10 * time.Second
	// DefaultCacheTTL is how long a shared breaker trusts the fleet state
	// it last read from its Store.
	DefaultCacheTTL = time.Second
	// DefaultStoreTimeout bounds every Store call.
	DefaultStoreTimeout = 50 * time.Millisecond
	// DefaultReportInterval is the shortest time between two reports of
	// one environment's counts to the Store.
	DefaultReportInterval = time.Second
)

// NoJitter, as Settings.Jitter, turns jitter off: every open duration is
// exactly OpenDuration × 2^reopens (capped). Meant for tests; any negative
// value does the same.
const NoJitter = -1.0

// Limits on Settings.
const (
	// MaxWindowSlots bounds Settings.WindowSlots.
	MaxWindowSlots = 1000
	// MaxHalfOpenProbes bounds Settings.HalfOpenProbes. It is the number
	// of probe slots package dynamo's Store keeps per breaker
	// (dynamo.MaxProbeSlots, one item each, every one of them written by a
	// refused AcquireProbe): a larger limit would make every AcquireProbe
	// fail there.
	MaxHalfOpenProbes = 64
	// openGrowth is the factor the open duration grows by on every re-open.
	openGrowth = 2
)

// Settings configures a Breaker. The zero value of every field means its
// default (the Default* constants); negative durations and counts are
// errors. New validates Settings and names the offending field in its
// error, a *SettingsError.
type Settings struct {
	// FailureRatio trips a closed breaker when failures / (successes +
	// failures) in the rolling window reaches it, provided the window holds
	// at least MinRequests such calls. In (0, 1]; 0 means
	// DefaultFailureRatio.
	FailureRatio float64

	// MinRequests is the minimum throughput (successes + failures in the
	// window) below which the failure ratio never trips. 0 means
	// DefaultMinRequests.
	MinRequests int64

	// Window is the length of the rolling window (DefaultWindow if 0). It
	// rolls in WindowSlots steps (DefaultWindowSlots if 0, at most
	// MaxWindowSlots). Window must be at least a millisecond. With a Store,
	// Window is also the length of the fleet's rolling window, kept in the
	// Store as FleetSlots buckets aligned to the Unix epoch; it must then
	// be a whole multiple of FleetSlots milliseconds.
	Window      time.Duration
	WindowSlots int

	// ConsecutiveFailures, if positive, also trips a closed breaker after
	// that many failures in a row, whatever the ratio. 0 turns it off. It
	// is a local criterion: in shared mode it applies only while the
	// breaker runs on its local state machine (see Store faults in the
	// package documentation), since consecutiveness means nothing across
	// a fleet.
	ConsecutiveFailures int64

	// OpenDuration is how long the breaker stays open after a trip
	// (DefaultOpenDuration if 0). Each re-open (a failed half-open probe)
	// doubles it, up to MaxOpenDuration (DefaultMaxOpenDuration, or
	// OpenDuration if that is larger, when 0). The cap applies before
	// jitter, so an open period at the cap lies within ±Jitter of it.
	OpenDuration    time.Duration
	MaxOpenDuration time.Duration

	// Jitter spreads every open duration uniformly over ±Jitter of its
	// nominal value, so that a fleet does not probe in lockstep. 0 means
	// DefaultJitter; a negative value (NoJitter) turns jitter off; it must
	// be below 1.
	Jitter float64

	// Rand returns uniformly distributed numbers in [0, 1) for the jitter
	// and, in shared mode, for this environment's delay past the end of an
	// open period (in [0, CacheTTL), drawn once per fleet epoch: see the
	// package documentation) and for the draw that samples a call for the
	// fleet's counts (one in k: a Rand that returns a constant samples all
	// calls or none). nil means math/rand/v2's Float64. It is called with the breaker's
	// lock held, so it need not be safe for concurrent use unless several
	// breakers share it. Values outside [0, 1) are clamped.
	Rand func() float64

	// HalfOpenProbes is the number of calls a half-open breaker lets
	// through at the same time (DefaultHalfOpenProbes if 0, at most
	// MaxHalfOpenProbes). In shared mode the limit is fleet-wide, and the
	// probes are the calls of the environment that moved the fleet to
	// half-open. A successful probe closes the breaker; a failed one opens
	// it again with a doubled open duration.
	HalfOpenProbes int

	// ProbeLease is how long a probe holds its slot (DefaultProbeLease if
	// 0). A probe whose Done never comes, for instance because its
	// execution environment was frozen or discarded, frees its slot when
	// the lease lapses, so a lost probe cannot wedge the breaker.
	ProbeLease time.Duration

	// SlowCallThreshold, if positive, makes a successful call that took
	// longer than it (from Allow's now to Done's now) count as a failure.
	// 0 turns it off.
	SlowCallThreshold time.Duration

	// OnStateChange, if not nil, is called on every change of the state
	// State reports, whatever its cause (a trip, a probe's result, a fleet
	// state read from the Store, an override). StateChange.Origin tells a
	// fleet transition this environment wrote (one per transition,
	// fleet-wide) from one it merely followed. It is called without the
	// breaker's lock held, from the goroutine whose call caused the
	// change, and may call the breaker's methods.
	OnStateChange func(StateChange)

	// Adaptive replaces the hard stop by adaptive throttling, fleet-wide:
	// the breaker never trips to Open on the failure ratio (overrides still
	// apply). Where the hard stop would trip, the fleet starts admitting
	// only a share of its calls, 1.15 times the share the partner accepts
	// by the fleet's sampled counts (the Google SRE book's client-side
	// throttling), at least 2%, and retries none while it throttles; it
	// doubles the share, or admits every call, as soon as the admitted
	// calls succeed. Rejections are *OpenError values with Throttled set
	// (errors.Is(err, ErrOpen)). It needs a Store: see "Adaptive
	// throttling" in the package documentation.
	Adaptive bool

	// Store, if not nil, shares the breaker's state with every process
	// that names the same breaker in the same store. nil keeps the breaker
	// purely in memory. The fields below apply only with a Store.
	Store Store

	// CacheTTL is how long the fleet state read from the Store is trusted
	// while the fleet is counting failures, open or half-open
	// (DefaultCacheTTL if 0); while it is closed and quiet (no failure
	// anywhere for two Windows), ten times as long. A breaker calls
	// Store.Load at most once per such period, plus once when a failure
	// finds the fleet quiet, plus once before each move of the fleet it may
	// make while the fleet is open or half-open (typically once, when an
	// open period ends). Those moves are spread over CacheTTL across the
	// fleet.
	CacheTTL time.Duration

	// StoreTimeout bounds every Store call (DefaultStoreTimeout if 0). Each
	// call runs under context.WithTimeout(ctx, StoreTimeout), so it ends by
	// the caller's deadline too.
	StoreTimeout time.Duration

	// ReportInterval is the shortest time between two reports of this
	// environment's sampled counts (DefaultReportInterval if 0), Flush
	// included.
	ReportInterval time.Duration

	// OnStoreError, if not nil, is called (without the breaker's lock held)
	// with every Store fault, op being "load", "report", "transition" or
	// "acquire-probe". err satisfies errors.Is(err, ErrStore). The breaker
	// then runs on its local state machine until a Load succeeds again
	// (and, if it opened meanwhile and the fleet is closed, until its own
	// probe succeeds), except after a fault of the move to half-open or of
	// AcquireProbe while it knows the fleet is open: then it stays on the
	// fleet state, rejecting, and tries again later. See the package
	// documentation.
	OnStoreError func(op string, err error)
}

// SettingsError is a Settings field New rejected.
type SettingsError struct {
	// Field is the name of the Settings field, e.g. "FailureRatio".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error names the field and the reason.
func (e *SettingsError) Error() string {
	return "herdguard: breaker Settings." + e.Field + " " + e.Reason
}

func settingsErr(field, format string, args ...any) error {
	return &SettingsError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// resolve validates s and returns it with every default filled in.
func (s Settings) resolve() (Settings, error) {
	switch {
	case math.IsNaN(s.FailureRatio) || s.FailureRatio < 0 || s.FailureRatio > 1:
		return s, settingsErr("FailureRatio", "is %v; want a ratio in (0, 1] (0 for the default %v)", s.FailureRatio, DefaultFailureRatio)
	case s.FailureRatio == 0:
		s.FailureRatio = DefaultFailureRatio
	}

	switch {
	case s.MinRequests < 0:
		return s, settingsErr("MinRequests", "is %d; want at least 0 (0 for the default %d)", s.MinRequests, DefaultMinRequests)
	case s.MinRequests == 0:
		s.MinRequests = DefaultMinRequests
	}

	switch {
	case s.Window < 0:
		return s, settingsErr("Window", "is %v; want a positive duration (0 for the default %v)", s.Window, DefaultWindow)
	case s.Window == 0:
		s.Window = DefaultWindow
	case s.Window < time.Millisecond:
		return s, settingsErr("Window", "is %v; want at least 1ms", s.Window)
	}

	switch {
	case s.WindowSlots < 0 || s.WindowSlots > MaxWindowSlots:
		return s, settingsErr("WindowSlots", "is %d; want 1 to %d (0 for the default %d)", s.WindowSlots, MaxWindowSlots, DefaultWindowSlots)
	case s.WindowSlots == 0:
		s.WindowSlots = DefaultWindowSlots
	}
	if s.Store != nil {
		if s.Window%time.Millisecond != 0 {
			return s, settingsErr("Window", "is %v; with a Store it must be a whole number of milliseconds (fleet buckets are numbered in Unix milliseconds)", s.Window)
		}
		if s.Window.Milliseconds()%FleetSlots != 0 {
			return s, settingsErr("Window", "is %v; with a Store it must be a whole multiple of %d ms (the fleet's window is kept as %d buckets)", s.Window, FleetSlots, FleetSlots)
		}
	}

	if s.Adaptive && s.Store == nil {
		return s, settingsErr("Adaptive", "needs a Store: it throttles on the fleet's counts")
	}

	if s.ConsecutiveFailures < 0 {
		return s, settingsErr("ConsecutiveFailures", "is %d; want at least 0 (0 turns it off)", s.ConsecutiveFailures)
	}

	switch {
	case s.OpenDuration < 0:
		return s, settingsErr("OpenDuration", "is %v; want a positive duration (0 for the default %v)", s.OpenDuration, DefaultOpenDuration)
	case s.OpenDuration == 0:
		s.OpenDuration = DefaultOpenDuration
	}
	switch {
	case s.MaxOpenDuration < 0:
		return s, settingsErr("MaxOpenDuration", "is %v; want a positive duration (0 for the default %v)", s.MaxOpenDuration, DefaultMaxOpenDuration)
	case s.MaxOpenDuration == 0:
		s.MaxOpenDuration = max(DefaultMaxOpenDuration, s.OpenDuration)
	case s.MaxOpenDuration < s.OpenDuration:
		return s, settingsErr("MaxOpenDuration", "is %v, below OpenDuration (%v)", s.MaxOpenDuration, s.OpenDuration)
	}

	switch {
	case math.IsNaN(s.Jitter) || s.Jitter >= 1:
		return s, settingsErr("Jitter", "is %v; want a fraction below 1 (0 for the default %v, negative for none)", s.Jitter, DefaultJitter)
	case s.Jitter == 0:
		s.Jitter = DefaultJitter
	case s.Jitter < 0:
		s.Jitter = NoJitter
	}

	switch {
	case s.HalfOpenProbes < 0 || s.HalfOpenProbes > MaxHalfOpenProbes:
		return s, settingsErr("HalfOpenProbes", "is %d; want 1 to %d (0 for the default %d)", s.HalfOpenProbes, MaxHalfOpenProbes, DefaultHalfOpenProbes)
	case s.HalfOpenProbes == 0:
		s.HalfOpenProbes = DefaultHalfOpenProbes
	}

	var err error
	if s.ProbeLease, err = durationOrDefault("ProbeLease", s.ProbeLease, DefaultProbeLease); err != nil {
		return s, err
	}
	if s.SlowCallThreshold < 0 {
		return s, settingsErr("SlowCallThreshold", "is %v; want at least 0 (0 turns it off)", s.SlowCallThreshold)
	}
	if s.CacheTTL, err = durationOrDefault("CacheTTL", s.CacheTTL, DefaultCacheTTL); err != nil {
		return s, err
	}
	if s.StoreTimeout, err = durationOrDefault("StoreTimeout", s.StoreTimeout, DefaultStoreTimeout); err != nil {
		return s, err
	}
	if s.ReportInterval, err = durationOrDefault("ReportInterval", s.ReportInterval, DefaultReportInterval); err != nil {
		return s, err
	}

	return s, nil
}

func durationOrDefault(field string, d, def time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return d, settingsErr(field, "is %v; want a positive duration (0 for the default %v)", d, def)
	case d == 0:
		return def, nil
	}
	return d, nil
}
