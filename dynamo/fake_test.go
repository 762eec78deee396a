package dynamo

import (
	"context"
	"errors"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/herdguard/herdguard/internal/layout"
)

// fakeAPI is an API whose answers the test scripts. It does not evaluate
// expressions (that is DynamoDB's job, tested against DynamoDB Local in
// package integration); it records the requests and returns what the
// test's functions return, to exercise the stores' mapping of answers and
// errors. A method without a function fails the call.
type fakeAPI struct {
	batchGetItem func(*dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error)
	getItem      func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
	updateItem   func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)

	mu       sync.Mutex
	requests []fakeRequest
}

type fakeRequest struct {
	op  string
	key string // pk of the (first) item
}

var errNotScripted = errors.New("fakeAPI: call not scripted")

func (f *fakeAPI) record(op string, key map[string]types.AttributeValue) {
	pk, _ := key[layout.AttrPK].(*types.AttributeValueMemberS)
	r := fakeRequest{op: op}
	if pk != nil {
		r.key = pk.Value
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r)
}

func (f *fakeAPI) calls() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.requests...)
}

func (f *fakeAPI) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	for _, ka := range in.RequestItems {
		f.record("BatchGetItem", ka.Keys[0])
	}
	if f.batchGetItem == nil {
		return nil, errNotScripted
	}
	return f.batchGetItem(in)
}

func (f *fakeAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.record("GetItem", in.Key)
	if f.getItem == nil {
		return nil, errNotScripted
	}
	return f.getItem(in)
}

func (f *fakeAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.record("UpdateItem", in.Key)
	if f.updateItem == nil {
		return nil, errNotScripted
	}
	return f.updateItem(in)
}

// ccf is the error DynamoDB returns for a refused conditional write with
// ReturnValuesOnConditionCheckFailure ALL_OLD, as the SDK wraps it.
func ccf(item map[string]types.AttributeValue) error {
	return &smithy.OperationError{
		ServiceID:     "DynamoDB",
		OperationName: "UpdateItem",
		Err:           &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed"), Item: item},
	}
}

// throttled is the error of a request DynamoDB throttled, after the SDK
// gave up retrying.
func throttled() error {
	return &smithy.OperationError{
		ServiceID:     "DynamoDB",
		OperationName: "UpdateItem",
		Err:           &types.ProvisionedThroughputExceededException{Message: aws.String("Rate of requests exceeds the allowed throughput")},
	}
}

func sAV(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func nAV(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }
