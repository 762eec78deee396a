package sim

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints the report as a table, one row per strategy, followed
// by a legend.
func WriteTable(w io.Writer, r Report) error {
	c := r.Config
	fleet := fmt.Sprintf("%d environments", c.Envs)
	if c.ScaleOut {
		fleet = fmt.Sprintf("%d environments at the start, Lambda-like scale-out up to %d", c.Envs, c.MaxEnvs)
	}
	retryAfter := "no Retry-After"
	if c.RetryAfter > 0 {
		retryAfter = "Retry-After " + fmtDur(time.Duration(c.RetryAfter))
	}
	fmt.Fprintf(w, "outagesim: %s, %d new calls/s for %s; partner serves %d/s, %d/s from %s for %s (%d + %s); %d attempts, ratio %g over %s; seed %d; simulated time x%g; stores: %s\n\n",
		fleet, c.Rate, fmtDur(time.Duration(c.Duration)), c.Capacity, c.OutageCapacity,
		fmtDur(time.Duration(c.OutageStart)), fmtDur(time.Duration(c.OutageLength)), c.RejectStatus, retryAfter,
		c.Attempts, c.Ratio, fmtDur(time.Duration(c.Window)), c.Seed, c.Speed, c.Store)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tload\tfailed\tblocked 1st\t1st in outage\topen everywhere\t1st in outage\tstore r/w per call\tstore r/w per call\tenvs\twall\t")
	fmt.Fprintln(tw, "\tin outage\tfor good\tby breaker\tat partner\tafter\tafter open\thealthy\toutage\t\t\t")
	for _, res := range r.Results {
		openAll, blocked, afterOpen := "-", "-", "-"
		if res.HasBreaker {
			blocked = fmt.Sprint(res.Before.BreakerBlockedFirst + res.Outage.BreakerBlockedFirst + res.After.BreakerBlockedFirst)
			if res.FirstAttemptsAfterOpen != nil {
				afterOpen = fmt.Sprint(*res.FirstAttemptsAfterOpen)
			}
			switch {
			case res.BreakerOpenAll != nil:
				openAll = fmtDur(time.Duration(*res.BreakerOpenAll))
			case res.BreakerOpenedIn > 0:
				openAll = fmt.Sprintf("never (%d/%d)", res.BreakerOpenedIn, res.BreakerActive)
			default:
				openAll = "never opened"
			}
		}
		storeH, storeO := "-", "-"
		if res.Before.Store != nil {
			storeH = fmt.Sprintf("%.3f / %.3f", res.Before.StoreReadsPerCall, res.Before.StoreWritesPerCall)
			storeO = fmt.Sprintf("%.3f / %.3f", res.Outage.StoreReadsPerCall, res.Outage.StoreWritesPerCall)
		}
		fmt.Fprintf(tw, "%s\t%.2fx\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t\n",
			res.Label, res.LoadFactor, res.FailedForGood, blocked, res.FirstAttemptsInOutage,
			openAll, afterOpen, storeH, storeO, res.Envs, fmtDur(time.Duration(res.Wall)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeStoreFaults(w, r)
	if err := writeCosts(w, r); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nsimulated time, nominal x%g; effective (stops for backlog and stalls included):", c.Speed)
	for i, res := range r.Results {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s x%.1f", sep, res.Clock.EffectiveSpeed)
	}
	fmt.Fprintln(w)
	_, err := io.WriteString(w, `
load in outage:     attempts reaching the partner during the outage / new calls started during it
failed for good:    calls that ended in an error (whole run; -json breaks them down by cause and phase)
blocked 1st:        first attempts the circuit breaker rejected before sending (whole run)
1st in outage:      first attempts that reached the partner during the outage
open everywhere:    time from the start of the outage until the breaker was open in every environment
                    (that saw it open, or started a call more than the breaker's cache TTL after it first
                    opened anywhere; "never (k/n)": only k of those n saw it open)
1st after open:     first attempts that reached the partner during the outage from the first whole second
                    the breaker was open everywhere: its probes ("-": it never was open everywhere)
store r/w per call: shared-store reads / writes (DynamoDB requests, or the in-memory stand-in's calls) per new call,
                    healthy = before the outage
envs:               execution environments at the end; wall: real time this strategy took
`)
	return err
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Second == 0:
		return d.String()
	case d >= 10*time.Second || d <= -10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

// writeStoreFaults notes the strategies some of whose shared-store calls
// failed (DynamoDB timeouts and errors; the in-memory stores never fail),
// and what the global budget did meanwhile: a load factor above the ratio
// is then not the ratio's doing.
func writeStoreFaults(w io.Writer, r Report) {
	noted := false
	for _, res := range r.Results {
		var total, outage int64
		for _, ph := range []*Phase{&res.Before, &res.Outage, &res.After} {
			if ph.Store != nil {
				total += ph.Store.Errors
			}
		}
		if res.Outage.Store != nil {
			outage = res.Outage.Store.Errors
		}
		if total == 0 {
			continue
		}
		if !noted {
			fmt.Fprintln(w)
			noted = true
		}
		fmt.Fprintf(w, "store faults: %s: %d store calls failed, %d of them during the outage\n", res.Label, total, outage)
	}
	if !noted {
		return
	}
	c := r.Config
	switch {
	case c.FailClosed:
		fmt.Fprintln(w, "              the global budget refused retries while its store failed (-fail-closed)")
	case c.GlobalWithLocal:
		fmt.Fprintln(w, "              the global budget abstained while its store failed; the local ratio budget (-global-with-local) decided alone")
	default:
		fmt.Fprintln(w, "              the global budget abstained while its store failed (fail open) and no other budget bounded the retries:")
		fmt.Fprintln(w, "              -global-with-local adds a local ratio budget as the fallback, -fail-closed refuses retries instead")
	}
}

// writeCosts prints DynamoDB request units and their on-demand price per
// million calls, by phase, for the strategies that used DynamoDB.
func writeCosts(w io.Writer, r Report) error {
	var rows []*Result
	for _, res := range r.Results {
		if res.Before.Store != nil && res.Before.Store.HasUnits {
			rows = append(rows, res)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	c := r.Config
	fmt.Fprintf(w, "\nDynamoDB request units per million calls, read / write, and their on-demand price ($%g per million reads, $%g per million writes):\n\n",
		c.PriceRead, c.PriceWrite)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tbefore the outage\tduring the outage\tafter the outage\t")
	for _, res := range rows {
		fmt.Fprintf(tw, "%s", res.Label)
		for _, ph := range []*Phase{&res.Before, &res.Outage, &res.After} {
			usd := (ph.ReadUnitsPerMillion*c.PriceRead + ph.WriteUnitsPerMillion*c.PriceWrite) / 1e6
			fmt.Fprintf(tw, "\t%.0f / %.0f = $%.4f", ph.ReadUnitsPerMillion, ph.WriteUnitsPerMillion, usd)
		}
		fmt.Fprintln(tw, "\t")
	}
	return tw.Flush()
}
