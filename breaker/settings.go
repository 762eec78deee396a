package breaker

import (
	"fmt"
	"math"
	"time"

	"github.com/herdguard/herdguard"
)

// Defaults applied by New to the zero fields of Settings.
const (
	defaultFailureRatio    = 0.5
	defaultMinRequests     = 20
	defaultWindow          = 10 * time.Second
	windowSlots            = 10 // the rolling window rolls a tenth at a time
	defaultOpenDuration    = 30 * time.Second
	defaultMaxOpenDuration = 5 * time.Minute
	defaultJitter          = 0.2
	noJitter               = -1.0
	defaultHalfOpenProbes  = 1
	defaultProbeLease      = 10 * time.Second
	defaultCacheTTL        = time.Second
	defaultStoreTimeout    = 50 * time.Millisecond
	defaultReportInterval  = time.Second
)

// Limits on Settings.
const (
	// maxHalfOpenProbes bounds Settings.HalfOpenProbes. It is the number
	// of probe slots package dynamo's Store keeps per breaker (one item
	// each, every one of them written by a refused AcquireProbe): a larger
	// limit would make every AcquireProbe fail there.
	maxHalfOpenProbes = 64
	// openGrowth is the factor the open duration grows by on every re-open.
	openGrowth = 2
)

// Settings configures a Breaker. The zero value of every field means its
// default; negative durations and counts are errors. New validates
// Settings and names the offending field in its error, a
// *herdguard.ConfigError.
type Settings struct {
	// FailureRatio trips a closed breaker when failures / (successes +
	// failures) in the rolling window reaches it, provided the window holds
	// at least MinRequests such calls. In (0, 1]; 0 means 0.5.
	FailureRatio float64

	// MinRequests is the minimum throughput (successes + failures in the
	// window) below which the failure ratio never trips. 0 means 20.
	MinRequests int64

	// Window is the length of the rolling window (10 s if 0), which rolls
	// a tenth at a time. Window must be at least a millisecond. With a
	// Store, Window is also the length of the fleet's rolling window, kept
	// in the Store as FleetSlots buckets aligned to the Unix epoch; it must
	// then be a whole multiple of FleetSlots milliseconds.
	Window time.Duration

	// ConsecutiveFailures, if positive, also trips a closed breaker after
	// that many failures in a row, whatever the ratio. 0 turns it off. It
	// is a local criterion: in shared mode it applies only while the
	// breaker runs on its local state machine (see Store faults in the
	// package documentation), since consecutiveness means nothing across
	// a fleet.
	ConsecutiveFailures int64

	// OpenDuration is how long the breaker stays open after a trip (30 s
	// if 0). Each re-open (a failed half-open probe) doubles it, up to
	// MaxOpenDuration (5 min, or OpenDuration if that is larger, when 0). The cap applies before
	// jitter, so an open period at the cap lies within ±Jitter of it.
	OpenDuration    time.Duration
	MaxOpenDuration time.Duration

	// Jitter spreads every open duration uniformly over ±Jitter of its
	// nominal value, so that a fleet does not probe in lockstep. 0 means
	// 0.2 (±20%); a negative value turns jitter off; it must be below 1.
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
	// through at the same time (1 if 0, at most 64). In shared mode the limit is fleet-wide, and the
	// probes are the calls of the environment that moved the fleet to
	// half-open. A successful probe closes the breaker; a failed one opens
	// it again with a doubled open duration.
	HalfOpenProbes int

	// ProbeLease is how long a probe holds its slot (10 s if 0). A probe whose Done never comes, for instance because its
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

	// Adaptive replaces the hard stop by fleet-wide adaptive throttling:
	// the breaker never trips to Open on the failure ratio (overrides still
	// apply); where the hard stop would trip, the fleet admits only a share
	// of its calls and no retry. Rejections are *OpenError values with
	// Throttled set (errors.Is(err, ErrOpen)). false (the default) is the
	// hard stop. It needs a Store, and every environment that names the
	// breaker must agree on it: see "Adaptive throttling" in the package
	// documentation.
	Adaptive bool

	// Store, if not nil, shares the breaker's state with every process
	// that names the same breaker in the same store. nil keeps the breaker
	// purely in memory. The fields below apply only with a Store.
	Store Store

	// CacheTTL is how long the fleet state read from the Store is trusted
	// while the fleet is counting failures, open or half-open (1 s if 0);
	// while it is closed and quiet (no failure anywhere for two Windows),
	// 15 times as long, the first such period after a read at another
	// pace cut short by a random share (so a fleet that read together does
	// not keep reading together). A breaker calls Store.Load at most once
	// per such period (with Adaptive, every CacheTTL / 4 while the fleet
	// counts), plus once when a failure finds the fleet quiet and once before each
	// move of the fleet it may make (typically once, when an open period
	// ends; the fleet spreads those over CacheTTL).
	CacheTTL time.Duration

	// StoreTimeout bounds every Store call (50 ms if 0). Each
	// call runs under context.WithTimeout(ctx, StoreTimeout), so it ends by
	// the caller's deadline too.
	StoreTimeout time.Duration

	// OnStoreError, if not nil, is called (without the breaker's lock held)
	// with every Store fault, op being "load", "report", "transition" or
	// "acquire-probe". err satisfies errors.Is(err, ErrStore). The breaker
	// then runs on its local state machine until a Load succeeds again,
	// except after a fault of the move to half-open or of AcquireProbe:
	// see "When the Store fails" in the package documentation.
	OnStoreError func(op string, err error)

	// ReportInterval is the shortest time between two reports of this
	// environment's sampled counts to the Store, Flush included; 0 means
	// 1 s. Shorter intervals let tests and simulations run windows of
	// milliseconds; in production the default keeps the state item's
	// writes at about one per environment per second.
	ReportInterval time.Duration
}

