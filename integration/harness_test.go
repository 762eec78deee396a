package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/dynamo"
)

// Limits of the test harness's own DynamoDB client. The SDK has no timeout of
// its own, and a stalled call would otherwise hang a test until the binary's
// -timeout; these turn a stall into a failure that names the call.
const (
	// callTimeout bounds one HTTP attempt of a harness client and is the
	// default deadline of callContext.
	callTimeout = 10 * time.Second
	// tableOpTimeout bounds creating or deleting a table.
	tableOpTimeout = 30 * time.Second
	// harnessMaxAttempts is the SDK's attempts per call (first try included).
	harnessMaxAttempts = 3
)

// requireDynamoDB skips the test under -short and fails it if TestMain did not
// provide an endpoint (which cannot happen unless TestMain changed).
func requireDynamoDB(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs DynamoDB Local; skipped under -short")
	}
	if dynamoEndpoint == "" {
		t.Fatal("no DynamoDB endpoint: TestMain did not start DynamoDB Local")
	}
}

// newAPI returns a DynamoDB client for the shared DynamoDB Local: static
// credentials, region us-east-1, the endpoint from TestMain, a bounded HTTP
// client (callTimeout per attempt) and a retryer with at most
// harnessMaxAttempts attempts and no client-side retry quota, so that one
// test's throttling cannot starve another's retries. Its idle connections are
// closed when the test ends, so goroutine-leak checks stay clean.
//
// This is the harness's client for setting up and inspecting tables; code
// under test should build its own (dynamo.NewClient) with its own limits.
// Under -short the test is skipped.
func newAPI(t testing.TB) *dynamodb.Client {
	t.Helper()
	requireDynamoDB(t)
	api, closeIdle := newClient(dynamoEndpoint)
	t.Cleanup(closeIdle)
	return api
}

// newClient builds the client newAPI describes and returns a function that
// closes its idle connections.
func newClient(endpoint string) (*dynamodb.Client, func()) {
	transport := &http.Transport{
		Proxy:                 nil, // DynamoDB Local is on this machine; never go through a proxy
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   100, // fleet tests run 20 environments at once
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: callTimeout,
	}
	httpClient := &http.Client{Transport: transport, Timeout: callTimeout}
	api := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("herdguard", "herdguard", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   httpClient,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = harnessMaxAttempts
			o.MaxBackoff = 500 * time.Millisecond
			o.RateLimiter = ratelimit.None
		}),
	})
	return api, transport.CloseIdleConnections
}

// callContext returns a context for one DynamoDB call made by a test: it ends
// after callTimeout, or when the test ends.
func callContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// tableSeq makes table names unique within one test binary (one DynamoDB
// Local per binary, so that is enough).
var tableSeq atomic.Uint64

// tableName returns a valid, unique DynamoDB table name derived from the
// test's name: 3-255 characters of [a-zA-Z0-9_.-].
func tableName(t testing.TB) string {
	const maxBase = 200
	var b strings.Builder
	for _, r := range t.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= maxBase {
			break
		}
	}
	return fmt.Sprintf("hg_%s_%d", b.String(), tableSeq.Add(1))
}

// newTable creates a fresh table in the shared DynamoDB Local with
// dynamo.CreateTable (herdguard's layout: partition key pk (S), TTL attribute
// expires, on-demand billing), and deletes it when the test ends. Under
// -short the test is skipped.
func newTable(t testing.TB) string {
	t.Helper()
	api := newAPI(t)
	name := tableName(t)
	ctx, cancel := context.WithTimeout(context.Background(), tableOpTimeout)
	defer cancel()
	if err := dynamo.CreateTable(ctx, api, name); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), tableOpTimeout)
		defer cancel()
		if err := dynamo.DeleteTable(ctx, api, name); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
	})
	return name
}

