package sim

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints the report as tables, one row per strategy, followed
// by a legend. A run the machine could not keep up with is marked "!" and
// said so above and below the tables.
func WriteTable(w io.Writer, r Report) error {
	c := r.Config
	var fleet string
	switch {
	case c.Fleet == FleetLambda && c.ScaleOut:
		fleet = fmt.Sprintf("Lambda-shaped fleet: %d environments at the start, one call at a time each, scaling out up to %d (%d/s)", c.Envs, c.MaxEnvs, c.ScaleRate)
	case c.Fleet == FleetLambda:
		fleet = fmt.Sprintf("Lambda-shaped fleet: %d environments, one call at a time each", c.Envs)
	case c.ScaleOut:
		fleet = fmt.Sprintf("%d environments at the start, Lambda-like scale-out up to %d", c.Envs, c.MaxEnvs)
	default:
		fleet = fmt.Sprintf("%d environments", c.Envs)
	}
	retryAfter := "no Retry-After"
	if c.RetryAfter > 0 {
		retryAfter = "Retry-After " + fmtDur(time.Duration(c.RetryAfter))
	}
	outage := ""
	if c.Outage != "" {
		outage = c.Outage + " outage: "
	}
	engine := fmt.Sprintf("HTTP partner on loopback, simulated time x%g", c.Speed)
	if c.Partner == PartnerInproc {
		engine = "partner in process, virtual time"
	}
	fmt.Fprintf(w, "outagesim: %s, %d new calls/s for %s; partner serves %d/s, %s%d/s from %s for %s (%d + %s); %d attempts, ratio %g over %s; seed %d; %s; stores: %s\n",
		fleet, c.Rate, fmtDur(time.Duration(c.Duration)), c.Capacity, outage, c.OutageCapacity,
		fmtDur(time.Duration(c.OutageStart)), fmtDur(time.Duration(c.OutageLength)), c.RejectStatus, retryAfter,
		c.Attempts, c.Ratio, fmtDur(time.Duration(c.Window)), c.Seed, engine, c.Store)
	behind := 0
	for _, res := range r.Results {
		if res.KeepUp.Behind() {
			behind++
		}
	}
	if behind > 0 {
		fmt.Fprintf(w, "\n!!! THE MACHINE DID NOT KEEP UP with %d of %d runs (marked !): their figures are NOT those of this scenario; see below !!!\n", behind, len(r.Results))
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tload\tfailed\tof them\t1st in outage\tretries ÷ bound\tenvs\twall\t\t")
	fmt.Fprintln(tw, "\tin outage\tfor good\tthrottled\tat partner\tin outage\t\t\t\t")
	for _, res := range r.Results {
		throttled := res.Before.Failed.Throttled + res.Outage.Failed.Throttled + res.After.Failed.Throttled
		ratio := "-"
		if res.GlobalRatio != nil {
			ratio = fmt.Sprintf("%.2f", res.GlobalRatio.GrantedOverBound)
		}
		mark := ""
		if res.KeepUp.Behind() {
			mark = "!"
		}
		fmt.Fprintf(tw, "%s\t%.2fx\t%d\t%d\t%d\t%s\t%d\t%s\t%s\t\n",
			res.Label, res.LoadFactor, res.FailedForGood, throttled, res.FirstAttemptsInOutage, ratio, res.Envs, fmtDur(time.Duration(res.Wall)), mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeBreakers(w, r); err != nil {
		return err
	}
	if err := writeStores(w, r); err != nil {
		return err
	}
	writeStoreFaults(w, r)
	if err := writeCosts(w, r); err != nil {
		return err
	}
	if c.Partner == PartnerInproc {
		fmt.Fprint(w, "\nin process, virtual time; simulated seconds per real second:")
	} else {
		fmt.Fprintf(w, "\nsimulated time, nominal x%g; effective (stops for backlog and stalls included):", c.Speed)
	}
	for i, res := range r.Results {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s x%.1f", sep, res.Clock.EffectiveSpeed)
	}
	fmt.Fprintln(w)
	writeKeepUp(w, r)
	for _, res := range r.Results {
		for _, n := range res.KeepUp.Notes {
			fmt.Fprintf(w, "note: %s: %s\n", res.Label, n)
		}
	}
	_, err := io.WriteString(w, `
load in outage:     attempts reaching the partner during the outage / new calls started during it
failed for good:    calls that ended in an error (whole run; -json breaks them down by cause and phase), of them
                    throttled: no environment was idle and the fleet could not grow (Lambda's 429), nothing sent
1st in outage:      first attempts that reached the partner during the outage
retries ÷ bound:    retries the global budget granted (and were used) over the budget windows that overlap the
                    outage, divided by its bound there: Ratio × requests + Floor per window
envs:               execution environments at the end; wall: real time this strategy took
breaker opened:     time from the start of the outage until some environment saw the breaker open, and the true
                    failure ratio then: attempts the partner rejected / attempts that reached it, over the
                    breaker's window (10s) before that moment
open everywhere:    time from the start of the outage until the breaker was open in every environment
                    (that saw it open, or started a call more than the breaker's cache TTL after it first
                    opened anywhere; "never (k/n)": only k of those n saw it open)
blocked 1st:        first attempts the circuit breaker rejected before sending (whole run)
1st after open:     first attempts that reached the partner during the outage from the first whole second
                    the breaker was open everywhere: its probes ("-": it never was open everywhere)
store r/w per call: shared-store reads / writes (DynamoDB requests, or the in-memory stand-in's calls) per new call,
                    healthy = before the outage, run = whole run
hottest item:       the most write / read units one store item consumed in one second (DynamoDB takes at most
                    1000 / 3000 per item), and store requests throttled past those limits
`)
	return err
}

// subTable starts a table of the results that pass keep, after a blank
// line, with the given header lines; it writes nothing when none does.
func subTable(w io.Writer, r Report, keep func(*Result) bool, header ...string) (*tabwriter.Writer, []*Result) {
	var rows []*Result
	for _, res := range r.Results {
		if keep(res) {
			rows = append(rows, res)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(rows) == 0 {
		return tw, nil
	}
	fmt.Fprintln(w)
	for _, h := range header {
		fmt.Fprintln(tw, h)
	}
	return tw, rows
}

// writeBreakers prints what the breaker did, for the strategies with one.
func writeBreakers(w io.Writer, r Report) error {
	tw, rows := subTable(w, r, func(res *Result) bool { return res.HasBreaker },
		"strategy\tbreaker opened\ttrue failure\topen everywhere\tblocked 1st\t1st in outage\t",
		"\tafter\tratio then\tafter\tby breaker\tafter open\t")
	for _, res := range rows {
		opened, ratio, openAll, afterOpen := "never", "-", "-", "-"
		if res.BreakerFirstOpen != nil {
			opened = fmtDur(time.Duration(*res.BreakerFirstOpen))
		}
		if res.BreakerFirstOpenFailureRatio != nil {
			ratio = fmt.Sprintf("%.0f%%", 100**res.BreakerFirstOpenFailureRatio)
		}
		switch {
		case res.BreakerOpenAll != nil:
			openAll = fmtDur(time.Duration(*res.BreakerOpenAll))
		case res.BreakerOpenedIn > 0:
			openAll = fmt.Sprintf("never (%d/%d)", res.BreakerOpenedIn, res.BreakerActive)
		}
		if res.FirstAttemptsAfterOpen != nil {
			afterOpen = fmt.Sprint(*res.FirstAttemptsAfterOpen)
		}
		blocked := res.Before.BreakerBlockedFirst + res.Outage.BreakerBlockedFirst + res.After.BreakerBlockedFirst
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t\n", res.Label, opened, ratio, openAll, blocked, afterOpen)
	}
	return tw.Flush()
}

// writeStores prints the shared stores' traffic, for the strategies with
// shared stores.
func writeStores(w io.Writer, r Report) error {
	tw, rows := subTable(w, r, func(res *Result) bool { return res.Before.Store != nil },
		"strategy\tstore r/w per call\tstore r/w per call\tstore r/w per call\thottest item\thottest item\tthrottled\t",
		"\thealthy\toutage\trun\tpeak WCU/s\tpeak RCU/s\trequests\t")
	for _, res := range rows {
		run := "-"
		if res.StoreReadsPerCall != nil && res.StoreWritesPerCall != nil {
			run = fmt.Sprintf("%.3f / %.3f", *res.StoreReadsPerCall, *res.StoreWritesPerCall)
		}
		wcu, rcu, throttled := "-", "-", "-"
		if u := res.Capacity; u != nil {
			wcu, rcu, throttled = fmt.Sprintf("%.0f", u.PeakItemWriteUnits), fmt.Sprintf("%.1f", u.PeakItemReadUnits), fmt.Sprint(u.Throttled)
		}
		fmt.Fprintf(tw, "%s\t%.3f / %.3f\t%.3f / %.3f\t%s\t%s\t%s\t%s\t\n", res.Label,
			res.Before.StoreReadsPerCall, res.Before.StoreWritesPerCall,
			res.Outage.StoreReadsPerCall, res.Outage.StoreWritesPerCall, run, wcu, rcu, throttled)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, res := range rows {
		if u := res.Capacity; u != nil && u.HottestWriteItem != "" {
			fmt.Fprintf(w, "  %s: hottest item %s; largest item %d bytes\n", res.Label, u.HottestWriteItem, u.LargestItem)
		}
	}
	return nil
}

// writeKeepUp says, strategy by strategy, what kept the machine from
// carrying the scenario.
func writeKeepUp(w io.Writer, r Report) {
	var behind []*Result
	for _, res := range r.Results {
		if res.KeepUp.Behind() {
			behind = append(behind, res)
		}
	}
	if len(behind) == 0 {
		return
	}
	fmt.Fprintln(w, "\n!!! THE MACHINE DID NOT KEEP UP; do not use the figures marked ! !!!")
	for _, res := range behind {
		for _, p := range res.KeepUp.Problems {
			fmt.Fprintf(w, "  %s: %s\n", res.Label, p)
		}
	}
	fmt.Fprintln(w, "  "+keepUpAdvice(r))
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