func settingsErr(field, format string, args ...any) error {
	return &herdguard.ConfigError{Field: "breaker.Settings." + field, Reason: fmt.Sprintf(format, args...)}
}

// resolve validates s and returns it with every default filled in.
func (s Settings) resolve() (Settings, error) {
	switch {
	case math.IsNaN(s.FailureRatio) || s.FailureRatio < 0 || s.FailureRatio > 1:
		return s, settingsErr("FailureRatio", "is %v; want a ratio in (0, 1] (0 for the default %v)", s.FailureRatio, defaultFailureRatio)
	case s.FailureRatio == 0:
		s.FailureRatio = defaultFailureRatio
	}

	switch {
	case s.MinRequests < 0:
		return s, settingsErr("MinRequests", "is %d; want at least 0 (0 for the default %d)", s.MinRequests, defaultMinRequests)
	case s.MinRequests == 0:
		s.MinRequests = defaultMinRequests
	}

	switch {
	case s.Window < 0:
		return s, settingsErr("Window", "is %v; want a positive duration (0 for the default %v)", s.Window, defaultWindow)
	case s.Window == 0:
		s.Window = defaultWindow
	case s.Window < time.Millisecond:
		return s, settingsErr("Window", "is %v; want at least 1ms", s.Window)
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
		return s, settingsErr("OpenDuration", "is %v; want a positive duration (0 for the default %v)", s.OpenDuration, defaultOpenDuration)
	case s.OpenDuration == 0:
		s.OpenDuration = defaultOpenDuration
	}
	switch {
	case s.MaxOpenDuration < 0:
		return s, settingsErr("MaxOpenDuration", "is %v; want a positive duration (0 for the default %v)", s.MaxOpenDuration, defaultMaxOpenDuration)
	case s.MaxOpenDuration == 0:
		s.MaxOpenDuration = max(defaultMaxOpenDuration, s.OpenDuration)
	case s.MaxOpenDuration < s.OpenDuration:
		return s, settingsErr("MaxOpenDuration", "is %v, below OpenDuration (%v)", s.MaxOpenDuration, s.OpenDuration)
	}

	switch {
	case math.IsNaN(s.Jitter) || s.Jitter >= 1:
		return s, settingsErr("Jitter", "is %v; want a fraction below 1 (0 for the default %v, negative for none)", s.Jitter, defaultJitter)
	case s.Jitter == 0:
		s.Jitter = defaultJitter
	case s.Jitter < 0:
		s.Jitter = noJitter
	}

	switch {
	case s.HalfOpenProbes < 0 || s.HalfOpenProbes > maxHalfOpenProbes:
		return s, settingsErr("HalfOpenProbes", "is %d; want 1 to %d (0 for the default %d)", s.HalfOpenProbes, maxHalfOpenProbes, defaultHalfOpenProbes)
	case s.HalfOpenProbes == 0:
		s.HalfOpenProbes = defaultHalfOpenProbes
	}

	var err error
	if s.ProbeLease, err = durationOrDefault("ProbeLease", s.ProbeLease, defaultProbeLease); err != nil {
		return s, err
	}
	if s.SlowCallThreshold < 0 {
		return s, settingsErr("SlowCallThreshold", "is %v; want at least 0 (0 turns it off)", s.SlowCallThreshold)
	}
	if s.CacheTTL, err = durationOrDefault("CacheTTL", s.CacheTTL, defaultCacheTTL); err != nil {
		return s, err
	}
	if s.StoreTimeout, err = durationOrDefault("StoreTimeout", s.StoreTimeout, defaultStoreTimeout); err != nil {
		return s, err
	}
	if s.ReportInterval, err = durationOrDefault("ReportInterval", s.ReportInterval, defaultReportInterval); err != nil {
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
