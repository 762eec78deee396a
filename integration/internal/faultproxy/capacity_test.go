package faultproxy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/integration/internal/faultproxy"
	"github.com/herdguard/herdguard/internal/capacity"
)

// itemUpstream answers every UpdateItem with ALL_NEW attributes holding an
// item of a 2,000-byte string (2 write units, as DynamoDB Local reports
// them) and every BatchGetItem with both items asked for, and counts what
// reached it.
func itemUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	item := `{"pk":{"S":"k"},"v":{"S":"` + strings.Repeat("x", 2000) + `"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		switch {
		case strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem"):
			_, _ = io.WriteString(w, `{"Attributes":`+item+`,"ConsumedCapacity":{"TableName":"t","CapacityUnits":2.0}}`)
		case strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".BatchGetItem"):
			// Answer the keys that were forwarded, each as a small item.
			var items []string
			for _, k := range []string{"a", "b"} {
				if strings.Contains(string(body), `"S":"`+k+`"`) {
					items = append(items, `{"pk":{"S":"`+k+`"}}`)
				}
			}
			_, _ = io.WriteString(w, `{"Responses":{"t":[`+strings.Join(items, ",")+`]},"UnprocessedKeys":{}}`)
		default:
			_, _ = io.WriteString(w, `{}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// With a capacity model the proxy bills a write by the item's size and
// throttles it, before forwarding, once the item's second is full; a
// BatchGetItem with one hot key is forwarded without it and answered with
// it unprocessed.
func TestCapacityThrottles(t *testing.T) {
	noLeaks(t)
	up, hits := itemUpstream(t)
	p, err := faultproxy.New(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	now := time.Unix(1_700_000_000, 0)
	m := capacity.NewMeter(capacity.Config{Throttle: true, WriteUnitsPerSecond: 5, ReadUnitsPerSecond: 1})
	p.SetCapacity(faultproxy.Capacity{Meter: m, Now: func() time.Time { return now }})
	c := sdkClient(t, p.URL())
	ctx := context.Background()
	update := func() error {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:        aws.String("t"),
			Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
			UpdateExpression: aws.String("SET v = :v"),
			ReturnValues:     types.ReturnValueAllNew,
		})
		return err
	}
	// Estimated at 1 unit (nothing known), billed 2; then estimated at 2:
	// 2 + 2 = 4 fit under 5, a third does not.
	for i := range 2 {
		if err := update(); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	err = update()
	var ptee *types.ProvisionedThroughputExceededException
	if !errors.As(err, &ptee) {
		t.Fatalf("the third 2-unit write in a second of 5: %v; want ProvisionedThroughputExceededException", err)
	}
	if hits.Load() != 2 {
		t.Errorf("upstream saw %d requests, want 2 (the throttled one not forwarded)", hits.Load())
	}
	s := m.Stats()
	if s.Writes != 2 || s.WriteUnits != 4 || s.ThrottledWrites != 1 || s.PeakItemWriteUnits != 4 || s.HottestWriteItem != "t/k" {
		t.Errorf("meter %+v", s)
	}

	// Reads: 1 unit a second; "a" takes it with two eventually consistent reads.
	batch := func() (*dynamodb.BatchGetItemOutput, error) {
		return c.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"t": {
			Keys: []map[string]types.AttributeValue{
				{"pk": &types.AttributeValueMemberS{Value: "a"}},
				{"pk": &types.AttributeValueMemberS{Value: "b"}},
			},
		}}})
	}
	if _, err := batch(); err != nil { // a and b: 0.5 each
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	for range 2 {
		if _, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "a"}}}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := batch() // a is hot, b is not
	if err != nil {
		t.Fatalf("BatchGetItem with one hot key: %v", err)
	}
	if n := len(out.UnprocessedKeys["t"].Keys); n != 1 || len(out.Responses["t"]) != 1 {
		t.Fatalf("answer: %d items, %d unprocessed; want 1 and 1", len(out.Responses["t"]), n)
	}
	if k := out.UnprocessedKeys["t"].Keys[0]["pk"].(*types.AttributeValueMemberS).Value; k != "a" {
		t.Errorf("unprocessed key %q, want the hot one, a", k)
	}
	if ps := p.Stats(); ps.Throttled != 1 || ps.Unprocessed != 1 {
		t.Errorf("proxy %v", ps)
	}
	// b was read in the batch (0.5): one more read fills its second.
	if _, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "b"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := batch(); !errors.As(err, &ptee) { // both hot now
		t.Fatalf("BatchGetItem with every key hot: %v; want ProvisionedThroughputExceededException", err)
	}
}
