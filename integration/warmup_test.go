package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/dynamo"
)

// A freshly started DynamoDB Local is a cold JVM: its first few hundred
// writes take longer than the stores' 50-100 ms timeouts (seen: every
// environment of a reliability test timing out on its first reports and
// falling back to its local state machine). The service has no such
// warm-up, so a test that ran on a cold DynamoDB Local would measure the
// JVM, not herdguard. warmUpDynamoDB is therefore called on every DynamoDB
// Local a test binary starts (TestMain) or restarts (relOwnDynamo), before
// any test uses it.
const (
	// warmWorkers make requests concurrently, as the tests' fleets do.
	warmWorkers = 4
	// warmRoundRequests is one round's requests (each worker makes a third
	// of its share as UpdateItem, GetItem and BatchGetItem).
	warmRoundRequests = 150
	// warmMinRounds are always made: a few hundred requests, whatever the
	// first round's latency.
	warmMinRounds = 3
	// warmPlateau ends the warm-up when this many rounds in a row have not
	// improved the best p90 so far by a fifth: on a machine too busy for
	// warmTargetP90, the latency left is the machine's, not the JVM's.
	warmPlateau = 3
	// warmMaxRounds bounds the warm-up in any case: the tests then run on
	// what the machine gives, and the warm-up's figures say so.
	warmMaxRounds = 15
	// warmTargetP90 ends the warm-up once a round's p90 latency is at or
	// below it: a fifth of herdguard's default StoreTimeout (50 ms).
	warmTargetP90 = 10 * time.Millisecond
	// warmKeys are the items the writes spread over (a few hot items, as
	// the stores' budget shards and breaker windows are).
	warmKeys = 8
)

// warmUpResult is what a warm-up did; it is printed, never asserted.
type warmUpResult struct {
	requests, failed int
	p90s             []time.Duration // per round
	maxes            []time.Duration // per round
	took             time.Duration
}

func (w warmUpResult) String() string {
	ps := make([]string, len(w.p90s))
	for i, p := range w.p90s {
		ps[i] = p.Round(100*time.Microsecond).String() + "/" + w.maxes[i].Round(time.Millisecond).String()
	}
	reached := "reached"
	if len(w.p90s) == 0 || w.p90s[len(w.p90s)-1] > warmTargetP90 {
		reached = "not reached: latency stopped improving or the rounds ran out (a busy machine; the tests run on what it gives)"
	}
	return fmt.Sprintf("%d requests (%d failed) in %d rounds, %v; p90/max latency per round [%s]; target p90 %v %s",
		w.requests, w.failed, len(w.p90s), w.took.Round(time.Millisecond), strings.Join(ps, " "), warmTargetP90, reached)
}

// warmUpSeq makes the scratch tables' names unique within the binary.
var warmUpSeq atomic.Uint64

// warmUpDynamoDB makes rounds of UpdateItem (conditional, some refused, as
// the stores' writes are), GetItem and BatchGetItem requests on a scratch
// table of its own at endpoint, after at least warmMinRounds rounds until a
// round's p90 latency is at most warmTargetP90, or warmPlateau rounds in a
// row brought no improvement, or warmMaxRounds rounds have been made, then
// deletes the table. An error means DynamoDB
// Local does not work (a table cannot be created, or every request of a
// round failed); slowness is only reported.
func warmUpDynamoDB(endpoint string) (warmUpResult, error) {
	api, closeIdle := newClient(endpoint)
	defer closeIdle()
	start := time.Now()
	table := fmt.Sprintf("hg_warmup_%d_%d", time.Now().UnixNano(), warmUpSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), tableOpTimeout)
	defer cancel()
	if err := dynamo.CreateTable(ctx, api, table); err != nil {
		return warmUpResult{}, fmt.Errorf("warm-up: create table %s: %w", table, err)
	}
	var res warmUpResult
	var err error
	var best time.Duration // lowest p90 so far; 0 before the first round
	flat := 0
	for round := 0; round < warmMaxRounds; round++ {
		lat, failed, firstErr := warmUpRound(api, table, round)
		res.requests += len(lat) + failed
		res.failed += failed
		if len(lat) == 0 {
			err = fmt.Errorf("warm-up: every request of round %d failed: %w", round, firstErr)
			break
		}
		p90 := relPercentile(lat, 90)
		res.p90s = append(res.p90s, p90)
		res.maxes = append(res.maxes, relPercentile(lat, 100))
		if best == 0 || p90 < best*4/5 {
			flat = 0
		} else {
			flat++
		}
		if best == 0 || p90 < best {
			best = p90
		}
		if round+1 >= warmMinRounds && failed == 0 && (p90 <= warmTargetP90 || flat >= warmPlateau) {
			break
		}
	}
	dctx, dcancel := context.WithTimeout(context.Background(), tableOpTimeout)
	defer dcancel()
	if derr := dynamo.DeleteTable(dctx, api, table); derr != nil {
		err = errors.Join(err, fmt.Errorf("warm-up: delete table %s: %w", table, derr))
	}
	res.took = time.Since(start)
	return res, err
}

// warmUpRound makes one round's requests from warmWorkers goroutines and
// returns the latencies of those that succeeded (a write refused by its
// condition succeeded: it is an answer), how many failed, and the first
// failure.
func warmUpRound(api *dynamodb.Client, table string, round int) (lat []time.Duration, failed int, firstErr error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	per := warmRoundRequests / warmWorkers / 3
	for w := range warmWorkers {
		wg.Go(func() {
			var mine []time.Duration
			var bad int
			var errFirst error
			for i := range per {
				key := func(j int) map[string]types.AttributeValue {
					return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "warm#" + strconv.Itoa(j%warmKeys)}}
				}
				k := w + i
				reqs := []func(ctx context.Context) error{
					func(ctx context.Context) error {
						// A conditional ADD like the stores' writes; the
						// condition refuses every other round, so that the
						// refusal path (ALL_OLD) warms up too.
						limit := "1000000000"
						if (round+i)%2 == 1 {
							limit = "0"
						}
						_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
							TableName:        aws.String(table),
							Key:              key(k),
							UpdateExpression: aws.String("ADD n :one SET expires = :exp"),
							ConditionExpression: aws.String(
								"attribute_not_exists(n) OR n BETWEEN :zero AND :max"),
							ExpressionAttributeValues: map[string]types.AttributeValue{
								":one":  &types.AttributeValueMemberN{Value: "1"},
								":zero": &types.AttributeValueMemberN{Value: "0"},
								":max":  &types.AttributeValueMemberN{Value: limit},
								":exp":  &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)},
							},
							ReturnValues:                        types.ReturnValueAllNew,
							ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
						})
						var ccf *types.ConditionalCheckFailedException
						if errors.As(err, &ccf) {
							return nil
						}
						return err
					},
					func(ctx context.Context) error {
						_, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(k), ConsistentRead: aws.Bool(true)})
						return err
					},
					func(ctx context.Context) error {
						_, err := api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
							table: {Keys: []map[string]types.AttributeValue{key(k), key(k + 1)}},
						}})
						return err
					},
				}
				for _, req := range reqs {
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					s := time.Now()
					err := req(ctx)
					d := time.Since(s)
					cancel()
					if err != nil {
						bad++
						if errFirst == nil {
							errFirst = err
						}
						continue
					}
					mine = append(mine, d)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			failed += bad
			if firstErr == nil {
				firstErr = errFirst
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return lat, failed, firstErr
}
