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
// One table, partition key pk (string), no sort key, time to live on
// expires (seconds since the Unix epoch), on-demand billing. Names of
// budgets and breakers are letters, digits, '-', '_', '.' and ':' (see
// budget.NewGlobal), so they never contain the separator '#', and the
// prefixes keep budgets ("b#") and breakers ("c#") apart.
//
//	pk                                       attributes
//	b#<name>#<shard>#<windowStartUnixMilli>  allowance N, expires N               budget window shard
//	c#<name>                                 state S, epoch N,                    breaker state and
//	                                         open_until N (Unix ms, optional),    fleet counts
//	                                         reopens N,
//	                                         watch_until N (Unix ms, optional),
//	                                         for slot i in 0..9 (optional):
//	                                         b<i> N, r<i> N, s<i> N, f<i> N, n<i> N
//	c#<name>#override                        override S, until N (Unix ms,        operator override
//	                                         optional), expires N (optional)
//	c#<name>#p#<slot>                        epoch N, lease_until N (Unix ms),    half-open probe slot
//	                                         expires N
//
// state is "closed", "open" or "half-open"; override is "none",
// "force-open", "force-closed" or "disabled" (breaker.Override's strings).
// The fleet's counts of the current epoch live in the state item, in
// breaker.FleetSlots slots: slot i holds bucket b<i> (Unix milliseconds
// divided by the bucket width, a tenth of the breaker's Window; always
// congruent to i modulo 10) with its estimated requests r<i>, successes
// s<i> and failures f<i> and its number of samples n<i> (breaker.Bucket).
// A slot without b<i> is empty. A new bucket replaces the one ten buckets
// older in its slot, so the item never grows: it stays under 1 KB
// whatever the fleet's size. watch_until is when the fleet stops counting
// (breaker.Snapshot.WatchUntil). The state and override items never
// expire (an override with an end expires a day after it).
//
// # Conditional writes
//
//	BudgetStore.Apply         UpdateItem  SET allowance = if_not_exists(allowance, :floor) + :delta, expires = :exp
//	                                      IF [attribute_not_exists(allowance) OR] allowance BETWEEN :lo AND :max
//	                                      (lo = max(Take - Deposit, 0), max = 2^53; the OR part when Floor >= Take - Deposit)
//	BreakerStore.Load         BatchGetItem of c#<name> and c#<name>#override, eventually consistent
//	BreakerStore.Report       UpdateItem  on c#<name>, slot i = bucket mod 10, one of:
//	                                      add:   ADD r<i> :r, s<i> :s, f<i> :f, n<i> :n [SET watch_until = :w]
//	                                             IF epoch = :e AND b<i> = :b AND r<i>, s<i>, f<i>, n<i> are numbers
//	                                      reset: SET b<i> = :b, r<i> = :r, s<i> = :s, f<i> = :f, n<i> = :n [, watch_until = :w]
//	                                             IF epoch = :e AND (attribute_not_exists(b<i>) OR b<i> < :b)
//	                                      late:  SET watch_until = :w IF epoch = :e AND b<i> > :b
//	                                      (epoch = :e is "(attribute_not_exists(epoch) AND attribute_not_exists(state))
//	                                      OR epoch = 0" at epoch 0, where reset also sets state and epoch if
//	                                      absent); a refusal of the form guessed is followed by the form the
//	                                      item calls for: 1 write, 2 after a wrong guess, at most 3
//	BreakerStore.Transition   UpdateItem  SET state, epoch = :prev + 1, reopens, open_until (or REMOVE open_until)
//	                                      REMOVE every slot attribute b0 ... n9 (watch_until is kept)
//	                                      IF epoch = :prev (OR attribute_not_exists(epoch) when :prev is 0)
//	                                      then GetItem c#<name>#override
//	BreakerStore.AcquireProbe UpdateItem  SET epoch, lease_until, expires on c#<name>#p#<slot>
//	                                      IF attribute_not_exists(pk) OR NOT attribute_type(epoch, N) OR epoch <> :e
//	                                         OR NOT attribute_type(lease_until, N) OR lease_until < :now
//	                                      for each slot from a random one, until one succeeds
//	BreakerStore.SetOverride  UpdateItem  SET override = :o, until = :ms, expires = :exp on c#<name>#override
//	                                      (SET override = :o REMOVE until, expires without an end), unconditional
//
// Every conditional write asks for ReturnValuesOnConditionCheckFailure =
// ALL_OLD, so a refusal brings the item as it stands at no extra cost: the
// allowance that was too low (for the Global's "exhausted until" cache),
// the state that won the race, or the slot a Report found holding another
// bucket than it guessed. A missing state item and epoch 0 are the
// same thing: Load reports a never-written breaker as closed with epoch 0,
// and a transition from epoch 0 succeeds on a missing item (or one whose
// epoch is 0). The override lives in its own item so that an operator's
// write never races with transitions, which do not touch it.
//
// BETWEEN holds only for numbers in range, so an allowance of another type,
// negative or above 2^53 fails Apply's condition and is not written
// to. A fractional allowance in range (10.5) passes it: DynamoDB's
// conditions cannot test a number for being whole. The update is then
// applied, and decoding the result reports the *MalformedItemError. Apply
// grants nothing from a malformed allowance either way.
//
// Every write is an UpdateItem, SetOverride's included, so the stores need
// no PutItem (Actions). A deployment denies its functions writes to the
// override items with a condition on OverrideKeyPattern: template.yaml does,
// and SECURITY.md gives the operators' policy.
//
// # Retries and duplicates
//
// The client from NewClient retries a request at most once, and a retry
// after an attempt whose answer was lost (a connection reset after the
// request went out) may find the write already applied. The writes that
// are not idempotent are bounded by that one retry: a BudgetStore.Apply
// may apply its update twice (a doubled take only refuses sooner; a doubled
// deposit adds at most one update's Deposit of slack per retried call) and
// a BreakerStore.Report may add its counts twice (at most one report's
// counts per retried call; a retried reset finds its bucket already in
// the slot and is refused, then adds). A retried Transition finds next stored and
// reports success; a retried AcquireProbe finds its own lease, moves on to
// another slot, and leaves the first held until its lease lapses.
// SetOverride and the reads are idempotent.
//
// # Cost
//
// Every item is under 1 KB (the breaker state item, the largest, is at
// most about 850 bytes with a 128-byte name and every slot full): a write
// costs one write request unit, refused or not, and reading one item
// eventually consistently half a read request unit, whatever the fleet's
// size.
//
//	BudgetStore.Apply          1 write
//	BreakerStore.Load          1 request: 2 item reads (1 read unit)
//	BreakerStore.Report        1 write; 2 when the slot held another bucket than guessed, at most 3
//	BreakerStore.Transition    1 write + 1 read (½ read unit)
//	BreakerStore.AcquireProbe  1 write per slot tried: 1 if the first is free, limit when all are held
//	BreakerStore.SetOverride   1 write
//
// Load reads both items in one BatchGetItem rather than two GetItems: the
// same read units, one round trip instead of two, and no goroutine to run
// two at once. If DynamoDB leaves a key unprocessed (it does under
// throttling) Load fails rather than return a state without its override.
// Who calls what, and how often, is the callers' policy: on the healthy path
// a Breaker loads once per CacheTTL per environment and writes nothing, and
// a Global writes nothing until an environment needs a retry. Stats counts
// the requests each store made.
//
// # Operator override
//
// Writing the override item forces a breaker in every environment within
// about one CacheTTL (1 s by default). For the breaker "payments" in the
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
// DynamoDB takes at most 1,000 write units per second on one partition key,
// and each shard of a budget window is one key. Every Apply is one write,
// refused or not. A Global writes when an environment leases retries (one
// write per lease of several retries), when it flushes its request counts,
// and when a refused environment tries again after its "exhausted until"
// time. So the writes per second to one budget are about
//
//	peak granted retries per second / retries per lease
//	+ environments × flushes per environment per second
//	+ refusals per second (at most one per environment per window, thanks to the cache)
//
// and the number of shards S should keep each shard at half the limit:
// S = ceil(writes per second / 500). For example 2,000 retries/s in leases
// of 10 from 200 environments flushing once a second is about 600 writes/s:
// S = 2. A fleet that never retries more than a few hundred times a second
// needs one shard. More shards than needed cost nothing extra per write,
// but each shard holds 1/S of the allowance, so a take can be refused by an
// empty shard while another still has allowance: fewer retries than the
// ratio allows, never more. DynamoDB Local serialises writes to one item
// much more slowly (about 220 conditional updates per second on the
// development machine), which bounds what a test can push through one
// shard, not what the service takes.
package dynamo