// TestHarnessSmoke checks the harness itself against the shared DynamoDB
// Local: a table with herdguard's layout, a write read back, and a failed
// conditional write surfacing as ConditionalCheckFailedException with the item.
func TestHarnessSmoke(t *testing.T) {
	api := newAPI(t)
	table := newTable(t)

	desc, err := api.DescribeTable(callContext(t), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatalf("DescribeTable: %v", err)
	}
	if ks := desc.Table.KeySchema; len(ks) != 1 || aws.ToString(ks[0].AttributeName) != "pk" || ks[0].KeyType != types.KeyTypeHash {
		t.Errorf("key schema = %+v, want only pk HASH", ks)
	}
	if bm := desc.Table.BillingModeSummary; bm == nil || bm.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("billing mode summary = %+v, want PAY_PER_REQUEST", bm)
	}
	ttl, err := api.DescribeTimeToLive(callContext(t), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatalf("DescribeTimeToLive: %v", err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "expires" || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
		t.Errorf("TTL = %+v, want attribute expires ENABLED", d)
	}

	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "smoke#1"}}
	item := map[string]types.AttributeValue{
		"pk":      key["pk"],
		"n":       &types.AttributeValueMemberN{Value: "41"},
		"expires": &types.AttributeValueMemberN{Value: "4102444800"},
	}
	if _, err := api.PutItem(callContext(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	got, err := api.GetItem(callContext(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	if n, ok := got.Item["n"].(*types.AttributeValueMemberN); !ok || n.Value != "41" {
		t.Fatalf("GetItem n = %#v, want N 41", got.Item["n"])
	}

	// A conditional update that holds, then the same condition failing.
	upd := func() (*dynamodb.UpdateItemOutput, error) {
		return api.UpdateItem(callContext(t), &dynamodb.UpdateItemInput{
			TableName:                           aws.String(table),
			Key:                                 key,
			UpdateExpression:                    aws.String("ADD n :one"),
			ConditionExpression:                 aws.String("n = :want"),
			ExpressionAttributeValues:           map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}, ":want": &types.AttributeValueMemberN{Value: "41"}},
			ReturnValues:                        types.ReturnValueUpdatedNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
	}
	out, err := upd()
	if err != nil {
		t.Fatalf("first conditional UpdateItem: %v", err)
	}
	if n, ok := out.Attributes["n"].(*types.AttributeValueMemberN); !ok || n.Value != "42" {
		t.Fatalf("first conditional UpdateItem n = %#v, want N 42", out.Attributes["n"])
	}
	_, err = upd()
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("second conditional UpdateItem: err = %v, want ConditionalCheckFailedException", err)
	}
	if n, ok := ccf.Item["n"].(*types.AttributeValueMemberN); !ok || n.Value != "42" {
		t.Errorf("ConditionalCheckFailedException item n = %#v, want N 42 (ALL_OLD)", ccf.Item["n"])
	}

	// attribute_not_exists on an existing item fails the same way.
	_, err = api.PutItem(callContext(t), &dynamodb.PutItemInput{
		TableName:           aws.String(table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if !errors.As(err, &ccf) {
		t.Fatalf("PutItem attribute_not_exists(pk) on an existing item: err = %v, want ConditionalCheckFailedException", err)
	}
}

// TestTableNames checks that names derived from any test name are valid
// DynamoDB table names and unique. It needs no DynamoDB.
func TestTableNames(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range []string{"a", "weird name/with:slashes#and✓unicode", strings.Repeat("x", 300)} {
		t.Run(name, func(t *testing.T) {
			for range 2 {
				got := tableName(t)
				if len(got) < 3 || len(got) > 255 {
					t.Errorf("tableName = %q: length %d, want 3..255", got, len(got))
				}
				for _, r := range got {
					if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
						t.Errorf("tableName = %q: invalid character %q", got, r)
					}
				}
				if seen[got] {
					t.Errorf("tableName = %q twice", got)
				}
				seen[got] = true
			}
		})
	}
}
