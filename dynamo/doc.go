// Package dynamo keeps herdguard's fleet-wide state in one DynamoDB table:
// BudgetStore implements budget.Store (the allowance behind budget.Global,
// one retry ratio for every execution environment of a fleet) and
// BreakerStore implements breaker.Store (one circuit breaker state for the
// fleet). Both do every change with a single conditional write and never
// read before writing, so there is no lock to hold and no lost update.
//
// # Setting up
//
// Package fleet builds an Executor over these stores in one call:
//
//	api, err := dynamo.NewClient(ctx, dynamo.ClientOptions{}) // ≤ 1 SDK retry, its own retry quota and pool
//	exec, err := fleet.New(ctx, api, "herdguard", "payments", fleet.Config{})
//
// The stores alone, for a stack of one's own:
//
//	budgets, err := dynamo.NewBudgetStore(api, "herdguard", dynamo.StoreOptions{})
//	breakers, err := dynamo.NewBreakerStore(api, "herdguard", dynamo.StoreOptions{})
//
// The table is defined in template.yaml for deployments; CreateTable creates
// the same one for tests and local development (see Spec). The stores need
// the IAM actions listed by Actions, and nothing else.
//
// Each store call runs under a short deadline of its own, set by its caller
// (breaker.Settings.StoreTimeout, 50 ms by default, and the Global budget's
// store timeout). The stores honour ctx, SDK retry included, and a call
// whose deadline has passed sends no request. When the table is slow,
// throttled, unreachable or holds a malformed item, the caller falls back to
// its local layers.
//
// # Item layout
//
// One table, partition key pk (string), time to live on expires, on-demand
// billing. Budgets live in items "b#<name>#<shard>#<windowStartUnixMilli>",
// a breaker in "c#<name>" (state and fleet counts), "c#<name>#override" and
// "c#<name>#p#<slot>" (probe leases). Every change is one conditional
// UpdateItem, and a refusal brings the item as it stands at no extra cost.
// See "DynamoDB item layout" in docs/ARCHITECTURE.md for every attribute
// and condition expression, and ExampleSpec and ExampleActions for the
// table and the IAM actions.
//
// # Cost
//
// Every item is under 1 KB, so a write costs one write request unit, refused
// or not, and an eventually consistent read of one item half a read unit:
//
//	BudgetStore.Apply          1 write
//	BreakerStore.Load          1 BatchGetItem of 2 items (1 read unit)
//	BreakerStore.Report        1 write; 2 after a wrong guess of its slot, at most 3
//	BreakerStore.Transition    1 write
//	BreakerStore.AcquireProbe  1 write per slot tried (limit when all are held)
//	BreakerStore.SetOverride   1 write
//
// On the healthy path a Breaker loads once per 15 × CacheTTL per environment
// (once per CacheTTL while the fleet watches) and writes nothing, and a
// Global writes nothing. Stats counts the requests.
//
// # Retries and duplicates
//
// The client from NewClient retries a request at most once, so a write
// whose answer was lost may be applied twice: at most one Deposit of slack
// per retried Apply, one report's counts per retried Report.
//
// # Operator override
//
// Writing the override item forces a breaker in every environment within
// 15 × CacheTTL (15 s by default; within CacheTTL while the fleet watches).
// For the breaker "payments" in the
// table "herdguard" (a stack deployed from template.yaml has a generated
// table name: take it from the stack's TableName output), with an
// operator's credentials (the function's role may not write override items):
//
//	# force open: every call is rejected, probes included
//	aws dynamodb put-item --table-name herdguard --item '{"pk":{"S":"c#payments#override"},"override":{"S":"force-open"}}'
//	# force closed: every call passes; outcomes are counted but never open it
//	aws dynamodb put-item --table-name herdguard --item '{"pk":{"S":"c#payments#override"},"override":{"S":"force-closed"}}'
//	# disable: calls pass and nothing is counted
//	aws dynamodb put-item --table-name herdguard --item '{"pk":{"S":"c#payments#override"},"override":{"S":"disabled"}}'
//	# any of them for one hour only: add "until" in Unix milliseconds
//	aws dynamodb put-item --table-name herdguard --item '{"pk":{"S":"c#payments#override"},"override":{"S":"force-open"},"until":{"N":"'$(( ($(date +%s) + 3600) * 1000 ))'"}}'
//	# clear: hand the breaker back to its state machine
//	aws dynamodb put-item --table-name herdguard --item '{"pk":{"S":"c#payments#override"},"override":{"S":"none"}}'
//	# (or) aws dynamodb delete-item --table-name herdguard --key '{"pk":{"S":"c#payments#override"}}'
//
// These need an operator's credentials: a function's role is denied writes
// to override items (SECURITY.md). BreakerStore.SetOverride writes the same
// item, with UpdateItem, for operator tooling. An item whose attributes
// have other types or values (a typo such as "force_open") is malformed:
// the stores report a *MalformedItemError and the breaker falls back to its
// local state, so check with get-item after writing. Deleting a malformed
// item repairs it; the state item can be deleted too, which resets the
// breaker to closed at epoch 0.
//
// # Sizing budget shards
//
// Each shard of a budget window is one item, and DynamoDB takes at most
// 1,000 write units per second on one item. Give a budget enough shards to
// keep each under half that limit; more shards cost nothing per write but
// split the allowance, so a take can be refused by an empty shard while
// another has some: fewer retries than the ratio allows, never more. See
// "Sizing shards" under "Fleet-wide retry ratio" in docs/ARCHITECTURE.md for
// the formula and examples.
package dynamo
