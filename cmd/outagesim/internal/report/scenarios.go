package report

// Tables a scenario can feed: each is a Markdown file of docs/results.
const (
	// TableFleet is scenarios.md: the busy and Lambda fleets of the
	// outagesim defaults, major and partial outages.
	TableFleet = "scenarios.md"
	// TableScale is scale.md: fleets of 10,000 environments and more.
	TableScale = "scale.md"
)

// Scenario is one reference run of outagesim: every strategy its Args
// select, once per seed. Adding a scenario to the report is adding one
// entry to Scenarios.
type Scenario struct {
	// Name identifies the scenario in its table and in results.json.
	Name string
	// Table is the Markdown file it feeds (TableFleet, TableScale).
	Table string
	// Args are outagesim's flags, space-separated, as on the command line,
	// without -seed (the report sets it) and -partner (always inproc).
	Args string
	// Seeds, if not 0, runs only the first Seeds of the report's seeds
	// (for costly scenarios).
	Seeds int
	// Plot, if set, is the PNG file the chart of its first seed goes to.
	Plot string
	// Quick includes the scenario in -quick, shortened (QuickArgs).
	Quick bool
}

// Scenarios are the reference scenarios, in the order the tables show them.
var Scenarios = []Scenario{
	{Name: "busy-major", Table: TableFleet, Args: "-fleet busy -outage major", Plot: "outage.png", Quick: true},
	{Name: "busy-partial", Table: TableFleet, Args: "-fleet busy -outage partial", Plot: "outage-partial.png"},
	{Name: "lambda-major", Table: TableFleet, Args: "-fleet lambda -outage major", Plot: "outage-lambda.png", Quick: true},
	{Name: "lambda-partial", Table: TableFleet, Args: "-fleet lambda -outage partial", Plot: "outage-lambda-partial.png"},
	{Name: "lambda-scale-out-major", Table: TableFleet, Args: "-fleet lambda -scale-out -outage major"},
	{Name: "lambda-scale-out-partial", Table: TableFleet, Args: "-fleet lambda -scale-out -outage partial"},
	{Name: "lambda-10k-major", Table: TableScale, Args: "-fleet lambda -envs 10000 -rate 10000 -capacity 15000 -outage major -strategies global,global-breaker,global-adaptive"},
	{Name: "lambda-10k-partial", Table: TableScale, Args: "-fleet lambda -envs 10000 -rate 10000 -capacity 15000 -outage partial -strategies global,global-breaker,global-adaptive"},
	{Name: "lambda-100k-major", Table: TableScale, Args: "-fleet lambda -envs 100000 -rate 100000 -capacity 150000 -outage major -strategies global,global-breaker,global-adaptive", Seeds: 1},
	{Name: "lambda-100k-partial", Table: TableScale, Args: "-fleet lambda -envs 100000 -rate 100000 -capacity 150000 -outage partial -strategies global-breaker", Seeds: 1},
	// A fleet of 10,000 that Lambda scales out towards 100,000 as the
	// partner slows down under the outage's overload.
	{Name: "lambda-scale-out-100k-major", Table: TableScale, Args: "-fleet lambda -scale-out -envs 10000 -rate 50000 -capacity 75000 -latency 300ms -slowdown 1s -max-envs 100000 -scale-rate 10000 -outage major -strategies global,global-breaker", Seeds: 1},
}

// QuickArgs shorten a scenario under -quick: fewer environments and calls,
// a shorter run, the same shape of outage.
const QuickArgs = "-envs 40 -rate 100 -capacity 150 -duration 20s -outage-start 5s -outage-length 10s"
