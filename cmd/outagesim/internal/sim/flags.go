package sim

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Options are the command line: the simulation and how to show it.
type Options struct {
	Config
	JSON     bool   // print JSON on stdout instead of the table
	Plot     string // write the PNG chart here
	Progress bool   // show a progress bar (only when stderr is a terminal)
}

// ErrUsage marks command-line errors; the command exits with status 2.
var ErrUsage = errors.New("usage error")

// ParseFlags parses the command line. It returns flag.ErrHelp for -h, and
// an error wrapping ErrUsage that names every bad flag otherwise. Usage and
// flag errors are written to errOut.
func ParseFlags(name string, args []string, errOut io.Writer) (Options, error) {
	o := Options{Config: DefaultConfig(), Progress: true}
	c := &o.Config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(errOut, "Usage: %s [flags]\n\n", name)
		fmt.Fprintf(errOut, "Runs a fleet of execution environments against a partner that loses capacity\n"+
			"for a while, once per retry strategy, and shows what each strategy does to\n"+
			"the partner. Durations are simulated time.\n\n"+
			"  %[1]s                           50 busy environments, HTTP on loopback (about 40 s)\n"+
			"  %[1]s -fleet lambda             1,000 environments, one call per second each, in process (a few s)\n"+
			"  %[1]s -fleet lambda -scale-out  the same, Lambda adding environments while calls are slow\n"+
			"  %[1]s -outage partial           the partner keeps half its capacity: the breaker should stay closed\n"+
			"\nOver HTTP (-partner http) a run the machine could not keep up with is marked\n"+
			"'!' and explained; -partner inproc runs in virtual time on any machine.\n\nFlags:\n", name)
		fs.PrintDefaults()
	}

	fs.StringVar(&c.Fleet, "fleet", c.Fleet, fmt.Sprintf("fleet shape: %[1]s (a few busy environments, each running any number of calls at once, picked at random) or "+
		"%[2]s (many environments making about one call per second each: one call at a time, an idle environment picked at random, "+
		"a call throttled when none is idle, pending counts flushed after every call as a Lambda handler does; "+
		"sets -envs %[3]d -rate %[4]d -partner %[7]s and, for -scale-out, -max-envs %[5]d -scale-rate %[6]d, unless given)",
		FleetBusy, FleetLambda, LambdaEnvs, LambdaRate, LambdaMaxEnvs, LambdaScaleRate, PartnerInproc))
	fs.IntVar(&c.Envs, "envs", c.Envs, "execution environments (E) at the start")
	fs.IntVar(&c.Rate, "rate", c.Rate, "new calls per simulated second across the fleet (R)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "simulated time during which new calls start (whole seconds)")
	fs.BoolVar(&c.ScaleOut, "scale-out", c.ScaleOut, "Lambda-like scaling: one call at a time per environment; a new environment (fresh budget and breaker cache) joins when none is idle")
	fs.IntVar(&c.MaxEnvs, "max-envs", c.MaxEnvs, "with -scale-out, the most environments; beyond it calls are throttled")
	fs.IntVar(&c.ScaleRate, "scale-rate", c.ScaleRate, "with -scale-out, environments that may join per simulated second, in bursts of up to 10 s worth, as Lambda's 1,000 per 10 s (0 = unlimited)")

	fs.IntVar(&c.Capacity, "capacity", c.Capacity, "calls the partner serves per simulated second, normally")
	fs.StringVar(&c.Outage, "outage", c.Outage, fmt.Sprintf("outage preset: %s (the partner keeps a fifth of -capacity: most attempts fail and the shared breaker opens) or "+
		"%s (it keeps half: 25%% of first attempts and about 30%% of the attempts a 10%% budget lets through fail, under the breaker's 50%%, which should stay closed); "+
		"sets -outage-capacity", OutageMajor, OutagePartial))
	fs.IntVar(&c.OutageCapacity, "outage-capacity", c.OutageCapacity, "calls the partner serves per simulated second during the outage; -outage sets it from -capacity")
	fs.DurationVar(&c.CapacitySlot, "capacity-slot", c.CapacitySlot, "enforce -capacity and -outage-capacity per slot of this length, a whole fraction of a second (e.g. 100ms: a tenth of the capacity per 100 ms, which turns calls away when they bunch up; 0 = per second)")
	fs.DurationVar(&c.OutageStart, "outage-start", c.OutageStart, "start of the outage (whole seconds)")
	fs.DurationVar(&c.OutageLength, "outage-length", c.OutageLength, "length of the outage (whole seconds)")
	fs.IntVar(&c.RejectStatus, "reject-status", c.RejectStatus, "status of calls beyond capacity: 503 or 429")
	fs.DurationVar(&c.RetryAfter, "retry-after", c.RetryAfter, "Retry-After sent with rejections (0 = none)")
	fs.DurationVar(&c.Latency, "latency", c.Latency, "partner service time per call")
	fs.DurationVar(&c.Slowdown, "slowdown", c.Slowdown, "under overload, extra latency per unit of overload, up to 10x (0 = off)")

	fs.IntVar(&c.Attempts, "attempts", c.Attempts, "attempts per call, the first included")
	fs.DurationVar(&c.TransientBase, "transient-base", c.TransientBase, "full-jitter backoff base after a transient failure")
	fs.DurationVar(&c.ThrottlingBase, "throttling-base", c.ThrottlingBase, "full-jitter backoff base after throttling")
	fs.DurationVar(&c.MaxDelay, "max-delay", c.MaxDelay, "cap on one backoff")

	fs.IntVar(&c.BucketCapacity, "bucket-capacity", c.BucketCapacity, "token bucket capacity (local bucket and AWS SDK)")
	fs.IntVar(&c.TransientCost, "transient-cost", c.TransientCost, "token bucket cost of a retry after a transient failure")
	fs.IntVar(&c.ThrottlingCost, "throttling-cost", c.ThrottlingCost, "token bucket cost of a retry after throttling")
	fs.Float64Var(&c.Ratio, "ratio", c.Ratio, "retry ratio of the local and global ratio budgets")
	fs.DurationVar(&c.Window, "window", c.Window, "sliding window of the ratio budgets")
	fs.IntVar(&c.MinRetries, "min-retries", c.MinRetries, "local ratio: retries always allowed per window and environment")
	fs.IntVar(&c.GlobalFloor, "global-floor", c.GlobalFloor, "global ratio: retries always allowed per window, fleet-wide (0 = library default, -1 = none)")
	fs.IntVar(&c.GlobalShards, "global-shards", c.GlobalShards, "global ratio: store items one window is spread over (0 = library default)")
	fs.IntVar(&c.LeaseSize, "lease-size", c.LeaseSize, "global ratio: most retries one store write withdraws (0 = library default)")
	fs.BoolVar(&c.FailClosed, "fail-closed", c.FailClosed, "global ratio: refuse retries while the store fails (default: abstain, fail open)")
	fs.BoolVar(&c.LocalUnder, "global-with-local", c.LocalUnder, "give the global strategies a local ratio budget too, asked before the global one (the fallback when the store fails)")
	fs.DurationVar(&c.StoreTimeout, "store-timeout", c.StoreTimeout, "real-time bound on each shared-store call (0 = library default, 50ms; 10s with -partner inproc, whose stores answer at once)")
	fs.Float64Var(&c.BreakerFailureRatio, "breaker-failure-ratio", c.BreakerFailureRatio, "breaker trips at this failure ratio (0 = library default)")
	fs.IntVar(&c.BreakerMinRequests, "breaker-min-requests", c.BreakerMinRequests, "breaker needs at least this many calls in its window (0 = library default)")
	fs.DurationVar(&c.BreakerOpen, "breaker-open", c.BreakerOpen, "breaker open duration before the first probe (0 = library default)")

	fs.Func("seed", fmt.Sprintf("seed of the call-to-environment assignment, every jitter source except the AWS SDK's and, with -partner inproc, where the outage falls in the library's 10 s windows (default %d)", c.Seed), func(s string) error {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an unsigned integer", s)
		}
		c.Seed = v
		return nil
	})
	fs.StringVar(&c.Partner, "partner", c.Partner, fmt.Sprintf("where the partner runs: %[1]s (a real HTTP server on loopback, simulated time -speed times real time, checked for keeping up) or "+
		"%[2]s (called in process on a discrete-event scheduler: virtual time, reproducible for a seed, 10,000 environments on 2 cores; the same library code); "+
		"default %[1]s, %[2]s with -fleet %[3]s, %[1]s with -dynamodb-endpoint", PartnerHTTP, PartnerInproc, FleetLambda))
	fs.Float64Var(&c.Speed, "speed", c.Speed, fmt.Sprintf("simulated seconds per real second with -partner %s (default %d with -dynamodb-endpoint)", PartnerHTTP, DefaultDynamoSpeed))
	strategies := strings.Join(c.Strategies, ",")
	fs.StringVar(&strategies, "strategies", strategies, "comma-separated strategies to run, in this order: "+strings.Join(StrategyKeys(), ", "))

	fs.StringVar(&c.DynamoEndpoint, "dynamodb-endpoint", "", "DynamoDB endpoint URL (e.g. DynamoDB Local) for the global strategies; empty = in-memory stores")
	fs.StringVar(&c.DynamoTable, "dynamodb-table", "", "DynamoDB table to create and use (default: a fresh outagesim-<time> table)")
	fs.StringVar(&c.DynamoRegion, "dynamodb-region", c.DynamoRegion, "DynamoDB region")
	fs.Float64Var(&c.PriceRead, "price-read", c.PriceRead, "DynamoDB on-demand price, USD per million read request units (cost section)")
	fs.Float64Var(&c.PriceWrite, "price-write", c.PriceWrite, "DynamoDB on-demand price, USD per million write request units (cost section)")

	fs.BoolVar(&o.JSON, "json", false, "print the results as JSON on stdout")
	fs.StringVar(&o.Plot, "plot", "", "write a PNG chart of partner arrivals per second to this file")
	fs.BoolVar(&o.Progress, "progress", true, "show a progress bar on stderr when it is a terminal")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q (all settings are flags; see -h)", fs.Arg(0))
		fmt.Fprintln(errOut, err)
		return o, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	c.Strategies = splitList(strategies)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	applyPresets(c, set)
	if err := c.Validate(); err != nil {
		fmt.Fprintf(errOut, "%s: invalid flags:\n%v\n", name, indent(err.Error()))
		return o, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if o.Plot != "" && !strings.HasSuffix(strings.ToLower(o.Plot), ".png") {
		err := fmt.Errorf("-plot: %q must end in .png", o.Plot)
		fmt.Fprintf(errOut, "%s: invalid flags:\n  %v\n", name, err)
		return o, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return o, nil
}

// applyPresets fills in what -fleet, -outage and -dynamodb-endpoint imply
// for the flags that were not given (set).
func applyPresets(c *Config, set map[string]bool) {
	if c.Fleet == FleetLambda {
		l := LambdaConfig()
		preset := func(name string, dst *int, v int) {
			if !set[name] {
				*dst = v
			}
		}
		preset("envs", &c.Envs, l.Envs)
		preset("rate", &c.Rate, l.Rate)
		preset("max-envs", &c.MaxEnvs, l.MaxEnvs)
		preset("scale-rate", &c.ScaleRate, l.ScaleRate)
		if !set["partner"] && c.DynamoEndpoint == "" {
			c.Partner = l.Partner
		}
	}
	switch {
	case set["outage-capacity"] && !set["outage"]:
		c.Outage = "" // set by hand
	case !set["outage-capacity"]:
		if oc, ok := OutageCapacityFor(c.Outage, c.Capacity); ok {
			c.OutageCapacity = oc
		}
	}
	if c.DynamoEndpoint != "" && !set["speed"] {
		c.Speed = DefaultDynamoSpeed
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
